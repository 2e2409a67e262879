#include "nn/cuda_kernels.h"

namespace ringlab::nn::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return b > 65535 ? 65535 : static_cast<int>(b);  // grid-stride loops
}

__global__ void AddBiasKernel(float* y, const float* b, int64_t n, int cols,
                              bool relu) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{blockDim.x} * gridDim.x) {
    float v = y[k] + b[k % cols];
    y[k] = relu ? (v < 0.0f ? 0.0f : v) : v;
  }
}

__global__ void ReluBackwardKernel(const float* h, float* dh, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{blockDim.x} * gridDim.x) {
    if (!(h[k] > 0.0f)) dh[k] = 0.0f;
  }
}

__global__ void BiasGradKernel(const float* dy, float* db, int rows, int cols) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols;
       i += blockDim.x * gridDim.x) {
    float s = 0.0f;
    for (int j = 0; j < rows; ++j) s += dy[static_cast<int64_t>(j) * cols + i];
    db[i] = s;
  }
}

__global__ void SoftmaxCeKernel(const float* z, const int64_t* labels, int rows,
                                int cols, float* row_loss, float* dz) {
  const float inv = 1.0f / rows;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < rows;
       j += blockDim.x * gridDim.x) {
    const float* zj = z + static_cast<int64_t>(j) * cols;
    float* dj = dz + static_cast<int64_t>(j) * cols;
    float mx = zj[0];
    for (int k = 1; k < cols; ++k) mx = fmaxf(mx, zj[k]);
    float s = 0.0f;
    for (int k = 0; k < cols; ++k) s += expf(zj[k] - mx);
    const float lse = logf(s);
    const int64_t y = labels[j];
    row_loss[j] = -((zj[y] - mx) - lse);
    for (int k = 0; k < cols; ++k) {
      const float p = expf((zj[k] - mx) - lse);
      dj[k] = (p - (k == y ? 1.0f : 0.0f)) * inv;
    }
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
    float d = g[k];
    if (wd != 0.0f) d = fmaf(p[k], wd, d);
    if (momentum != 0.0f) {
      const float b = first ? d : fmaf(d, keep, buf[k] * momentum);
      buf[k] = b;
      d = nesterov ? fmaf(b, momentum, d) : b;
    }
    p[k] = fmaf(d, neg_lr, p[k]);
  }
}

}  // namespace

cudaError_t AddBias(float* y, const float* b, int rows, int cols, bool relu,
                    cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  AddBiasKernel<<<Blocks(n), kThreads, 0, stream>>>(y, b, n, cols, relu);
  return cudaGetLastError();
}

cudaError_t ReluBackward(const float* h, float* dh, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(h, dh, n);
  return cudaGetLastError();
}

cudaError_t BiasGrad(const float* dy, float* db, int rows, int cols,
                     cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  BiasGradKernel<<<Blocks(cols), kThreads, 0, stream>>>(dy, db, rows, cols);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(const float* logits, const int64_t* labels,
                                int rows, int cols, float* row_loss,
                                float* dlogits, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  SoftmaxCeKernel<<<Blocks(rows), kThreads, 0, stream>>>(
      logits, labels, rows, cols, row_loss, dlogits);
  return cudaGetLastError();
}

cudaError_t MeanLoss(const float* row_loss, int rows, float* out,
                     cudaStream_t stream) {
  MeanLossKernel<<<1, kThreads, 0, stream>>>(row_loss, rows, out);
  return cudaGetLastError();
}

cudaError_t Sgd(float* params, const float* grads, float* buf, int64_t n,
                float lr, float momentum, double dampening, float weight_decay,
                bool nesterov, bool first, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const float keep = static_cast<float>(1.0 - dampening);
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(params, grads, buf, n, -lr,
                                                momentum, keep, weight_decay,
                                                nesterov, first);
  return cudaGetLastError();
}

}  // namespace ringlab::nn::cuda
