#include "sync/bucket_reducer.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace ringlab::sync {

std::vector<Bucket> AssignBuckets(const ParamLayout& layout,
                                  size_t first_cap_bytes, size_t cap_bytes) {
  if (first_cap_bytes == 0 || cap_bytes == 0) {
    throw std::invalid_argument("bucket caps must be positive");
  }
  std::vector<Bucket> buckets;
  const std::vector<TensorSlot>& tensors = layout.tensors();
  Bucket current;
  size_t bytes = 0;
  for (size_t i = tensors.size(); i-- > 0;) {
    const TensorSlot& t = tensors[i];
    if (current.tensors.empty()) current.end = t.offset + t.size;
    current.begin = t.offset;
    current.tensors.push_back(t);
    bytes += t.size * sizeof(float);
    const size_t cap = buckets.empty() ? first_cap_bytes : cap_bytes;
    if (bytes >= cap || i == 0) {
      buckets.push_back(std::move(current));
      current = Bucket();
      bytes = 0;
    }
  }
  return buckets;
}

Bucket WholeModelBucket(const ParamLayout& layout) {
  Bucket bucket;
  bucket.end = layout.num_params();
  bucket.tensors = layout.tensors();
  return bucket;
}

void CheckBucketInLayout(const Bucket& bucket, const ParamLayout& layout) {
  size_t at = bucket.begin;
  for (const TensorSlot& t : bucket.tensors) {
    if (t.offset + t.size > layout.num_params()) {
      throw std::logic_error("bucket: " + t.name + " lies outside the model");
    }
    at += t.size;
  }
  if (at != bucket.end || bucket.end > layout.num_params()) {
    throw std::logic_error("bucket: its tensors do not fill it");
  }
}

BucketReducer::BucketReducer(comm::Communicator& comm,
                             const ModelBuffers& model, float* grads,
                             std::vector<Bucket> buckets, bool overlap,
                             CommHook& hook, trace::Tracer& tracer)
    : comm_(comm),
      model_(model),
      grads_(grads),
      buckets_(std::move(buckets)),
      first_step_({WholeModelBucket(model.layout())}),
      overlap_(overlap),
      hook_(hook),
      tracer_(tracer) {
  for (const Bucket& b : buckets_) CheckBucketInLayout(b, model.layout());
  pending_ = MakePending(buckets_);
  first_step_pending_ = MakePending(first_step_);
  // The same on every rank (world size and memory agree), so the collective
  // Allocate is made by all or none.
  if (comm.world_size() >= 3 && comm.memory() == comm::MemoryKind::kHost &&
      model.memory() == comm::MemoryKind::kHost) {
    staging_ = comm.Allocate(model.layout().num_params());
  }
  if (overlap_) thread_ = std::thread([this] { ThreadMain(); });
}

BucketReducer::Pending BucketReducer::MakePending(
    const std::vector<Bucket>& buckets) const {
  const std::vector<TensorSlot>& tensors = model_.layout().tensors();
  Pending pending;
  pending.bucket_of.assign(tensors.size(), buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (const TensorSlot& slot : buckets[b].tensors) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        if (tensors[t].offset == slot.offset && tensors[t].size == slot.size) {
          pending.bucket_of[t] = b;
        }
      }
    }
    pending.tensors.push_back(buckets[b].tensors.size());
  }
  pending.missing = pending.tensors;
  return pending;
}

void BucketReducer::ResetPending() {
  for (Pending* p : {&pending_, &first_step_pending_}) p->missing = p->tensors;
  next_bucket_ = 0;
}

void BucketReducer::Stage(const Bucket& bucket, bool to_bucket) {
  size_t at = bucket.begin;
  for (const TensorSlot& t : bucket.tensors) {
    float* const flat = grads_ + t.offset;
    float* const staged = staging_ + at;
    if (to_bucket) {
      std::copy(flat, flat + t.size, staged);
    } else {
      std::copy(staged, staged + t.size, flat);
    }
    at += t.size;
  }
}

