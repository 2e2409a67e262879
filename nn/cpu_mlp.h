// The CPU backend of Mlp: parameters, gradients and SGD momentum buffers in
// host memory, arithmetic from cpu_ops.h (OpenBLAS, or loops in the reference
// BLAS's order: GemmMode says which one matches PyTorch where).
// CreateMlp(kCpu, …) builds one with the process-wide default GEMM mode;
// CreateCpuMlp picks one.
#ifndef RINGLAB_NN_CPU_MLP_H_
#define RINGLAB_NN_CPU_MLP_H_

#include <memory>
#include <vector>

#include "nn/cpu_ops.h"
#include "nn/mlp.h"

namespace ringlab::nn {

struct CpuMlpOptions {
  GemmMode gemm = GemmMode::kBlas;
  // Where the model keeps its flat parameters and gradients, when not in
  // memory of its own: num_params() floats each, owned by the caller and
  // outliving the model (e.g. a communicator's registered memory, so that an
  // allreduce of them copies nothing).
  float* params_memory = nullptr;
  float* grads_memory = nullptr;
};

// What CreateMlp(Device::kCpu, …) uses (kBlas unless changed). Not meant to be
// changed while other threads create models.
void SetDefaultCpuGemmMode(GemmMode mode);
GemmMode DefaultCpuGemmMode();

// How many threads OpenBLAS uses in this process. A rank of a multi-rank job
// wants 1 (as PyTorch's launchers set OMP_NUM_THREADS=1): N ranks on a few
// cores must not each start a thread per core, and a GEMM split over
// threads may sum in another order, so one rank would compute other bits
// than the same rank under another launcher.
void SetBlasThreads(int threads);

class CpuMlp : public Mlp {
 public:
  CpuMlp(const MlpLayout& layout, CpuMlpOptions options);

  Device device() const override { return Device::kCpu; }
  float* params() override { return params_; }
  float* grads() override { return grads_; }
  void SetParams(const float* host) override;
  void GetParams(float* host) const override;
  void GetGrads(float* host) const override;
  void SetGrads(const float* host) override;
  using Mlp::ForwardBackward;
  float ForwardBackward(const float* x, const int64_t* labels, int batch,
                        BackwardObserver* observer) override;
  void Forward(const float* x, int batch, float* logits) override;
  void SgdStep(const SgdOptions& options) override;
  bool GetMomentum(float* host) const override;
  void SetMomentum(const float* host) override;

  GemmMode gemm_mode() const { return options_.gemm; }
  void set_gemm_mode(GemmMode mode) { options_.gemm = mode; }

 private:
  CpuMlpOptions options_;
  std::vector<float> own_params_, own_grads_, momentum_;
  float* params_;  // own_params_ or the caller's memory
  float* grads_;
  size_t n_;  // layout().num_params()
  bool have_momentum_ = false;
  MlpWorkspace<float> ws_;
};

std::unique_ptr<CpuMlp> CreateCpuMlp(const MlpLayout& layout,
                                     CpuMlpOptions options = {});

// torch.optim.SGD's update on flat host arrays (used by CpuMlp; exposed for
// tests). momentum_buf/have_buf carry the state between steps; momentum_buf
// may be null when options.momentum == 0.
void SgdUpdate(const SgdOptions& options, float* params, const float* grads,
               float* momentum_buf, bool* have_buf, size_t n);

}  // namespace ringlab::nn

#endif  // RINGLAB_NN_CPU_MLP_H_
