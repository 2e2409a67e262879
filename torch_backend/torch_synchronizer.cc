#include "torch_backend/torch_synchronizer.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "comm/gather_strings.h"

namespace ringlab::torch_backend {

// The flat buffers in the communicator's registered host memory.
class TorchSynchronizer::Buffers : public sync::ModelBuffers {
 public:
  Buffers(comm::Communicator& comm, const sync::ParamLayout& layout)
      : layout_(layout),
        params_(comm.Allocate(layout.num_params())),
        grads_(comm.Allocate(layout.num_params())) {
    std::fill(params_, params_ + layout.num_params(), 0.0f);
    std::fill(grads_, grads_ + layout.num_params(), 0.0f);
  }
  const sync::ParamLayout& layout() const override { return layout_; }
  comm::MemoryKind memory() const override { return comm::MemoryKind::kHost; }
  float* params() override { return params_; }
  float* grads() override { return grads_; }
  void GetParams(float* host) const override { Copy(params_, host); }
  void SetParams(const float* host) override { Copy(host, params_); }
  void GetGrads(float* host) const override { Copy(grads_, host); }
  void SetGrads(const float* host) override { Copy(host, grads_); }

 private:
  void Copy(const float* from, float* to) const {
    std::memcpy(to, from, layout_.num_params() * sizeof(float));
  }
  const sync::ParamLayout& layout_;
  float* const params_;
  float* const grads_;
};

TorchSynchronizer::TorchSynchronizer(
    std::unique_ptr<comm::Communicator> comm, const NamedShapes& layout,
    const std::string& name, const std::map<std::string, std::string>& options)
    : comm_(std::move(comm)),
      layout_(layout),
      name_(name),
      options_(sync::ParseSyncOptions(name, options)) {
  if (comm_->memory() != comm::MemoryKind::kHost) {
    throw std::invalid_argument(
        std::string("ringlab_torch.Synchronizer keeps the parameters in host "
                    "memory; the group's backend ") +
        comm_->backend() + " reduces device memory");
  }
  sync::CheckSyncModel(name_, options_, layout_);  // before any collective
  // DDP's constructor compares the ranks' parameter shapes: so does this,
  // and the synchroniser and its options, listing both where they differ.
  std::string job = layout_.ToString() + "; --sync=" + name_;
  for (const auto& [option, value] : options_.values()) {
    job += " --" + option + "=" + options_.Text(option);
  }
  const std::vector<std::string> layouts = comm::AllGatherStrings(*comm_, job);
  for (size_t rank = 1; rank < layouts.size(); ++rank) {
    if (layouts[rank] != layouts[0]) {
      throw std::invalid_argument(
          "ranks disagree on the model or the synchroniser: rank 0 has " +
          layouts[0] + ", rank " + std::to_string(rank) + " has " +
          layouts[rank]);
    }
  }
  buffers_ = std::make_unique<Buffers>(*comm_, layout_);
  synchronizer_ = sync::CreateSync(
      name_, {*comm_, *buffers_, options_, tracer_, /*host_comm=*/nullptr});
}

TorchSynchronizer::~TorchSynchronizer() = default;

float* TorchSynchronizer::params() { return buffers_->params(); }
float* TorchSynchronizer::grads() { return buffers_->grads(); }

void TorchSynchronizer::Start() {
  sync::BroadcastParams(*comm_, *buffers_, /*root=*/0);
  synchronizer_->Start(*buffers_, /*resumed=*/false);
}

void TorchSynchronizer::GradReady(size_t tensor) {
  if (tensor >= layout_.tensors().size()) {
    throw std::out_of_range("no tensor " + std::to_string(tensor));
  }
  if (!observing_) {
    observer_ = synchronizer_->backward_observer(step_);
    observing_ = true;
  }
  ++reported_;
  if (observer_ != nullptr) observer_->OnGradReady(tensor, [] {});
}

void TorchSynchronizer::AfterBackward() {
  if (observer_ != nullptr && reported_ != layout_.tensors().size()) {
    throw std::invalid_argument(
        "ringlab_torch.Synchronizer.step(): backward gave " +
        std::to_string(reported_) + " of the model's " +
        std::to_string(layout_.tensors().size()) +
        " gradients (every parameter must take part in the loss, and step() "
        "follows loss.backward())");
  }
  synchronizer_->AfterBackward(*buffers_, step_);
}

void TorchSynchronizer::AfterStep() {
  synchronizer_->AfterStep(*buffers_, step_);
  ++step_;
  observer_ = nullptr;
  observing_ = false;
  reported_ = 0;
}

}  // namespace ringlab::torch_backend
