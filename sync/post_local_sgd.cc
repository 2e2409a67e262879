// post_local_sgd: DDP's allreduce for the first avg_warmup steps, then each
// rank's gradients stay its own (post_localSGD_hook with one-rank subgroups)
// or are averaged among its host's ranks (its intra-node subgroup: DDP's
// buckets over the host communicator), and the parameters are averaged over
// every rank every K steps (PeriodicModelAverager with the same warm-up).
#include <memory>

#include "sync/ddp.h"
#include "sync/periodic_average.h"

namespace ringlab::sync {
namespace {

bool HostSubgroup(const OptionValues& options) {
  return options.Choice("post_local_subgroup") == "host";
}

class PostLocalSgdSynchronizer : public Synchronizer {
 public:
  explicit PostLocalSgdSynchronizer(const SyncContext& c)
      : warmup_(c.options.Int("avg_warmup")),
        allreduce_(c.comm, c.model, c.options, c.tracer, MakeAllReduceHook()),
        average_(c.comm, c.options, c.tracer) {
    if (HostSubgroup(c.options)) {
      host_allreduce_ = std::make_unique<DdpSynchronizer>(
          *c.host_comm, c.model, c.options, c.tracer, MakeAllReduceHook());
    }
  }
  GradObserver* backward_observer(int64_t step) override {
    if (step < warmup_) return allreduce_.backward_observer(step);
    return host_allreduce_ ? host_allreduce_->backward_observer(step) : nullptr;
  }
  void AfterBackward(ModelBuffers& model, int64_t step) override {
    if (step < warmup_) {
      allreduce_.AfterBackward(model, step);
    } else if (host_allreduce_) {
      host_allreduce_->AfterBackward(model, step);
    }
  }
  void AfterStep(ModelBuffers& model, int64_t step) override {
    average_.AfterStep(model, step);
  }

 private:
  const int64_t warmup_;
  DdpSynchronizer allreduce_;
  std::unique_ptr<DdpSynchronizer> host_allreduce_;  // subgroup=host
  PeriodicAverager average_;
};

SyncDescription DescribePostLocalSgd() {
  SyncDescription d;
  d.name = "post_local_sgd";
  d.summary =
      "DDP for avg_warmup steps, then local SGD averaging the parameters "
      "every avg_period steps";
  d.sends =
      "the gradients every warm-up step, then the parameters every "
      "avg_period-th step";
  d.pytorch = "post_localSGD_hook + PeriodicModelAverager";
  d.options = DdpOptions();
  for (OptionSpec& spec : PeriodicAverageOptions()) d.options.push_back(spec);
  d.options.push_back(ChoiceOption(
      "post_local_subgroup", "rank", {"rank", "host"},
      "after the warm-up: rank (each rank's gradients its own, PyTorch's "
      "one-rank subgroups) or host (averaged among the ranks of its host, "
      "over shm_ring or the job's GPU backend: post_localSGD_hook's "
      "intra-node subgroup)"));
  d.short_run = {{"avg_warmup", "6"}};
  d.reduces.grads = true;
  d.reduces.params = true;
  d.needs_host_comm = HostSubgroup;
  d.create = [](const SyncContext& c) -> std::unique_ptr<Synchronizer> {
    return std::make_unique<PostLocalSgdSynchronizer>(c);
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribePostLocalSgd);

}  // namespace ringlab::sync
