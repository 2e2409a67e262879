// DDP's reducer over the model's flat gradient buffer: the gradients are
// grouped into buckets in reverse parameter order (the order backward
// produces them; the first bucket capped at 1 MiB, the others at
// --bucket_cap_mb, a bucket closing once it reaches its cap, as
// torch.distributed's bucket assignment does), and each bucket's
// communication hook (train/comm_hooks.h: by default the average) starts as
// soon as backward has produced all of its tensors' gradients. With overlap the
// allreduces run on a communication thread while backward goes on, and those
// still queued when backward ends run on the thread that waits for them (no
// hand-off to wake up for: at 2 ranks on 2 cores this took the one-host step
// from 1.16x to 1.10x that of `none`); without, they all run after backward,
// in the same order. The buckets and their order are the same either way, so
// overlap changes no result bit. The layout packs tensors in registration
// order, so a bucket of tensors in reverse order is one contiguous range of
// the buffer.
//
// With 3 or more ranks an allreduce's sums depend on where each element sits
// in the buffer it reduces (a ring's chunks), and DDP's buckets hold their
// tensors in bucket order (the last bias first), not in the model's. Where
// the hook is elementwise and the gradients are in host memory, each bucket
// is therefore copied into that order in the communicator's registered
// memory, reduced there and copied back (as DDP copies gradients into its
// buckets), so that every sum is torch's. With 2 ranks no order changes a
// sum, and the buckets are reduced in place.
#ifndef RINGLAB_SYNC_BUCKET_REDUCER_H_
#define RINGLAB_SYNC_BUCKET_REDUCER_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "sync/comm_hooks.h"
#include "sync/model.h"
#include "sync/param_layout.h"
#include "trace/trace.h"

namespace ringlab::sync {

// torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES.
inline constexpr size_t kFirstBucketBytes = size_t{1} << 20;

struct Bucket {
  size_t begin = 0;  // in floats, into the flat buffer
  size_t end = 0;
  std::vector<TensorSlot> tensors;  // the layout's slots, in bucket order
};

// Tensors in reverse order into buckets: the first closes once it holds at
// least first_cap_bytes, each later one at cap_bytes (a tensor larger than
// the cap gets a bucket of its own). Both caps must be positive.
std::vector<Bucket> AssignBuckets(const ParamLayout& layout,
                                  size_t first_cap_bytes, size_t cap_bytes);

// DDP's one bucket at its first step, before it rebuilds them in the order
// backward produced the gradients: every tensor, in model order
// (distributed.py's bucket_size_limits = [sys.maxsize]). Where the
// algorithm's sum order depends on where a buffer starts (a ring of 3 or
// more ranks), step 0 only agrees with torch's in this layout.
Bucket WholeModelBucket(const ParamLayout& layout);

// Throws std::logic_error unless `bucket`'s tensors lie in `layout` and fill
// [begin, end) exactly, in bucket order: what staging and PowerSGD's plans,
// which copy by the slots, rely on.
void CheckBucketInLayout(const Bucket& bucket, const ParamLayout& layout);

class BucketReducer : public GradObserver {
 public:
  // grads is the model's gradient buffer, in the communicator's memory;
  // hook reduces each bucket of it (and outlives the reducer). With overlap,
  // a thread bound to the model's device (ModelBuffers::BindThread) runs the
  // hooks.
  BucketReducer(comm::Communicator& comm, const ModelBuffers& model,
                float* grads, std::vector<Bucket> buckets, bool overlap,
                CommHook& hook, trace::Tracer& tracer);
  ~BucketReducer() override;
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // The layout of step `step`, before its backward: WholeModelBucket at step
  // 0, the buckets given after (DDP's rebuild). Without a call, the latter.
  void BeginStep(int64_t step);
  // Each complete bucket, in bucket order, goes to the hook: a bucket waits
  // for those before it, as DDP launches them.
  void OnGradReady(size_t tensor, std::function<void()> wait_ready) override;
  // After ForwardBackward: returns once every bucket is averaged (without
  // overlap, averaging them here); rethrows the first failure of any.
  void Finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  struct Ready {
    size_t bucket;
    std::function<void()> wait_ready;
  };
  void Reduce(const Ready& ready);
  void ThreadMain();
  void ReduceQueued(std::unique_lock<std::mutex>& lock);
  // The bucket's tensors between the flat buffer and staging_, in bucket
  // order from the bucket's begin (to_bucket) or back.
  void Stage(const Bucket& bucket, bool to_bucket);

  comm::Communicator& comm_;
  const ModelBuffers& model_;
  float* grads_;
  std::vector<Bucket> buckets_;
  const std::vector<Bucket> first_step_;
  const std::vector<Bucket>* active_ = &buckets_;  // this step's layout
  float* staging_ = nullptr;  // registered; null where buckets reduce in place
  bool overlap_;
  CommHook& hook_;
  trace::Tracer& tracer_;
  // Per layout (this step's and step 0's): each tensor's bucket, and how many
  // of each bucket's tensors backward has yet to report.
  struct Pending {
    std::vector<size_t> bucket_of;  // by the layout's tensor index
    std::vector<size_t> tensors;    // by bucket: how many it holds
    std::vector<size_t> missing;    // by bucket: how many are not reported
  };
  Pending MakePending(const std::vector<Bucket>& buckets) const;
  void ResetPending();
  Pending pending_, first_step_pending_;
  Pending* active_pending_ = &pending_;
  size_t next_bucket_ = 0;  // the next one backward completes

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Ready> queue_;
  bool in_flight_ = false;  // the communication thread is reducing a bucket
  bool finishing_ = false;  // Finish takes the queue: the thread leaves it
  std::exception_ptr failure_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_BUCKET_REDUCER_H_
