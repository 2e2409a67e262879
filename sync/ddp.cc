#include "sync/ddp.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace ringlab::sync {

std::vector<OptionSpec> DdpOptions() {
  return {FloatOption("bucket_cap_mb", 25, 0, /*min_open=*/true, 1e6,
                      /*max_open=*/false,
                      "gradient bucket size in MiB (DDP's bucket_cap_mb; the "
                      "first bucket is capped at 1 MiB)"),
          BoolOption("overlap", true,
                     "reduce each bucket while backward runs (false: all "
                     "after backward; the same result bits)")};
}

std::vector<Bucket> DdpBuckets(const ParamLayout& layout,
                               const OptionValues& options) {
  const size_t cap = std::max<size_t>(
      1, static_cast<size_t>(options.Float("bucket_cap_mb") * 1024 * 1024));
  return AssignBuckets(layout, std::min(kFirstBucketBytes, cap), cap);
}

DdpSynchronizer::DdpSynchronizer(comm::Communicator& comm, ModelBuffers& model,
                                 const OptionValues& options,
                                 trace::Tracer& tracer,
                                 std::unique_ptr<CommHook> hook)
    : comm_(comm), tracer_(tracer), hook_(std::move(hook)) {
  if (SharesMemory(comm, model)) {
    reducer_ = std::make_unique<BucketReducer>(
        comm, model, model.grads(), DdpBuckets(model.layout(), options),
        options.Bool("overlap"), *hook_, tracer);
  }
}

void DdpSynchronizer::Start(ModelBuffers&, bool resumed) {
  if (resumed) hook_->Restored();
}

GradObserver* DdpSynchronizer::backward_observer(int64_t step) {
  if (reducer_) reducer_->BeginStep(step);  // DDP's one bucket at step 0
  return reducer_.get();
}

void DdpSynchronizer::AfterBackward(ModelBuffers& model, int64_t) {
  trace::ScopedSpan wait = WaitSpan(tracer_, "wait for allreduce");
  if (reducer_) {
    reducer_->Finish();
    return;
  }
  const size_t count = model.layout().num_params();
  const GradBucket whole{0, 0, count, true};
  trace::ScopedSpan reduce(
      tracer_, trace::Track::kComm, "allreduce gradients", "comm",
      static_cast<int64_t>(hook_->BusBytes(whole, comm_.world_size())));
  std::vector<float> host(count);
  model.GetGrads(host.data());
  hook_->Reduce(comm_, whole, host.data());
  model.SetGrads(host.data());
}

trace::ScopedSpan WaitSpan(trace::Tracer& tracer, const char* what) {
  return trace::ScopedSpan(tracer, trace::Track::kCompute, what,
                           trace::kExposedCommCategory);
}

}  // namespace ringlab::sync
