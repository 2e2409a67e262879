// ringlab's synchronisers (sync/) from a PyTorch training loop: the core of
// ringlab_torch.Synchronizer. It takes a model's parameters as a layout
// (names and shapes, in registration order), keeps them and their gradients
// in two flat buffers in its communicator's memory (the module makes the
// model's parameters and .grad views of them, as DDP's
// gradient_as_bucket_view does), and runs the same synchroniser code the
// trainer runs: GradReady from autograd's hooks during backward (DDP's
// buckets go out as they complete), then AfterBackward, the loop's own
// optimiser step, AfterStep.
#ifndef RINGLAB_TORCH_BACKEND_TORCH_SYNCHRONIZER_H_
#define RINGLAB_TORCH_BACKEND_TORCH_SYNCHRONIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "sync/synchronizer.h"
#include "trace/trace.h"

namespace ringlab::torch_backend {

using NamedShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

class TorchSynchronizer {
 public:
  // Over `comm` (its own: the group's channels run other collectives),
  // collectively: the ranks' layouts are compared (std::invalid_argument
  // listing both where they differ) and the options checked against the
  // synchroniser's declarations (std::invalid_argument naming the option).
  // The buffers start at zero; Start() follows once params() holds the
  // model's values.
  TorchSynchronizer(std::unique_ptr<comm::Communicator> comm,
                    const NamedShapes& layout, const std::string& name,
                    const std::map<std::string, std::string>& options);
  ~TorchSynchronizer();

  float* params();
  float* grads();
  size_t num_params() const { return layout_.num_params(); }
  const sync::ParamLayout& layout() const { return layout_; }

  // Rank 0's parameters to every rank (as DDP's constructor), then the
  // synchroniser's start.
  void Start();
  // Backward has written tensor `tensor`'s gradient into grads().
  void GradReady(size_t tensor);
  // Around the loop's optimiser step.
  void AfterBackward();
  void AfterStep();
  int64_t step() const { return step_; }
  // DiLoCo's outer parameters, or null where the model's are the result.
  const std::vector<float>* evaluated_params() const {
    return synchronizer_->evaluated_params();
  }
  uint64_t bytes_sent() const { return comm_->bytes_sent(); }

 private:
  class Buffers;
  std::unique_ptr<comm::Communicator> comm_;
  const sync::ParamLayout layout_;
  const std::string name_;
  const sync::OptionValues options_;
  std::unique_ptr<Buffers> buffers_;
  trace::Tracer tracer_{/*enabled=*/false, 0};
  std::unique_ptr<sync::Synchronizer> synchronizer_;
  int64_t step_ = 0;
  // This step's observer, asked for at its first gradient; whether asked.
  sync::GradObserver* observer_ = nullptr;
  bool observing_ = false;
  size_t reported_ = 0;
};

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_TORCH_SYNCHRONIZER_H_
