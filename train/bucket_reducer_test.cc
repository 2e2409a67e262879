// DDP's bucket reducer (sync/bucket_reducer.h) under the trainer's MLP's
// real backward, through its adapter (train/mlp_buffers.h).
#include "sync/bucket_reducer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "comm/testing/fake_backend.h"
#include "nn/init.h"
#include "nn/mlp.h"
#include "torch_compat/generator.h"
#include "train/mlp_buffers.h"

namespace ringlab::train {
namespace {

using sync::Bucket;
using sync::BucketReducer;
using sync::kFirstBucketBytes;
using sync::MakeAllReduceHook;
using trace::Tracer;

std::vector<Bucket> AssignBuckets(const nn::MlpLayout& layout,
                                  size_t first_cap_bytes, size_t cap_bytes) {
  return sync::AssignBuckets(SyncLayoutOf(layout), first_cap_bytes, cap_bytes);
}

std::vector<std::string> Names(const Bucket& bucket) {
  std::vector<std::string> names;
  for (const sync::TensorSlot& t : bucket.tensors) names.push_back(t.name);
  return names;
}

TEST(AssignBucketsTest, DdpDefaultsOnTheFashionMnistMlp) {
  const nn::MlpLayout layout({784, 1024, 1024, 10});
  // The first bucket closes once it reaches 1 MiB: fc2.weight (4 MiB) takes
  // it past; the rest (3.1 MiB) stays under 25 MiB.
  const auto buckets = AssignBuckets(layout, kFirstBucketBytes, 25u << 20);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(Names(buckets[0]),
            (std::vector<std::string>{"fc3.bias", "fc3.weight", "fc2.bias",
                                      "fc2.weight"}));
  EXPECT_EQ(buckets[0].begin, layout.weight(1).offset);
  EXPECT_EQ(buckets[0].end, layout.num_params());
  EXPECT_EQ(Names(buckets[1]),
            (std::vector<std::string>{"fc1.bias", "fc1.weight"}));
  EXPECT_EQ(buckets[1].begin, 0u);
  EXPECT_EQ(buckets[1].end, layout.weight(1).offset);
}

TEST(AssignBucketsTest, CapsDecideTheGrouping) {
  const nn::MlpLayout layout({6, 5, 4, 3});
  const auto each = AssignBuckets(layout, 1, 1);  // a tensor per bucket
  ASSERT_EQ(each.size(), 6u);
  size_t end = layout.num_params();
  for (size_t b = 0; b < each.size(); ++b) {
    const nn::TensorSlot& t = layout.tensors()[5 - b];
    EXPECT_EQ(Names(each[b]), std::vector<std::string>{t.name});
    EXPECT_EQ(each[b].end, end);  // contiguous, backwards
    EXPECT_EQ(each[b].begin, t.offset);
    end = t.offset;
  }
  EXPECT_EQ(AssignBuckets(layout, 1 << 20, 1 << 20).size(), 1u);
  EXPECT_THROW(AssignBuckets(layout, 0, 1), std::invalid_argument);
}

// A bucket closes as soon as its size reaches its cap, keeping the tensor
// that reached it (shared/pytorch-hooks-facts.md 1.0: PyTorch's
// compute_bucket_assignment_by_size compares with >=). Layouts where a
// bucket lands exactly on a cap: fc2's bias (512 floats) and weight (511 x
// 512) are 512 x 512 floats, exactly 1 MiB; a bucket closed at > would take
// fc1 in too. (A > went unseen: no test had a tensor land on a cap.)
TEST(AssignBucketsTest, ABucketThatReachesItsCapExactlyCloses) {
  const nn::MlpLayout layout({10, 511, 512});
  const auto buckets = AssignBuckets(layout, kFirstBucketBytes, 25u << 20);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(Names(buckets[0]),
            (std::vector<std::string>{"fc2.bias", "fc2.weight"}));
  EXPECT_EQ((buckets[0].end - buckets[0].begin) * sizeof(float),
            kFirstBucketBytes);
  EXPECT_EQ(Names(buckets[1]),
            (std::vector<std::string>{"fc1.bias", "fc1.weight"}));
  // The same at a later cap: 6,5,4,3 has (in bucket order) fc3 = 3 + 12
  // floats, fc2 = 4 + 20, fc1 = 5 + 30; caps of exactly fc3 and fc2.
  const auto exact = AssignBuckets(nn::MlpLayout({6, 5, 4, 3}), 15 * 4, 24 * 4);
  ASSERT_EQ(exact.size(), 3u);
  EXPECT_EQ(Names(exact[0]),
            (std::vector<std::string>{"fc3.bias", "fc3.weight"}));
  EXPECT_EQ(Names(exact[1]),
            (std::vector<std::string>{"fc2.bias", "fc2.weight"}));
  EXPECT_EQ(Names(exact[2]),
            (std::vector<std::string>{"fc1.bias", "fc1.weight"}));
}

// Rank 0 of two whose peer's gradients are `peer`: averages each bucket with
// the peer's values at the same offsets, recording the order of the buckets.
class PeerBackend : public comm::Backend {
 public:
  PeerBackend(const float* base, std::vector<float> peer)
      : base_(base), peer_(std::move(peer)) {}
  void AllReduce(void* buffer, size_t count, comm::DataType,
                 comm::ReduceOp op) override {
    float* const data = static_cast<float*>(buffer);
    const size_t offset = static_cast<size_t>(data - base_);
    bool first;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      offsets_.push_back(offset);
      threads_.push_back(std::this_thread::get_id());
      first = offsets_.size() == 1;
    }
    started_ = true;
    if (first) std::this_thread::sleep_for(hold_first_);
    if (offset == fail_at_) throw comm::CommError("peer: rank 1 exited");
    for (size_t i = 0; i < count; ++i) {
      data[i] = (data[i] + peer_[offset + i]) / 2;
    }
    EXPECT_EQ(op, comm::ReduceOp::kAvg);
  }
  void AllGather(const void*, void*, size_t, comm::DataType) override {}
  void Broadcast(void*, size_t, comm::DataType, int) override {}
  void Barrier() override {}

