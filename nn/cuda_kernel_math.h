// The arithmetic of the CUDA backend's small kernels (cuda_kernels.cu), one
// element, column or row at a time, as functions that compile both for the
// GPU (nvcc: __host__ __device__) and for the CPU (a plain C++ compiler).
// The kernels call them, and the per-kernel tests (kernel_math_test here,
// cuda_kernels_test on a GPU) run the very same code on the CPU against the
// CPU backend's reference, so that the formulas and the tests' tolerances are
// checked where no GPU exists. On a GPU only expf/logf differ (CUDA's are
// within 2 and 1 ulp; glibc's within 1), and the kernels' indexing is what
// cuda_kernels_test adds.
#ifndef RINGLAB_NN_CUDA_KERNEL_MATH_H_
#define RINGLAB_NN_CUDA_KERNEL_MATH_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define RINGLAB_HOST_DEVICE __host__ __device__
#else
#define RINGLAB_HOST_DEVICE
#endif

namespace ringlab::nn::cuda {

// Threads of MeanLoss's one block (its summation order depends on it).
inline constexpr int kMeanLossThreads = 256;

// y + b, then ReLU (NaN stays NaN, as in torch).
RINGLAB_HOST_DEVICE inline float AddBiasOne(float y, float b, bool relu) {
  const float v = y + b;
  return relu ? (v < 0.0f ? 0.0f : v) : v;
}

// The gradient through a ReLU whose output was h.
RINGLAB_HOST_DEVICE inline float ReluBackwardOne(float h, float dh) {
  return h > 0.0f ? dh : 0.0f;
}

// Σ_j dy[j, i] over rows j = 0..rows-1, in that order.
RINGLAB_HOST_DEVICE inline float BiasGradColumn(const float* dy, int rows,
                                                int cols, int i) {
  float s = 0.0f;
  for (int j = 0; j < rows; ++j) s += dy[static_cast<int64_t>(j) * cols + i];
  return s;
}

// One row of softmax cross-entropy: *loss = -log_softmax(z)[y] and
// dz[k] = (softmax(z)[k] - [k == y]) * inv_rows, stably (z - max).
RINGLAB_HOST_DEVICE inline void SoftmaxCeRow(const float* z, int64_t y,
                                             int cols, float inv_rows,
                                             float* loss, float* dz) {
  float mx = z[0];
  for (int k = 1; k < cols; ++k) mx = fmaxf(mx, z[k]);
  float s = 0.0f;
  for (int k = 0; k < cols; ++k) s += expf(z[k] - mx);
  const float lse = logf(s);
  *loss = -((z[y] - mx) - lse);
  for (int k = 0; k < cols; ++k) {
    const float p = expf((z[k] - mx) - lse);
    dz[k] = (p - (k == y ? 1.0f : 0.0f)) * inv_rows;
  }
}

// torch.optim.SGD on one parameter (see SgdOptions): weight decay, the
// momentum buffer (first: it starts as the gradient), Nesterov, then
// p - lr·d, each `a.add(b, alpha=c)` an fmaf as in the CPU backend.
RINGLAB_HOST_DEVICE inline float SgdOne(float p, float g, float* buf,
                                        float neg_lr, float momentum,
                                        float keep, float wd, bool nesterov,
                                        bool first) {
  float d = g;
  if (wd != 0.0f) d = fmaf(p, wd, d);
  if (momentum != 0.0f) {
    const float b = first ? d : fmaf(d, keep, *buf * momentum);
    *buf = b;
    d = nesterov ? fmaf(b, momentum, d) : b;
  }
  return fmaf(d, neg_lr, p);
}

// MeanLoss's result in its kernel's order, on the CPU: thread t of
// kMeanLossThreads sums rows t, t + kMeanLossThreads, ... in order, then the
// partial sums are added pairwise (t += t + w for w = 128, 64, ..., 1).
inline float MeanLossInKernelOrder(const float* row_loss, int rows) {
  float partial[kMeanLossThreads];
  for (int t = 0; t < kMeanLossThreads; ++t) {
    float s = 0.0f;
    for (int j = t; j < rows; j += kMeanLossThreads) s += row_loss[j];
    partial[t] = s;
  }
  for (int w = kMeanLossThreads / 2; w > 0; w /= 2) {
    for (int t = 0; t < w; ++t) partial[t] += partial[t + w];
  }
  return rows > 0 ? partial[0] / rows : 0.0f;
}

}  // namespace ringlab::nn::cuda

#endif  // RINGLAB_NN_CUDA_KERNEL_MATH_H_
