// diloco: DiLoCo (diloco.h's outer step) as a synchroniser: every
// inner_steps steps the ranks average how far their parameters moved from the
// shared outer parameters, and an outer Nesterov SGD applies it.
#include "sync/diloco.h"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/ddp.h"
#include "sync/synchronizer.h"

namespace ringlab::sync {

void OuterNesterovStep(const float* delta, float* momentum, bool first,
                       float lr, float mu, float* outer, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    // buf.mul_(mu).add_(delta): two roundings (this file is built with
    // -ffp-contract=off, so the compiler fuses nothing by itself).
    const float buffer = first ? delta[i] : momentum[i] * mu + delta[i];
    momentum[i] = buffer;
    const float step = std::fma(buffer, mu, delta[i]);  // delta.add(buf, mu)
    outer[i] = std::fma(step, -lr, outer[i]);           // p.add_(step, -lr)
  }
}

OptionSpec InnerStepsOption() {
  return IntOption("inner_steps", 16, 1, kMaxSteps,
                   "inner SGD steps per outer step (H)");
}

OptionSpec OuterLrOption() {
  return FloatOption("outer_lr", 0.7, 0, false, 1e30, false,
                     "the outer SGD's learning rate");
}

OptionSpec OuterMomentumOption() {
  return FloatOption("outer_momentum", 0.9, 0, false, 1, true,
                     "the outer SGD's Nesterov momentum");
}

namespace {

class DiLoCoSynchronizer : public Synchronizer {
 public:
  explicit DiLoCoSynchronizer(const SyncContext& c)
      : comm_(c.comm),
        inner_steps_(c.options.Int("inner_steps")),
        outer_lr_(static_cast<float>(c.options.Float("outer_lr"))),
        outer_momentum_(static_cast<float>(c.options.Float("outer_momentum"))),
        tracer_(c.tracer),
        count_(c.model.layout().num_params()),
        outer_(count_),
        momentum_(count_),
        local_(count_),
        delta_(c.comm.Allocate(count_)) {}

  void Start(ModelBuffers& model, bool resumed) override {
    if (!resumed) model.GetParams(outer_.data());
  }
  void AfterBackward(ModelBuffers&, int64_t) override {}
  void AfterStep(ModelBuffers& model, int64_t step) override {
    if ((step + 1) % inner_steps_ != 0) return;
    model.GetParams(local_.data());
    // Each rank's change, divided before the sum as torch's
    // average_parameters divides (exact for a power-of-two world).
    const float world = static_cast<float>(comm_.world_size());
    for (size_t i = 0; i < count_; ++i) {
      delta_[i] = (outer_[i] - local_[i]) / world;
    }
    {
      trace::ScopedSpan wait = WaitSpan(tracer_, "wait for allreduce");
      trace::ScopedSpan reduce(
          tracer_, trace::Track::kComm, "allreduce parameter change", "comm",
          static_cast<int64_t>(comm::AllReduceBusBytes(count_ * sizeof(float),
                                                       comm_.world_size())));
      comm_.AllReduce(delta_, count_, comm::ReduceOp::kSum);
    }
    trace::ScopedSpan span(tracer_, trace::Track::kCompute, "outer sgd step",
                           "compute");
    OuterNesterovStep(delta_, momentum_.data(), step + 1 == inner_steps_,
                      outer_lr_, outer_momentum_, outer_.data(), count_);
    model.SetParams(outer_.data());
  }
  std::vector<SyncTensor> state() override {
    return {{"outer_params", &outer_}, {"outer_momentum", &momentum_}};
  }
  const std::vector<float>* evaluated_params() const override {
    return &outer_;
  }

 private:
  comm::Communicator& comm_;
  const int64_t inner_steps_;
  const float outer_lr_, outer_momentum_;
  trace::Tracer& tracer_;
  const size_t count_;
  std::vector<float> outer_, momentum_, local_;
  float* delta_;  // the communicator's registered memory
};

std::unique_ptr<Synchronizer> CreateDiLoCo(const SyncContext& c) {
  RequireHostMemory(c.comm, "--sync=diloco averages");
  return std::make_unique<DiLoCoSynchronizer>(c);
}

SyncDescription DescribeDiLoCo() {
  SyncDescription d;
  d.name = "diloco";
  d.summary =
      "DiLoCo: inner_steps local SGD steps, then the average change applied "
      "by an outer SGD with Nesterov momentum";
  d.sends =
      "every inner_steps-th step: the parameters' change (4 bytes per "
      "parameter)";
  d.pytorch = "none (a PyTorch loop: experiments/fashion_mnist/pytorch_ddp.py)";
  d.options = {InnerStepsOption(), OuterLrOption(), OuterMomentumOption()};
  d.short_run = {{"inner_steps", "5"}};
  d.create = CreateDiLoCo;
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeDiLoCo);

}  // namespace ringlab::sync
