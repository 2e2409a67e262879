#include "sync/comm_hooks.h"

#include <memory>

namespace ringlab::sync {
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

}  // namespace

std::unique_ptr<CommHook> MakeAllReduceHook() {
  return std::make_unique<AllReduceHook>();
}

}  // namespace ringlab::sync
