// The trainer's MLP as a synchroniser sees it (sync/model.h): its layout as
// named tensors, its flat buffers, and backward's per-layer reports turned
// into per-tensor ones (each layer's weight, then its bias).
#ifndef RINGLAB_TRAIN_MLP_BUFFERS_H_
#define RINGLAB_TRAIN_MLP_BUFFERS_H_

#include <functional>

#include "nn/mlp.h"
#include "sync/model.h"
#include "sync/param_layout.h"

namespace ringlab::train {

sync::ParamLayout SyncLayoutOf(const nn::MlpLayout& layout);

class MlpBuffers : public sync::ModelBuffers {
 public:
  explicit MlpBuffers(nn::Mlp& model)
      : model_(model), layout_(SyncLayoutOf(model.layout())) {}
  const sync::ParamLayout& layout() const override { return layout_; }
  comm::MemoryKind memory() const override;
  float* params() override { return model_.params(); }
  float* grads() override { return model_.grads(); }
  void GetParams(float* host) const override { model_.GetParams(host); }
  void SetParams(const float* host) override { model_.SetParams(host); }
  void GetGrads(float* host) const override { model_.GetGrads(host); }
  void SetGrads(const float* host) override { model_.SetGrads(host); }
  void BindThread() const override { model_.BindThread(); }

 private:
  nn::Mlp& model_;
  const sync::ParamLayout layout_;
};

// Passes the MLP's backward reports to a synchroniser's observer.
class LayerToTensorObserver : public nn::BackwardObserver {
 public:
  explicit LayerToTensorObserver(sync::GradObserver& observer)
      : observer_(observer) {}
  void OnForwardDone() override { observer_.OnForwardDone(); }
  void OnLayerGrads(int layer, std::function<void()> wait_ready) override {
    observer_.OnGradReady(2 * static_cast<size_t>(layer), wait_ready);
    observer_.OnGradReady(2 * static_cast<size_t>(layer) + 1, wait_ready);
  }

 private:
  sync::GradObserver& observer_;
};

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_MLP_BUFFERS_H_
