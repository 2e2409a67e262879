// param_avg: local SGD. No gradient is exchanged; the parameters are
// averaged every K steps after a warm-up in which the ranks train apart
// (torch.distributed's PeriodicModelAverager alone).
#include <memory>

#include "sync/periodic_average.h"

namespace ringlab::sync {
namespace {

class ParamAvgSynchronizer : public Synchronizer {
 public:
  explicit ParamAvgSynchronizer(const SyncContext& c)
      : average_(c.comm, c.options, c.tracer) {}
  void AfterBackward(ModelBuffers&, int64_t) override {}
  void AfterStep(ModelBuffers& model, int64_t step) override {
    average_.AfterStep(model, step);
  }

 private:
  PeriodicAverager average_;
};

SyncDescription DescribeParamAvg() {
  SyncDescription d;
  d.name = "param_avg";
  d.summary =
      "local SGD: no gradients exchanged, the parameters averaged every "
      "avg_period steps after avg_warmup";
  d.sends = "every avg_period-th step: the parameters (4 bytes per parameter)";
  d.pytorch = "PeriodicModelAverager (no DDP)";
  d.options = PeriodicAverageOptions();
  d.reduces.params = true;
  d.create = [](const SyncContext& c) -> std::unique_ptr<Synchronizer> {
    return std::make_unique<ParamAvgSynchronizer>(c);
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeParamAvg);

}  // namespace ringlab::sync
