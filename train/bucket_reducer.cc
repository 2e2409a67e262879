#include "train/bucket_reducer.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace ringlab::train {

std::vector<Bucket> AssignBuckets(const nn::MlpLayout& layout,
                                  size_t first_cap_bytes, size_t cap_bytes) {
  if (first_cap_bytes == 0 || cap_bytes == 0) {
    throw std::invalid_argument("bucket caps must be positive");
  }
  std::vector<Bucket> buckets;
  const std::vector<nn::TensorSlot>& tensors = layout.tensors();
  Bucket current;
  size_t bytes = 0;
  for (size_t i = tensors.size(); i-- > 0;) {
    const nn::TensorSlot& t = tensors[i];
    if (current.tensors.empty()) current.end = t.offset + t.size;
    current.begin = t.offset;
    current.first_layer = static_cast<int>(i / 2);  // weight, bias per layer
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

Bucket WholeModelBucket(const nn::MlpLayout& layout) {
  Bucket bucket;
  bucket.end = layout.num_params();
  bucket.tensors = layout.tensors();
  return bucket;
}

void CheckBucketInLayout(const Bucket& bucket, const nn::MlpLayout& layout) {
  size_t at = bucket.begin;
  for (const nn::TensorSlot& t : bucket.tensors) {
    if (t.offset + t.size > layout.num_params()) {
      throw std::logic_error("bucket: " + t.name + " lies outside the model");
    }
    at += t.size;
  }
  if (at != bucket.end || bucket.end > layout.num_params()) {
    throw std::logic_error("bucket: its tensors do not fill it");
  }
}

BucketReducer::BucketReducer(comm::Communicator& comm, const nn::Mlp& model,
                             float* grads, std::vector<Bucket> buckets,
                             bool overlap, CommHook& hook, Tracer& tracer)
    : comm_(comm),
      model_(model),
      grads_(grads),
      buckets_(std::move(buckets)),
      first_step_({WholeModelBucket(model.layout())}),
      overlap_(overlap),
      hook_(hook),
      tracer_(tracer) {
  for (const Bucket& b : buckets_) CheckBucketInLayout(b, model.layout());
  // The same on every rank (world size and memory agree), so the collective
  // Allocate is made by all or none.
  if (comm.world_size() >= 3 && comm.memory() == comm::MemoryKind::kHost &&
      model.device() == nn::Device::kCpu) {
    staging_ = comm.Allocate(model.layout().num_params());
  }
  if (overlap_) thread_ = std::thread([this] { ThreadMain(); });
}

void BucketReducer::Stage(const Bucket& bucket, bool to_bucket) {
  size_t at = bucket.begin;
  for (const nn::TensorSlot& t : bucket.tensors) {
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
}

void BucketReducer::OnLayerGrads(int layer, std::function<void()> wait_ready) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_) return;  // Finish reports it; nothing more goes out
  // Backward reports layers last to first: every bucket whose lowest layer
  // this is now holds final gradients (the first of them needs this layer's
  // kernels done; the wait covers the rest, which came earlier).
  while (next_bucket_ < active_->size() &&
         (*active_)[next_bucket_].first_layer >= layer) {
    queue_.push_back({next_bucket_++, wait_ready});
  }
  if (overlap_) changed_.notify_all();
}

void BucketReducer::Reduce(const Ready& ready) {
  ready.wait_ready();
  const Bucket& bucket = (*active_)[ready.bucket];
  const GradBucket grad_bucket{ready.bucket, bucket.begin, bucket.end,
                               ready.bucket + 1 == active_->size()};
  ScopedSpan span(
      tracer_, Track::kComm, "allreduce bucket " + std::to_string(ready.bucket),
      "comm",
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
        "every layer");
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
  next_bucket_ = 0;
  queue_.clear();
  if (failure_) std::rethrow_exception(failure_);
}

}  // namespace ringlab::train
