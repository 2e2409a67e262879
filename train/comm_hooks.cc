#include "train/comm_hooks.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "comm/dtype/kernels.h"

namespace ringlab::train {
namespace {

class AllReduceHook : public CommHook {
 public:
  void Reduce(comm::Communicator& comm, const GradBucket& bucket,
              float* grads) override {
    comm.AllReduce(grads + bucket.begin, bucket.count(), comm::ReduceOp::kAvg);
  }
  uint64_t BusBytes(const GradBucket& bucket, int world_size) const override {
    return comm::AllReduceBusBytes(bucket.count() * sizeof(float), world_size);
  }
  bool elementwise() const override { return true; }
};

class CompressHook : public CommHook {
 public:
  CompressHook(comm::Communicator& comm, comm::DataType type, size_t max_count)
      : type_(type),
        kernels_(comm::dtype::KernelsFor(type)),
        wire_(reinterpret_cast<uint16_t*>(comm.Allocate((max_count + 1) / 2))),
        max_count_(max_count) {}

  void Reduce(comm::Communicator& comm, const GradBucket& bucket,
              float* grads) override {
    if (bucket.end > max_count_ || bucket.begin > bucket.end) {
      throw std::logic_error("compress hook: a bucket beyond its buffer");
    }
    const size_t begin = bucket.begin, count = bucket.count();
    uint16_t* wire = wire_ + begin;
    kernels_.narrow(wire, grads + begin, count);
    kernels_.scale(wire, static_cast<float>(comm.world_size()), count);
    comm.AllReduce(wire, count, type_, comm::ReduceOp::kSum);
    kernels_.widen(grads + begin, wire, count);
  }
  uint64_t BusBytes(const GradBucket& bucket, int world_size) const override {
    return comm::AllReduceBusBytes(bucket.count() * sizeof(uint16_t),
                                   world_size);
  }
  bool elementwise() const override { return true; }

 private:
  const comm::DataType type_;
  const comm::dtype::ElementKernels& kernels_;
  uint16_t* const wire_;
  const size_t max_count_;
};

}  // namespace

std::unique_ptr<CommHook> MakeAllReduceHook() {
  return std::make_unique<AllReduceHook>();
}

std::unique_ptr<CommHook> MakeCompressHook(comm::Communicator& comm,
                                           comm::DataType type,
                                           size_t max_count) {
  if (type == comm::DataType::kFloat32) {
    throw std::invalid_argument("a compress hook needs a 16-bit type");
  }
  return std::make_unique<CompressHook>(comm, type, max_count);
}

}  // namespace ringlab::train