  std::vector<size_t> offsets() {
    std::lock_guard<std::mutex> lock(mutex_);
    return offsets_;
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_;
  }
  std::atomic<bool> started_{false};
  std::chrono::milliseconds hold_first_{0};  // the first call's time
  size_t fail_at_ = SIZE_MAX;

 private:
  const float* base_;
  std::vector<float> peer_;
  std::mutex mutex_;
  std::vector<size_t> offsets_;
  std::vector<std::thread::id> threads_;
};

// The communicator over a PeerBackend, and the backend.
struct PeerComm {
  PeerComm(const float* base, std::vector<float> peer)
      : comm(comm::testing::CommunicatorOver(
            std::make_unique<PeerBackend>(base, std::move(peer)), 0, 2,
            &backend)) {}
  PeerBackend* backend = nullptr;
  std::unique_ptr<comm::Communicator> comm;
};

// Forwards to the reducer; when backward reports its last layer, records
// whether a bucket's allreduce had started (waiting up to 10 s for it), which
// with overlap it must have: the first buckets were complete long before.
class ProbeObserver : public nn::BackwardObserver {
 public:
  ProbeObserver(BucketReducer& reducer, PeerBackend& comm, bool expect_started)
      : reducer_(reducer), comm_(comm), expect_started_(expect_started) {}
  void OnLayerGrads(int layer, std::function<void()> wait_ready) override {
    if (layer == 0) {
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (expect_started_ && !comm_.started_ &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      started_before_last_layer = comm_.started_;
    }
    reducer_.OnLayerGrads(layer, std::move(wait_ready));
  }
  bool started_before_last_layer = false;

 private:
  LayerToTensorObserver reducer_;
  PeerBackend& comm_;
  bool expect_started_;
};

struct Fixture {
  nn::MlpLayout layout{{6, 5, 4, 3}};
  std::unique_ptr<nn::Mlp> model = nn::CreateMlp(nn::Device::kCpu, layout);
  MlpBuffers buffers{*model};
  std::vector<float> x = std::vector<float>(2 * 6, 0.5f);
  std::vector<int64_t> y = {0, 2};
  std::vector<float> peer = std::vector<float>(layout.num_params(), 0.25f);
  Fixture() {
    std::vector<float> p(layout.num_params());
    torch_compat::TorchGenerator generator(1);
    nn::InitLikeTorch(layout, generator, p.data());
    model->SetParams(p.data());
  }
  // The averaged gradients, reduced in one piece.
  std::vector<float> Expected() {
    auto plain = nn::CreateMlp(nn::Device::kCpu, layout);
    std::vector<float> p(layout.num_params()), g(layout.num_params());
    model->GetParams(p.data());
    plain->SetParams(p.data());
    plain->ForwardBackward(x.data(), y.data(), 2);
    plain->GetGrads(g.data());
    for (size_t i = 0; i < g.size(); ++i) g[i] = (g[i] + peer[i]) / 2;
    return g;
  }
};

void CheckBucketsReduced(bool overlap) {
  Fixture f;
  PeerComm peer(f.model->grads(), f.peer);
  PeerBackend& comm = *peer.backend;
  Tracer tracer(false, 0);
  auto hook = MakeAllReduceHook();
  BucketReducer reducer(*peer.comm, f.buffers, f.model->grads(),
                        AssignBuckets(f.layout, 1, 1), overlap, *hook, tracer);
  const std::vector<float> expected = f.Expected();
  for (int step = 0; step < 2; ++step) {
    comm.started_ = false;
    ProbeObserver probe(reducer, comm, overlap);
    f.model->ForwardBackward(f.x.data(), f.y.data(), 2, &probe);
    EXPECT_EQ(probe.started_before_last_layer, overlap);
    reducer.Finish();
    std::vector<float> grads(f.layout.num_params());
    f.model->GetGrads(grads.data());
    EXPECT_EQ(grads, expected);  // bitwise: buckets change no sum
  }
  std::vector<size_t> order;
  for (const Bucket& b : reducer.buckets()) order.push_back(b.begin);
  std::vector<size_t> twice = order;
  twice.insert(twice.end(), order.begin(), order.end());
  EXPECT_EQ(comm.offsets(), twice);  // each bucket once per step, in order
}

TEST(BucketReducerTest, OverlapStartsBucketsDuringBackward) {
  CheckBucketsReduced(/*overlap=*/true);
}

TEST(BucketReducerTest, WithoutOverlapBucketsWaitForBackward) {
  CheckBucketsReduced(/*overlap=*/false);
}

// With overlap, the buckets still queued when backward ends are reduced by
// the thread that calls Finish, which would only wait for them, instead of
// being handed to the communication thread. Here the communication thread
// holds the first bucket for a second, long after backward has ended: the
// other five must go out from this thread, after it and in order.
TEST(BucketReducerTest, FinishReducesWhatBackwardLeftQueuedItself) {
  Fixture f;
  PeerComm peer(f.model->grads(), f.peer);
  PeerBackend& comm = *peer.backend;
  comm.hold_first_ = std::chrono::seconds(1);
  Tracer tracer(false, 0);
  auto hook = MakeAllReduceHook();
  const auto buckets = AssignBuckets(f.layout, 1, 1);
  BucketReducer reducer(*peer.comm, f.buffers, f.model->grads(), buckets,
                        /*overlap=*/true, *hook, tracer);
  ProbeObserver probe(reducer, comm, /*expect_started=*/true);
  f.model->ForwardBackward(f.x.data(), f.y.data(), 2, &probe);
  ASSERT_TRUE(probe.started_before_last_layer);
  reducer.Finish();
  std::vector<float> grads(f.layout.num_params());
  f.model->GetGrads(grads.data());
  EXPECT_EQ(grads, f.Expected());
  std::vector<size_t> order;
  for (const Bucket& b : buckets) order.push_back(b.begin);
  EXPECT_EQ(comm.offsets(), order);
  const std::vector<std::thread::id> threads = comm.threads();
  ASSERT_EQ(threads.size(), buckets.size());
  EXPECT_NE(threads[0], std::this_thread::get_id());
  for (size_t b = 1; b < threads.size(); ++b) {
    EXPECT_EQ(threads[b], std::this_thread::get_id()) << "bucket " << b;
  }
}

// DDP reduces its first step in one bucket, the whole model in model order,
// and rebuilds the buckets for the steps after (pytorch-hooks-facts 1.0):
// with 3 or more ranks a ring's sums depend on where each buffer starts.
TEST(BucketReducerTest, StepZeroIsOneBucketOfTheWholeModel) {
  Fixture f;
  PeerComm peer(f.model->grads(), f.peer);
  Tracer tracer(false, 0);
  auto hook = MakeAllReduceHook();
  const auto buckets = AssignBuckets(f.layout, 1, 1);
  BucketReducer reducer(*peer.comm, f.buffers, f.model->grads(), buckets,
                        /*overlap=*/true, *hook, tracer);
  const std::vector<float> expected = f.Expected();
  std::vector<size_t> want = {0};
  for (int step = 0; step < 3; ++step) {
    reducer.BeginStep(step);
    LayerToTensorObserver adapted(reducer);
    f.model->ForwardBackward(f.x.data(), f.y.data(), 2, &adapted);
    reducer.Finish();
    std::vector<float> grads(f.layout.num_params());
    f.model->GetGrads(grads.data());
    EXPECT_EQ(grads, expected) << "step " << step;
    if (step > 0) {
      for (const Bucket& b : buckets) want.push_back(b.begin);
    }
  }
  EXPECT_EQ(peer.backend->offsets(), want);
  const Bucket whole = sync::WholeModelBucket(SyncLayoutOf(f.layout));
  EXPECT_EQ(whole.begin, 0u);
  EXPECT_EQ(whole.end, f.layout.num_params());
  EXPECT_EQ(Names(whole),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight",
                                      "fc2.bias", "fc3.weight", "fc3.bias"}));
}

TEST(BucketReducerTest, AFailedBucketFailsFinishAndStopsTheRest) {
  for (bool overlap : {true, false}) {
    Fixture f;
    PeerComm peer(f.model->grads(), f.peer);
    PeerBackend& comm = *peer.backend;
    const auto buckets = AssignBuckets(f.layout, 1, 1);
    comm.fail_at_ = buckets[1].begin;
    Tracer tracer(false, 0);
    auto hook = MakeAllReduceHook();
    BucketReducer reducer(*peer.comm, f.buffers, f.model->grads(), buckets,
                          overlap, *hook, tracer);
    LayerToTensorObserver adapted(reducer);
    f.model->ForwardBackward(f.x.data(), f.y.data(), 2, &adapted);
    EXPECT_THROW(reducer.Finish(), comm::CommError) << "overlap " << overlap;
    EXPECT_EQ(comm.offsets(),
              (std::vector<size_t>{buckets[0].begin, buckets[1].begin}));
  }
}

}  // namespace
}  // namespace ringlab::train
