// sparta: SPARTA (sparse parameter averaging; Exo, 2025): the ranks train
// apart, and after every local optimiser step they average a small random
// subset of the parameters, sparta_p of them, at positions every rank draws
// alike from a torch generator seeded with sparta_seed + step (so the
// positions need not travel, and a resumed run draws as the uninterrupted
// one): torch.randperm(n)[:k] over the model's flat parameters. Each value is
// divided by the world size before the sum, as DiLoCo's change is.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sync/ddp.h"
#include "sync/synchronizer.h"
#include "torch_compat/generator.h"

namespace ringlab::sync {
namespace {

class SpartaSynchronizer : public Synchronizer {
 public:
  explicit SpartaSynchronizer(const SyncContext& c)
      : comm_(c.comm),
        tracer_(c.tracer),
        seed_(static_cast<uint64_t>(c.options.Int("sparta_seed"))),
        count_(c.model.layout().num_params()),
        k_(CountOfShare(c.options.Float("sparta_p"), count_)),
        values_(c.comm.Allocate(k_)) {}

  void AfterBackward(ModelBuffers&, int64_t) override {}
  void AfterStep(ModelBuffers& model, int64_t step) override {
    if (k_ == 0 || comm_.world_size() == 1) return;
    float* params = model.params();
    if (model.memory() != comm::MemoryKind::kHost) {
      host_.resize(count_);
      model.GetParams(host_.data());
      params = host_.data();
    }
    torch_compat::TorchGenerator generator(
        (seed_ + static_cast<uint64_t>(step)) & 0xffffffffu);
    const std::vector<int64_t> chosen = generator.RandPermPrefix(
        static_cast<int64_t>(count_), static_cast<int64_t>(k_));
    const auto world = static_cast<float>(comm_.world_size());
    for (size_t i = 0; i < k_; ++i) values_[i] = params[chosen[i]] / world;
    {
      trace::ScopedSpan wait = WaitSpan(tracer_, "wait for allreduce");
      trace::ScopedSpan reduce(tracer_, trace::Track::kComm,
                               "allreduce sampled parameters", "comm",
                               static_cast<int64_t>(comm::AllReduceBusBytes(
                                   k_ * sizeof(float), comm_.world_size())));
      comm_.AllReduce(values_, k_, comm::ReduceOp::kSum);
    }
    for (size_t i = 0; i < k_; ++i) params[chosen[i]] = values_[i];
    if (params == host_.data()) model.SetParams(host_.data());
  }

 private:
  comm::Communicator& comm_;
  trace::Tracer& tracer_;
  const uint64_t seed_;
  const size_t count_, k_;
  float* values_;            // the communicator's registered memory
  std::vector<float> host_;  // a device model's parameters, staged
};

SyncDescription DescribeSparta() {
  SyncDescription d;
  d.name = "sparta";
  d.summary =
      "SPARTA: the ranks train apart and average a random sparta_p of the "
      "parameters after every step";
  d.sends =
      "every step: sparta_p of the parameters as float32 values by "
      "allreduce (the positions follow from a shared seed)";
  d.pytorch = "none (a PyTorch loop: experiments/fashion_mnist/pytorch_ddp.py)";
  d.options = {FloatOption("sparta_p", 0.005, 0, true, 1, false,
                           "the share of the parameters averaged per step"),
               IntOption("sparta_seed", 0, 0, 0xffffffffLL,
                         "the seed of the positions' generator")};
  d.create = [](const SyncContext& c) -> std::unique_ptr<Synchronizer> {
    RequireHostMemory(c.comm, "--sync=sparta averages");
    return std::make_unique<SpartaSynchronizer>(c);
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeSparta);

}  // namespace ringlab::sync
