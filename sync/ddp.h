// DDP as a synchroniser, for the family that reduces gradients after every
// backward (allreduce, the compressors, powersgd, post_local_sgd's warm-up):
// a communication hook (comm_hooks.h) reduces DDP's buckets as backward
// produces them (bucket_reducer.h), or, where the model's memory is not the
// communicator's, the whole gradient buffer in one piece through host memory
// after backward. The family shares DDP's bucket options.
#ifndef RINGLAB_SYNC_DDP_H_
#define RINGLAB_SYNC_DDP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "sync/bucket_reducer.h"
#include "sync/comm_hooks.h"
#include "sync/synchronizer.h"

namespace ringlab::sync {

// --bucket_cap_mb and --overlap, declared once for the family.
std::vector<OptionSpec> DdpOptions();

// DDP's buckets for these options (bucket_cap_mb; the first bucket capped at
// torch's 1 MiB, or the cap where it is smaller).
std::vector<Bucket> DdpBuckets(const ParamLayout& layout,
                               const OptionValues& options);

class DdpSynchronizer : public Synchronizer {
 public:
  // The hook reduces the buckets (it outlives nothing: the synchroniser
  // owns it).
  DdpSynchronizer(comm::Communicator& comm, ModelBuffers& model,
                  const OptionValues& options, trace::Tracer& tracer,
                  std::unique_ptr<CommHook> hook);
  void Start(ModelBuffers&, bool resumed) override;
  std::vector<SyncTensor> state() override { return hook_->state(); }
  GradObserver* backward_observer(int64_t step) override;
  void AfterBackward(ModelBuffers& model, int64_t step) override;
  void AfterStep(ModelBuffers&, int64_t) override {}

 private:
  comm::Communicator& comm_;
  trace::Tracer& tracer_;
  // Declared before the reducer, which uses it until it is destroyed.
  std::unique_ptr<CommHook> hook_;
  std::unique_ptr<BucketReducer> reducer_;
};

// The span of a synchroniser's blocking wait on the compute track, with its
// exposed-communication category.
trace::ScopedSpan WaitSpan(trace::Tracer& tracer, const char* what);

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_DDP_H_
