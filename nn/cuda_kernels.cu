#include "nn/cuda_kernel_math.h"
#include "nn/cuda_kernels.h"

namespace ringlab::nn::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(kMeanLossThreads == kThreads, "MeanLoss runs one block");

int Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return b > 65535 ? 65535 : static_cast<int>(b);  // grid-stride loops
}

__global__ void AddBiasKernel(float* y, const float* b, int64_t n, int cols,
                              bool relu) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{blockDim.x} * gridDim.x) {
    y[k] = AddBiasOne(y[k], b[k % cols], relu);
  }
}

__global__ void ReluBackwardKernel(const float* h, float* dh, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{blockDim.x} * gridDim.x) {
    dh[k] = ReluBackwardOne(h[k], dh[k]);
  }
}

__global__ void BiasGradKernel(const float* dy, float* db, int rows, int cols) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols;
       i += blockDim.x * gridDim.x) {
    db[i] = BiasGradColumn(dy, rows, cols, i);
  }
}

__global__ void SoftmaxCeKernel(const float* z, const int64_t* labels, int rows,
                                int cols, float* row_loss, float* dz) {
  const float inv = 1.0f / rows;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < rows;
       j += blockDim.x * gridDim.x) {
    SoftmaxCeRow(z + static_cast<int64_t>(j) * cols, labels[j], cols, inv,
                 &row_loss[j], dz + static_cast<int64_t>(j) * cols);
  }
}

__global__ void MeanLossKernel(const float* row_loss, int rows, float* out) {
  __shared__ float partial[kThreads];
  float s = 0.0f;
  for (int j = threadIdx.x; j < rows; j += blockDim.x) s += row_loss[j];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = rows > 0 ? partial[0] / rows : 0.0f;
}

__global__ void SgdKernel(float* p, const float* g, float* buf, int64_t n,
                          float neg_lr, float momentum, float keep, float wd,
                          bool nesterov, bool first) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{blockDim.x} * gridDim.x) {
    p[k] = SgdOne(p[k], g[k], momentum != 0.0f ? &buf[k] : nullptr, neg_lr,
                  momentum, keep, wd, nesterov, first);
  }
}

}  // namespace

cudaError_t AddBias(float* y, const float* b, int rows, int cols, bool relu,
                    cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  (void)cudaGetLastError();  // an older error is not this launch's
  AddBiasKernel<<<Blocks(n), kThreads, 0, stream>>>(y, b, n, cols, relu);
  return cudaGetLastError();
}

cudaError_t ReluBackward(const float* h, float* dh, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  (void)cudaGetLastError();
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(h, dh, n);
  return cudaGetLastError();
}

cudaError_t BiasGrad(const float* dy, float* db, int rows, int cols,
                     cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  (void)cudaGetLastError();
  BiasGradKernel<<<Blocks(cols), kThreads, 0, stream>>>(dy, db, rows, cols);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(const float* logits, const int64_t* labels,
                                int rows, int cols, float* row_loss,
                                float* dlogits, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  (void)cudaGetLastError();
  SoftmaxCeKernel<<<Blocks(rows), kThreads, 0, stream>>>(
      logits, labels, rows, cols, row_loss, dlogits);
  return cudaGetLastError();
}

cudaError_t MeanLoss(const float* row_loss, int rows, float* out,
                     cudaStream_t stream) {
  (void)cudaGetLastError();
  MeanLossKernel<<<1, kThreads, 0, stream>>>(row_loss, rows, out);
  return cudaGetLastError();
}

cudaError_t Sgd(float* params, const float* grads, float* buf, int64_t n,
                float lr, float momentum, double dampening, float weight_decay,
                bool nesterov, bool first, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const float keep = static_cast<float>(1.0 - dampening);
  (void)cudaGetLastError();
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(params, grads, buf, n, -lr,
                                                momentum, keep, weight_decay,
                                                nesterov, first);
  return cudaGetLastError();
}

}  // namespace ringlab::nn::cuda
