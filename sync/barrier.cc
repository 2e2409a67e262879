// barrier: none, but the ranks meet where allreduce would wait for its
// gradients: the step is then the slower rank's, as in any synchronous run,
// with no byte moved. Its step against none's is what synchronising costs
// before communication does.
#include <memory>

#include "sync/ddp.h"

namespace ringlab::sync {
namespace {

class BarrierSynchronizer : public Synchronizer {
 public:
  explicit BarrierSynchronizer(const SyncContext& c)
      : comm_(c.comm), tracer_(c.tracer) {}
  void AfterBackward(ModelBuffers&, int64_t) override {
    trace::ScopedSpan wait = WaitSpan(tracer_, "wait for barrier");
    comm_.Barrier();
  }
  void AfterStep(ModelBuffers&, int64_t) override {}

 private:
  comm::Communicator& comm_;
  trace::Tracer& tracer_;
};

SyncDescription DescribeBarrier() {
  SyncDescription d;
  d.name = "barrier";
  d.summary =
      "none, but the ranks meet once a step: what synchronising costs before "
      "any byte moves";
  d.sends = "nothing (a barrier per step)";
  d.pytorch = "none (dist.barrier() after backward)";
  d.create = [](const SyncContext& c) -> std::unique_ptr<Synchronizer> {
    return std::make_unique<BarrierSynchronizer>(c);
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeBarrier);

}  // namespace ringlab::sync
