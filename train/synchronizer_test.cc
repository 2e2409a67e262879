#include "train/synchronizer.h"

#include <gtest/gtest.h>

#include <vector>

#include "comm/testing/fake_backend.h"
#include "nn/mlp.h"

namespace ringlab::train {
namespace {

// A two-rank communicator whose other rank is simulated: it holds `peer` and
// reduces with it. Multi-process behaviour is tested in trainer_test; this
// checks what each synchroniser reduces, and when.
class PeerBackend : public comm::Backend {
 public:
  explicit PeerBackend(std::vector<float> peer) : peer_(std::move(peer)) {}
  void AllReduce(void* buffer, size_t count, comm::DataType,
                 comm::ReduceOp op) override {
    float* const data = static_cast<float*>(buffer);
    ++allreduce_calls;
    ASSERT_EQ(count, peer_.size());
    for (size_t i = 0; i < count; ++i) {
      data[i] += peer_[i];
      if (op == comm::ReduceOp::kAvg) data[i] /= 2;
    }
  }
  void Broadcast(void*, size_t, comm::DataType, int) override {}
  void Barrier() override {}
  void AllGather(const void*, void*, size_t, comm::DataType) override {}
  int allreduce_calls = 0;

 private:
  std::vector<float> peer_;
};

// Rank 0 of two over a PeerBackend; `backend` is it.
struct PeerCommunicator {
  explicit PeerCommunicator(std::vector<float> peer)
      : comm(comm::testing::CommunicatorOver(
            std::make_unique<PeerBackend>(std::move(peer)), 0, 2, &backend)) {}
  PeerBackend* backend = nullptr;
  std::unique_ptr<comm::Communicator> comm;
};

TEST(SynchronizerTest, PeriodicModelAveragerSchedule) {
  // PeriodicModelAverager(period=3, warmup_steps=2): averages at 2, 5, 8, ...
  SyncOptions options{3, 2};
  std::vector<int64_t> averaged;
  for (int64_t step = 0; step < 10; ++step) {
    if (IsAveragingStep(step, options)) averaged.push_back(step);
  }
  EXPECT_EQ(averaged, (std::vector<int64_t>{2, 5, 8}));
  EXPECT_TRUE(IsAveragingStep(0, {1, 0}));
}

TEST(SynchronizerTest, AllReduceAveragesGradientsOnly) {
  const nn::MlpLayout layout({2, 2});
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  const std::vector<float> params = {1, 2, 3, 4, 5, 6};
  model->SetParams(params.data());
  const float x[2] = {1.0f, -1.0f};
  const int64_t y[1] = {1};
  auto plain = nn::CreateMlp(nn::Device::kCpu, layout);
  plain->SetParams(params.data());
  plain->ForwardBackward(x, y, 1);
  std::vector<float> grads(6);
  plain->GetGrads(grads.data());

  PeerCommunicator comm(std::vector<float>(6, 1.0f));
  auto sync = CreateSynchronizer("allreduce", *comm.comm, *model, {});
  ASSERT_NE(sync->backward_observer(), nullptr);
  model->ForwardBackward(x, y, 1, sync->backward_observer());
  sync->AfterBackward(*model);
  std::vector<float> averaged(6);
  model->GetGrads(averaged.data());
  // (g + 1) / 2 in float: exact here, both operations are exact or correctly
  // rounded the same way on both sides.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(averaged[i], (grads[i] + 1.0f) / 2);
  sync->AfterStep(*model, 0);
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
  std::vector<float> after(6);
  model->GetParams(after.data());
  EXPECT_EQ(after, params);
}

TEST(SynchronizerTest, ParamAvgAveragesParametersOnSchedule) {
  const nn::MlpLayout layout({2, 2});
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  const std::vector<float> params = {1, 2, 3, 4, 5, 6};
  model->SetParams(params.data());
  PeerCommunicator comm(std::vector<float>(6, 3.0f));
  auto sync = CreateSynchronizer("param_avg", *comm.comm, *model, {2, 1});
  sync->AfterBackward(*model);
  sync->AfterStep(*model, 0);  // warm-up: nothing
  EXPECT_EQ(comm.backend->allreduce_calls, 0);
  sync->AfterStep(*model, 1);  // (1 - 1) % 2 == 0: average
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
  std::vector<float> after(6);
  model->GetParams(after.data());
  EXPECT_EQ(after, (std::vector<float>{2, 2.5, 3, 3.5, 4, 4.5}));
  sync->AfterStep(*model, 2);
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
}

TEST(SynchronizerTest, NoneNeverCommunicates) {
  const nn::MlpLayout layout({2, 2});
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  PeerCommunicator comm(std::vector<float>(6, 3.0f));
  auto sync = CreateSynchronizer("none", *comm.comm, *model, {});
  for (int step = 0; step < 5; ++step) {
    sync->AfterBackward(*model);
    sync->AfterStep(*model, step);
  }
  EXPECT_EQ(comm.backend->allreduce_calls, 0);
}

TEST(SynchronizerTest, RejectsBadNamesAndOptions) {
  PeerCommunicator comm({});
  auto model = nn::CreateMlp(nn::Device::kCpu, nn::MlpLayout({2, 2}));
  EXPECT_THROW(CreateSynchronizer("ddp", *comm.comm, *model, {}),
               std::invalid_argument);
  EXPECT_THROW(ValidateSync("ddp", {}), std::invalid_argument);
  EXPECT_THROW(ValidateSync("param_avg", {0, 0}), std::invalid_argument);
  EXPECT_THROW(ValidateSync("param_avg", {1, -1}), std::invalid_argument);
  SyncOptions no_cap;
  no_cap.bucket_cap_bytes = 0;
  EXPECT_THROW(ValidateSync("allreduce", no_cap), std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::train