BucketReducer::~BucketReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  // A collective in flight ends by the communicator's deadline.
  if (thread_.joinable()) thread_.join();
}

void BucketReducer::BeginStep(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = step == 0 ? &first_step_ : &buckets_;
  active_pending_ = step == 0 ? &first_step_pending_ : &pending_;
  ResetPending();
}

void BucketReducer::OnGradReady(size_t tensor,
                                std::function<void()> wait_ready) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_) return;  // Finish reports it; nothing more goes out
  Pending& pending = *active_pending_;
  if (tensor >= pending.bucket_of.size() ||
      pending.bucket_of[tensor] >= pending.missing.size() ||
      pending.missing[pending.bucket_of[tensor]] == 0) {
    throw std::logic_error("bucket reducer: tensor " + std::to_string(tensor) +
                           " reported twice or unknown");
  }
  --pending.missing[pending.bucket_of[tensor]];
  // Every complete bucket from the next one on goes out, in order (the first
  // of them needs this tensor's kernels done; the wait covers the rest, whose
  // gradients came earlier).
  while (next_bucket_ < active_->size() && pending.missing[next_bucket_] == 0) {
    queue_.push_back({next_bucket_++, wait_ready});
  }
  if (overlap_) changed_.notify_all();
}

void BucketReducer::Reduce(const Ready& ready) {
  ready.wait_ready();
  const Bucket& bucket = (*active_)[ready.bucket];
  const GradBucket grad_bucket{ready.bucket, bucket.begin, bucket.end,
                               ready.bucket + 1 == active_->size()};
  trace::ScopedSpan span(
      tracer_, trace::Track::kComm,
      "allreduce bucket " + std::to_string(ready.bucket), "comm",
      static_cast<int64_t>(hook_.BusBytes(grad_bucket, comm_.world_size())));
  // A bucket already in model order (step 0's) needs no copy.
  const bool staged = staging_ != nullptr && hook_.elementwise() &&
                      bucket.tensors.size() > 1 &&
                      bucket.tensors.front().offset != bucket.begin;
  if (staged) Stage(bucket, /*to_bucket=*/true);
  hook_.Reduce(comm_, grad_bucket, staged ? staging_ : grads_);
  if (staged) Stage(bucket, /*to_bucket=*/false);
}

void BucketReducer::ThreadMain() {
  bool bound = false;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock,
                  [this] { return stop_ || (!queue_.empty() && !finishing_); });
    if (stop_) return;
    Ready ready = std::move(queue_.front());
    queue_.pop_front();
    in_flight_ = true;
    lock.unlock();
    std::exception_ptr failure;
    try {
      if (!bound) model_.BindThread();
      bound = true;
      Reduce(ready);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    in_flight_ = false;
    if (failure && !failure_) failure_ = failure;
    if (failure) queue_.clear();  // later buckets would wait on a broken job
    changed_.notify_all();
  }
}

void BucketReducer::ReduceQueued(std::unique_lock<std::mutex>& lock) {
  while (!queue_.empty() && !failure_) {
    Ready ready = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      Reduce(ready);
    } catch (...) {
      lock.lock();
      failure_ = std::current_exception();
      break;
    }
    lock.lock();
  }
}

void BucketReducer::Finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (next_bucket_ != active_->size() && !failure_) {
    throw std::logic_error(
        "BucketReducer::Finish before backward reported "
        "every tensor");
  }
  if (overlap_) {
    // What backward left queued, this thread reduces itself: it would only
    // wait, and the communication thread, asleep or busy, would first have
    // to be woken (one hand-off each way per step). Calls keep their order:
    // the bucket in flight ends first.
    finishing_ = true;
    changed_.wait(lock, [this] { return !in_flight_; });
  }
  ReduceQueued(lock);
  finishing_ = false;
  ResetPending();
  queue_.clear();
  if (failure_) std::rethrow_exception(failure_);
}

}  // namespace ringlab::sync
