// The model as a synchroniser sees it: a parameter layout and two flat
// buffers (parameters and gradients) in the memory of one kind, host copies
// of them, and what backward says as it produces gradients. The trainer's MLP
// (train/) and a PyTorch module (torch_backend/) each adapt to this.
#ifndef RINGLAB_SYNC_MODEL_H_
#define RINGLAB_SYNC_MODEL_H_

#include <cstddef>
#include <functional>

#include "comm/communicator.h"
#include "sync/param_layout.h"

namespace ringlab::sync {

// What backward tells a synchroniser as it goes, so that buckets can be
// reduced while backward still runs (DDP's reducer hooks).
class GradObserver {
 public:
  virtual ~GradObserver() = default;
  // The forward pass and the loss are done (or enqueued, on a GPU).
  virtual void OnForwardDone() {}
  // The gradient of the layout's tensor `tensor` is final: every tensor is
  // reported once per backward, in any order. wait_ready blocks until it is
  // in memory (a GPU's event; a no-op on the CPU); it may be called from
  // another thread until the next backward starts.
  virtual void OnGradReady(size_t tensor, std::function<void()> wait_ready) = 0;
};

class ModelBuffers {
 public:
  virtual ~ModelBuffers() = default;
  virtual const ParamLayout& layout() const = 0;
  // Where params() and grads() live.
  virtual comm::MemoryKind memory() const = 0;
  virtual float* params() = 0;
  virtual float* grads() = 0;
  // Host copies, each layout().num_params() floats.
  virtual void GetParams(float* host) const = 0;
  virtual void SetParams(const float* host) = 0;
  virtual void GetGrads(float* host) const = 0;
  virtual void SetGrads(const float* host) = 0;
  // Makes the calling thread's work go where the buffers live (a thread that
  // reduces gradients: a GPU model selects its device).
  virtual void BindThread() const {}
};

// True where the communicator reduces the memory the model's buffers are in.
inline bool SharesMemory(const comm::Communicator& comm,
                         const ModelBuffers& model) {
  return comm.memory() == model.memory();
}

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_MODEL_H_
