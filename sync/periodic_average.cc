#include "sync/periodic_average.h"

#include <vector>

#include "sync/ddp.h"

namespace ringlab::sync {

std::vector<OptionSpec> PeriodicAverageOptions() {
  return {IntOption("avg_period", 4, 1, kMaxSteps,
                    "average the parameters every K steps"),
          IntOption("avg_warmup", 0, 0, kMaxSteps,
                    "steps before the first average (post_local_sgd: of DDP "
                    "allreduce)")};
}

bool IsAveragingStep(int64_t step, int64_t period, int64_t warmup) {
  return step >= warmup && (step - warmup) % period == 0;
}

PeriodicAverager::PeriodicAverager(comm::Communicator& comm,
                                   const OptionValues& options,
                                   trace::Tracer& tracer)
    : comm_(comm),
      period_(options.Int("avg_period")),
      warmup_(options.Int("avg_warmup")),
      tracer_(tracer) {}

void PeriodicAverager::AfterStep(ModelBuffers& model, int64_t step) {
  if (!IsAveragingStep(step, period_, warmup_)) return;
  const size_t count = model.layout().num_params();
  trace::ScopedSpan wait = WaitSpan(tracer_, "wait for allreduce");
  trace::ScopedSpan reduce(tracer_, trace::Track::kComm, "allreduce parameters",
                           "comm",
                           static_cast<int64_t>(comm::AllReduceBusBytes(
                               count * sizeof(float), comm_.world_size())));
  if (SharesMemory(comm_, model)) {
    comm_.AllReduce(model.params(), count, comm::ReduceOp::kAvg);
    return;
  }
  std::vector<float> host(count);
  model.GetParams(host.data());
  comm_.AllReduce(host.data(), count, comm::ReduceOp::kAvg);
  model.SetParams(host.data());
}

}  // namespace ringlab::sync
