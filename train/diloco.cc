#include "train/diloco.h"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

namespace ringlab::train {

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

namespace {

class DiLoCoSynchronizer : public Synchronizer {
 public:
  DiLoCoSynchronizer(comm::Communicator& comm, nn::Mlp& model,
                     const SyncOptions& options, Tracer& tracer)
      : comm_(comm),
        options_(options),
        tracer_(tracer),
        count_(model.layout().num_params()),
        outer_(count_),
        momentum_(count_),
        local_(count_),
        delta_(comm.Allocate(count_)) {}

  const char* name() const override { return "diloco"; }
  void Start(const nn::Mlp& model, bool resumed) override {
    if (!resumed) model.GetParams(outer_.data());
  }
  void AfterBackward(nn::Mlp&, int64_t) override {}
  void AfterStep(nn::Mlp& model, int64_t step) override {
    if ((step + 1) % options_.inner_steps != 0) return;
    model.GetParams(local_.data());
    // Each rank's change, divided before the sum as torch's
    // average_parameters divides (exact for a power-of-two world).
    const float world = static_cast<float>(comm_.world_size());
    for (size_t i = 0; i < count_; ++i) {
      delta_[i] = (outer_[i] - local_[i]) / world;
    }
    {
      ScopedSpan wait(tracer_, Track::kCompute, "wait for allreduce",
                      kExposedCommCategory);
      ScopedSpan reduce(tracer_, Track::kComm, "allreduce parameter change",
                        "comm",
                        static_cast<int64_t>(comm::AllReduceBusBytes(
                            count_ * sizeof(float), comm_.world_size())));
      comm_.AllReduce(delta_, count_, comm::ReduceOp::kSum);
    }
    ScopedSpan span(tracer_, Track::kCompute, "outer sgd step", "compute");
    OuterNesterovStep(delta_, momentum_.data(),
                      step + 1 == options_.inner_steps, options_.outer_lr,
                      options_.outer_momentum, outer_.data(), count_);
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
  const SyncOptions options_;
  Tracer& tracer_;
  const size_t count_;
  std::vector<float> outer_, momentum_, local_;
  float* delta_;  // the communicator's registered memory
};

}  // namespace

std::unique_ptr<Synchronizer> CreateDiLoCoSynchronizer(
    comm::Communicator& comm, nn::Mlp& model, const SyncOptions& options,
    Tracer& tracer) {
  if (comm.memory() != comm::MemoryKind::kHost) {
    throw std::invalid_argument(
        std::string("--sync=diloco averages in host memory: --comm=") +
        comm.backend() + " reduces device memory");
  }
  return std::make_unique<DiLoCoSynchronizer>(comm, model, options, tracer);
}

}  // namespace ringlab::train
