// The model the kit trains: a multilayer perceptron (Linear → ReLU → … →
// Linear) with softmax cross-entropy, behind one interface with a CPU backend
// (BLAS) and a CUDA backend (cuBLAS). All parameters live in one contiguous
// float buffer and all gradients in another, in the layout MlpLayout describes
// (PyTorch's [out, in] weights, state_dict names fc1.weight, fc1.bias, …), so a
// synchroniser can allreduce them in one piece, as DDP's buckets do.
#ifndef RINGLAB_NN_MLP_H_
#define RINGLAB_NN_MLP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ringlab::nn {

// One named tensor inside the flat parameter buffer.
struct TensorSlot {
  std::string name;            // state_dict name: "fc1.weight", "fc1.bias", …
  std::vector<int64_t> shape;  // {out, in} for a weight, {out} for a bias
  size_t offset = 0;           // in floats, from the start of the buffer
  size_t size = 0;             // number of floats
};

// Where each layer's weight and bias live in the flat buffer: layer by layer,
// weight then bias (nn.Module registration order, so state_dict order too).
class MlpLayout {
 public:
  // widths = {10, 5, 2} is Linear(10,5) → ReLU → Linear(5,2). Throws
  // std::invalid_argument unless there are ≥ 2 widths, all positive.
  explicit MlpLayout(std::vector<int> widths);
  // Parses "10,5,2". Throws std::invalid_argument with a readable message.
  static MlpLayout Parse(const std::string& text);

  const std::vector<int>& widths() const { return widths_; }
  int num_layers() const { return static_cast<int>(widths_.size()) - 1; }
  int in_features() const { return widths_.front(); }
  int num_classes() const { return widths_.back(); }
  size_t num_params() const { return num_params_; }
  // 2 per layer: weight then bias.
  const std::vector<TensorSlot>& tensors() const { return tensors_; }
  const TensorSlot& weight(int layer) const { return tensors_[2 * layer]; }
  const TensorSlot& bias(int layer) const { return tensors_[2 * layer + 1]; }
  std::string ToString() const;  // "10,5,2"

 private:
  std::vector<int> widths_;
  std::vector<TensorSlot> tensors_;
  size_t num_params_ = 0;
};

enum class Device { kCpu, kCuda };
const char* DeviceName(Device device);

// SGD as torch.optim.SGD: with weight_decay, g += wd·p; with momentum, the
// buffer starts as g and is then buf = momentum·buf + (1 − dampening)·g;
// nesterov uses g + momentum·buf. Plain SGD (the default) is p = fmaf(g, −lr,
// p), as PyTorch's CPU build computes it.
struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  // A double, as in Python: torch computes 1 − dampening in double and rounds
  // it to float once (1 − 0.9 and 1 − 0.9f round differently).
  double dampening = 0.0;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

// Throws std::invalid_argument for what torch.optim.SGD refuses: a negative
// lr, momentum or weight decay, Nesterov without momentum or with dampening.
void ValidateSgdOptions(const SgdOptions& options);

// What ForwardBackward tells an observer as it goes, so that a synchroniser
// can reduce gradients while backward is still running (what DDP's reducer
// hooks do) and a timeline can show each phase.
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  // The forward pass and the loss have been computed (on CUDA: enqueued).
  virtual void OnForwardDone() {}
  // Backward has produced layer `layer`'s weight and bias gradients; layers
  // come last to first, each exactly once per ForwardBackward (also for an
  // empty batch). wait_ready blocks until those gradients are in memory: a
  // no-op on the CPU, where they are when this is called; on CUDA it waits
  // for an event recorded after the layer's kernels. It may be called from
  // another thread until ForwardBackward's next call.
  virtual void OnLayerGrads(int layer, std::function<void()> wait_ready) = 0;
};

class Mlp {
 public:
  virtual ~Mlp() = default;

  const MlpLayout& layout() const { return layout_; }
  virtual Device device() const = 0;

  // The flat buffers, in the backend's memory (host for kCpu, device for
  // kCuda).
  virtual float* params() = 0;
  virtual float* grads() = 0;

  // Host copies, each layout().num_params() floats.
  virtual void SetParams(const float* host) = 0;
  virtual void GetParams(float* host) const = 0;
  virtual void GetGrads(float* host) const = 0;
  // Replaces the gradients (a synchroniser staging them through host memory).
  virtual void SetGrads(const float* host) = 0;

  // Overwrites the gradients with those of the mean cross-entropy loss on this
  // batch (x: [batch, in] row-major, labels in [0, classes)) and returns the
  // loss. batch may be 0: loss 0, gradients 0.
  // observer, when not null, is told of each phase as it completes.
  virtual float ForwardBackward(const float* x, const int64_t* labels,
                                int batch, BackwardObserver* observer) = 0;
  float ForwardBackward(const float* x, const int64_t* labels, int batch) {
    return ForwardBackward(x, labels, batch, nullptr);
  }
  // Logits [batch, classes] into host memory.
  virtual void Forward(const float* x, int batch, float* logits) = 0;
  // One optimiser step on params() from grads().
  virtual void SgdStep(const SgdOptions& options) = 0;
  // The optimiser's momentum buffers (num_params floats, host copies), which
  // a resumed run needs to take the step it would have taken. Get returns
  // false, leaving host untouched, before any step with momentum; after Set,
  // the next step continues from them instead of starting them afresh.
  virtual bool GetMomentum(float* host) const = 0;
  virtual void SetMomentum(const float* host) = 0;
  // Makes the calling thread's work go where this model lives: a thread that
  // reduces its gradients (the CUDA backend selects its device; the CPU one
  // has nothing to do).
  virtual void BindThread() const {}

 protected:
  explicit Mlp(MlpLayout layout) : layout_(std::move(layout)) {}

 private:
  MlpLayout layout_;
};

// Creates a model with zero parameters on the given device. Throws
// std::runtime_error when the backend is not built into this binary (CUDA
// without a toolkit) or no device can be used.
std::unique_ptr<Mlp> CreateMlp(Device device, const MlpLayout& layout);

// Backends register themselves (the CUDA one only when it is linked in).
using MlpFactory = std::function<std::unique_ptr<Mlp>(const MlpLayout&)>;
bool RegisterMlpBackend(Device device, MlpFactory factory);
bool HasMlpBackend(Device device);

}  // namespace ringlab::nn

#endif  // RINGLAB_NN_MLP_H_
