#include "nn/cuda_mlp.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "cuda/error.h"
#include "nn/cuda_kernels.h"
#include "nn/labels.h"
#include "nn/mlp.h"

namespace ringlab::nn {
namespace {

// nn::cuda is this package's kernels; //cuda is ringlab::cuda.
using ::ringlab::cuda::DeviceBuffer;

#define RINGLAB_CUBLAS_CHECK(expr) CheckCublas((expr), #expr)

// cuBLAS's failures as //cuda's one exception type, its status kept.
void CheckCublas(cublasStatus_t st, const char* expr) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    throw ::ringlab::cuda::CudaError(std::string(expr) +
                                         " failed: " + cublasGetStatusName(st) +
                                         " (" + cublasGetStatusString(st) + ")",
                                     st);
  }
}

class CudaMlp : public Mlp {
 public:
  explicit CudaMlp(const MlpLayout& layout)
      : Mlp(layout),
        layer_events_(layout.num_layers(), nullptr),
        act_(layout.num_layers()),
        grad_(layout.num_layers()) {
    RINGLAB_CUDA_CHECK(cudaGetDevice(&device_));
    RINGLAB_CUDA_CHECK(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
      for (cudaEvent_t& event : layer_events_) {
        RINGLAB_CUDA_CHECK(
            cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      }
      RINGLAB_CUBLAS_CHECK(cublasCreate(&blas_));
      RINGLAB_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
      // Keep FP32 GEMMs in full FP32 (no TF32), so results stay comparable
      // with the CPU backend.
      RINGLAB_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
      const size_t n = layout.num_params();
      params_.Reserve(n);
      grads_.Reserve(n);
      loss_.Reserve(1);
      RINGLAB_CUDA_CHECK(
          cudaMemsetAsync(params_.get(), 0, n * sizeof(float), stream_));
      RINGLAB_CUDA_CHECK(
          cudaMemsetAsync(grads_.get(), 0, n * sizeof(float), stream_));
      RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } catch (...) {
      Release();
      throw;
    }
  }
  ~CudaMlp() override { Release(); }

  Device device() const override { return Device::kCuda; }
  float* params() override { return params_.get(); }
  float* grads() override { return grads_.get(); }

  void SetParams(const float* host) override {
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(params_.get(), host, Bytes(),
                                       cudaMemcpyHostToDevice, stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void GetParams(float* host) const override {
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(host, params_.get(), Bytes(),
                                       cudaMemcpyDeviceToHost, stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void GetGrads(float* host) const override {
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(host, grads_.get(), Bytes(),
                                       cudaMemcpyDeviceToHost, stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  bool GetMomentum(float* host) const override {
    if (!have_momentum_) return false;
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(host, momentum_.get(), Bytes(),
                                       cudaMemcpyDeviceToHost, stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return true;
  }
  void SetMomentum(const float* host) override {
    momentum_.Reserve(layout().num_params());
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(momentum_.get(), host, Bytes(),
                                       cudaMemcpyHostToDevice, stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    have_momentum_ = true;
  }
  void SetGrads(const float* host) override {
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(grads_.get(), host, Bytes(),
                                       cudaMemcpyHostToDevice, stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  using Mlp::ForwardBackward;
  float ForwardBackward(const float* x, const int64_t* labels, int batch,
                        BackwardObserver* observer) override {
    const MlpLayout& L = layout();
    if (batch < 0) {
      throw std::invalid_argument("batch must be >= 0, got " +
                                  std::to_string(batch));
    }
    CheckLabels(labels, batch, L.num_classes());
    if (batch == 0) {
      RINGLAB_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, Bytes(), stream_));
      RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (observer != nullptr) {
        observer->OnForwardDone();
        for (int l = L.num_layers() - 1; l >= 0; --l) {
          observer->OnLayerGrads(l, [] {});
        }
      }
      return 0.0f;
    }
    RunForward(x, batch);
    labels_.Reserve(batch);
    row_loss_.Reserve(batch);
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(labels_.get(), labels,
                                       batch * sizeof(int64_t),
                                       cudaMemcpyHostToDevice, stream_));
    const int layers = L.num_layers();
    for (int l = 0; l < layers; ++l) {
      grad_[l].Reserve(static_cast<size_t>(batch) * L.widths()[l + 1]);
    }
    RINGLAB_CUDA_CHECK(cuda::SoftmaxCrossEntropy(
        act_[layers - 1].get(), labels_.get(), batch, L.num_classes(),
        row_loss_.get(), grad_[layers - 1].get(), stream_));
    RINGLAB_CUDA_CHECK(
        cuda::MeanLoss(row_loss_.get(), batch, loss_.get(), stream_));
    if (observer != nullptr) observer->OnForwardDone();
    const float one = 1.0f, zero = 0.0f;
    for (int l = layers - 1; l >= 0; --l) {
      const int in = L.widths()[l], out = L.widths()[l + 1];
      if (l + 1 < layers) {
        RINGLAB_CUDA_CHECK(cuda::ReluBackward(act_[l].get(), grad_[l].get(),
                                              static_cast<int64_t>(batch) * out,
                                              stream_));
      }
      const float* xin = l == 0 ? x_.get() : act_[l - 1].get();
      float* dw = grads_.get() + L.weight(l).offset;
      float* db = grads_.get() + L.bias(l).offset;
      const float* w = params_.get() + L.weight(l).offset;
      // Row-major dW[out,in] = dY^T X is column-major dW^T[in,out] = X^T·dY
      // with X^T = (in x batch, ld in) and dY as (out x batch, ld out),
      // transposed.
      RINGLAB_CUBLAS_CHECK(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, in, out,
                                       batch, &one, xin, in, grad_[l].get(),
                                       out, &zero, dw, in));
      RINGLAB_CUDA_CHECK(
          cuda::BiasGrad(grad_[l].get(), db, batch, out, stream_));
      if (l > 0) {
        // Row-major dX[batch,in] = dY·W is column-major dX^T = W^T·dY^T, where
        // W^T is W's storage read as (in x out, ld in).
        RINGLAB_CUBLAS_CHECK(cublasSgemm(
            blas_, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, &one, w, in,
            grad_[l].get(), out, &zero, grad_[l - 1].get(), in));
      }
      if (observer != nullptr) NotifyLayerGrads(l, observer);
    }
    float loss = 0.0f;
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(&loss, loss_.get(), sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return loss;
  }

  void BindThread() const override {
    RINGLAB_CUDA_CHECK(cudaSetDevice(device_));
  }

  void Forward(const float* x, int batch, float* logits) override {
    if (batch < 0) {
      throw std::invalid_argument("batch must be >= 0, got " +
                                  std::to_string(batch));
    }
    if (batch == 0) return;
    RunForward(x, batch);
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(
        logits, act_[layout().num_layers() - 1].get(),
        static_cast<size_t>(batch) * layout().num_classes() * sizeof(float),
        cudaMemcpyDeviceToHost, stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void SgdStep(const SgdOptions& o) override {
    ValidateSgdOptions(o);
    const size_t n = layout().num_params();
    if (o.momentum != 0.0f) momentum_.Reserve(n);
    const bool first = o.momentum != 0.0f && !have_momentum_;
    RINGLAB_CUDA_CHECK(cuda::Sgd(params_.get(), grads_.get(),
                                 o.momentum != 0.0f ? momentum_.get() : nullptr,
                                 static_cast<int64_t>(n), o.lr, o.momentum,
                                 o.dampening, o.weight_decay, o.nesterov, first,
                                 stream_));
    RINGLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (o.momentum != 0.0f) have_momentum_ = true;
  }

 private:
  size_t Bytes() const { return layout().num_params() * sizeof(float); }

  // Records an event after layer l's gradient kernels, which the observer's
  // wait_ready (possibly on another thread) synchronises with.
  void NotifyLayerGrads(int l, BackwardObserver* observer) {
    cudaEvent_t event = layer_events_[l];
    RINGLAB_CUDA_CHECK(cudaEventRecord(event, stream_));
    observer->OnLayerGrads(
        l, [event] { RINGLAB_CUDA_CHECK(cudaEventSynchronize(event)); });
  }

  void Release() {
    for (cudaEvent_t& event : layer_events_) {
      if (event) cudaEventDestroy(event);
      event = nullptr;
    }
    if (blas_) cublasDestroy(blas_);
    blas_ = nullptr;
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  // Copies x to the device and leaves each layer's output in act_.
  void RunForward(const float* x, int batch) {
    const MlpLayout& L = layout();
    x_.Reserve(static_cast<size_t>(batch) * L.in_features());
    RINGLAB_CUDA_CHECK(cudaMemcpyAsync(
        x_.get(), x,
        static_cast<size_t>(batch) * L.in_features() * sizeof(float),
        cudaMemcpyHostToDevice, stream_));
    const float one = 1.0f, zero = 0.0f;
    const float* in_ptr = x_.get();
    for (int l = 0; l < L.num_layers(); ++l) {
      const int in = L.widths()[l], out = L.widths()[l + 1];
      act_[l].Reserve(static_cast<size_t>(batch) * out);
      // Row-major Y[batch,out] = X·W^T is column-major Y^T = W·X^T: W's storage
      // read column-major is W^T (in x out), hence OP_T.
      RINGLAB_CUBLAS_CHECK(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out,
                                       batch, in, &one,
                                       params_.get() + L.weight(l).offset, in,
                                       in_ptr, in, &zero, act_[l].get(), out));
      RINGLAB_CUDA_CHECK(cuda::AddBias(act_[l].get(),
                                       params_.get() + L.bias(l).offset, batch,
                                       out, l + 1 < L.num_layers(), stream_));
      in_ptr = act_[l].get();
    }
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> layer_events_;
  cublasHandle_t blas_ = nullptr;
  DeviceBuffer<float> params_, grads_, momentum_, x_, row_loss_, loss_;
  DeviceBuffer<int64_t> labels_;
  std::vector<DeviceBuffer<float>> act_, grad_;
  bool have_momentum_ = false;
};

std::unique_ptr<Mlp> CreateCudaMlp(const MlpLayout& layout) {
  std::string why;
  if (::ringlab::cuda::DeviceCount(&why) == 0) {
    throw std::runtime_error("CUDA backend: no usable device (" + why + ")");
  }
  return std::make_unique<CudaMlp>(layout);
}

[[maybe_unused]] const bool kRegistered =
    RegisterMlpBackend(Device::kCuda, CreateCudaMlp);

}  // namespace
}  // namespace ringlab::nn
