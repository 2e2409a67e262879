// allreduce: PyTorch DDP, the gradients averaged in float32 after every
// backward, bucket by bucket while backward runs.
#include <memory>

#include "sync/ddp.h"

namespace ringlab::sync {
namespace {

SyncDescription DescribeAllReduce() {
  SyncDescription d;
  d.name = "allreduce";
  d.summary = "DDP: the gradients averaged in float32 after every backward";
  d.sends = "every step: the gradients (4 bytes per parameter)";
  d.pytorch = "DistributedDataParallel (allreduce_hook)";
  d.options = DdpOptions();
  d.reduces.grads = true;
  d.create = [](const SyncContext& c) -> std::unique_ptr<Synchronizer> {
    return std::make_unique<DdpSynchronizer>(c.comm, c.model, c.options,
                                             c.tracer, MakeAllReduceHook());
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeAllReduce);

}  // namespace ringlab::sync
