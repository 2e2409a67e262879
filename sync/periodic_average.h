// torch.distributed's PeriodicModelAverager: the parameters averaged over the
// ranks every K steps once a warm-up is over. param_avg is this alone (local
// SGD), post_local_sgd puts DDP before it.
#ifndef RINGLAB_SYNC_PERIODIC_AVERAGE_H_
#define RINGLAB_SYNC_PERIODIC_AVERAGE_H_

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "sync/synchronizer.h"

namespace ringlab::sync {

// --avg_period (K) and --avg_warmup, declared once for both.
std::vector<OptionSpec> PeriodicAverageOptions();

// True where PeriodicModelAverager.average_parameters() averages at this
// step: from the warm-up on, every period-th step.
bool IsAveragingStep(int64_t step, int64_t period, int64_t warmup);

class PeriodicAverager {
 public:
  PeriodicAverager(comm::Communicator& comm, const OptionValues& options,
                   trace::Tracer& tracer);
  // After the optimiser's step: averages the parameters where it is time
  // (staging them through host memory where the communicator cannot reach
  // the model's).
  void AfterStep(ModelBuffers& model, int64_t step);

 private:
  comm::Communicator& comm_;
  const int64_t period_, warmup_;
  trace::Tracer& tracer_;
};

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_PERIODIC_AVERAGE_H_
