// The CPU backend's arithmetic as templates on the scalar type: float for
// training, double so finite-difference gradient checks run on the very same
// code. Matrix products go either to OpenBLAS, called exactly as PyTorch calls
// its BLAS, or to "ordered" loops that reproduce the reference (netlib) BLAS:
// each dot product summed in index order with a separate multiply and add.
// Debian's torch 1.13 uses whichever libblas.so.3 the system selects
// (OpenBLAS once libopenblas0 is installed, as on these machines; else the
// reference BLAS), so either mode can match PyTorch bit for bit; bias gradients
// are summed in ATen's own order. Compile users with -ffp-contract=off (see
// BUILD): the compiler must not fuse the ordered loops' multiply-adds.
#ifndef RINGLAB_NN_CPU_OPS_H_
#define RINGLAB_NN_CPU_OPS_H_

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/labels.h"
#include "nn/mlp.h"
#include "torch_compat/aten_math.h"

namespace ringlab::nn {

// How the CPU backend multiplies matrices. Measured against torch 1.13 on
// these machines (pytorch_match_test): kBlas gives PyTorch's logits bit for bit
// when torch runs on OpenBLAS (Debian's default libblas.so.3 once OpenBLAS is
// installed), kOrdered when torch runs on the reference BLAS
// (LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/blas). Neither is exact in the
// other setting (a few ulps). kBlas is the default: it is also the fast one.
enum class GemmMode {
  kBlas,     // OpenBLAS, with the operand order and bias handling of torch
  kOrdered,  // in-order loops with separate multiply and add (netlib order)
};
const char* GemmModeName(GemmMode mode);

inline bool UseOrdered(GemmMode mode) { return mode == GemmMode::kOrdered; }

namespace cpu_internal {

// Row-major C[m,n] = alpha * op(A) * op(B) + beta * C.
inline void BlasGemm(bool ta, bool tb, int m, int n, int k, float alpha,
                     const float* a, int lda, const float* b, int ldb,
                     float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}
inline void BlasGemm(bool ta, bool tb, int m, int n, int k, double alpha,
                     const double* a, int lda, const double* b, int ldb,
                     double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

}  // namespace cpu_internal

// ATen's cascade sum (SumKernel.cpp multi_row_sum, one row): blocks of 2^p
// elements summed in order into level 0, then carried up 4 levels.
inline int64_t CeilLog2(int64_t x) {
  return x <= 1 ? 0 : 64 - __builtin_clzll(static_cast<uint64_t>(x - 1));
}
template <typename T>
T CascadeSum(const T* v, int64_t stride, int64_t size) {
  constexpr int kLevels = 4;
  const int64_t power = std::max<int64_t>(4, CeilLog2(size) / kLevels);
  const int64_t step = int64_t{1} << power, mask = step - 1;
  T acc[kLevels] = {};
  int64_t i = 0;
  while (i + step <= size) {
    for (int64_t j = 0; j < step; ++j, ++i) acc[0] += v[i * stride];
    for (int j = 1; j < kLevels; ++j) {
      acc[j] += acc[j - 1];
      acc[j - 1] = T(0);
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < size; ++i) acc[0] += v[i * stride];
  for (int j = 1; j < kLevels; ++j) acc[0] += acc[j];
  return acc[0];
}
// ATen's row_sum: 4 interleaved cascade sums (ILP), the tail, then combined.
template <typename T>
T IlpRowSum(const T* v, int64_t stride, int64_t size) {
  const int64_t m = size / 4;
  T part[4];
  for (int k = 0; k < 4; ++k)
    part[k] = CascadeSum(v + k * stride, 4 * stride, m);
  for (int64_t i = m * 4; i < size; ++i) part[0] += v[i * stride];
  return ((part[0] + part[1]) + part[2]) + part[3];
}

// out[c] = Σ_r m[r, c] for a row-major [rows, cols] m, in the order torch
// 1.13's AVX2 sum(dim=0) uses (established against torch for rows 1..5000,
// cols 1..40): whole groups of 4 columns (cols < 8) or of 32 (cols >= 8, i.e.
// 4 AVX2 vectors) are plain cascade sums, the other columns ILP row sums; a
// single column is a contiguous reduction over 8 vector lanes.
template <typename T>
void TorchColumnSums(const T* m, int64_t rows, int64_t cols, T* out) {
  if (cols == 1 && rows >= 8) {
    const int64_t n8 = rows / 8;
    T acc = 0;
    for (int64_t k = n8 * 8; k < rows; ++k) acc += m[k];
    for (int q = 0; q < 8; ++q) acc += IlpRowSum(m + q, 8, n8);
    out[0] = acc;
    return;
  }
  const int64_t group = cols >= 8 ? 32 : 4;
  const int64_t full = cols / group * group;
  for (int64_t c = 0; c < cols; ++c) {
    out[c] =
        c < full ? CascadeSum(m + c, cols, rows) : IlpRowSum(m + c, cols, rows);
  }
}

// y[batch, out] = x[batch, in] · W[out, in]^T + b. torch's addmm copies b
// into y and calls sgemm('T', 'N', out, batch, in, 1, W, in, x, in, 1, y, out);
// the BLAS path makes the same call. Ordered: y[j,i] = (Σ_l W[i,l]·x[j,l] in
// order l = 0..in-1, separately rounded) + b[i], as netlib's sgemm computes it.
template <typename T>
void LinearForward(const T* x, const T* w, const T* b, T* y, int batch, int in,
                   int out, GemmMode mode) {
  if (batch == 0) return;
  if (UseOrdered(mode)) {
    for (int j = 0; j < batch; ++j) {
      const T* xj = x + static_cast<size_t>(j) * in;
      T* yj = y + static_cast<size_t>(j) * out;
      for (int i = 0; i < out; ++i) {
        const T* wi = w + static_cast<size_t>(i) * in;
        T sum = 0;
        for (int l = 0; l < in; ++l) {
          const T p = wi[l] * xj[l];
          sum = sum + p;
        }
        yj[i] = sum + b[i];
      }
    }
    return;
  }
  for (int j = 0; j < batch; ++j) {
    std::copy(b, b + out, y + static_cast<size_t>(j) * out);
  }
  cpu_internal::BlasGemm(false, true, batch, out, in, T(1), x, in, w, in, T(1),
                         y, out);
}

// Backward of LinearForward given dy[batch, out]:
//   dw[out, in] = dy^T · x (ordered: summed over j = 0..batch-1),
//   db[out] = Σ_j dy[j, :] in torch's order (TorchColumnSums),
//   dx[batch, in] = dy · W (ordered: summed over i = 0..out-1; skipped when dx
//   is null: the first layer's input).
template <typename T>
void LinearBackward(const T* x, const T* w, const T* dy, T* dw, T* db, T* dx,
                    int batch, int in, int out, GemmMode mode) {
  TorchColumnSums(dy, batch, out, db);
  if (batch == 0) {
    std::fill(dw, dw + static_cast<size_t>(out) * in, T(0));
    return;
  }
  if (UseOrdered(mode)) {
    std::fill(dw, dw + static_cast<size_t>(out) * in, T(0));
    for (int j = 0; j < batch; ++j) {
      const T* xj = x + static_cast<size_t>(j) * in;
      const T* dyj = dy + static_cast<size_t>(j) * out;
      for (int i = 0; i < out; ++i) {
        const T a = dyj[i];
        T* dwi = dw + static_cast<size_t>(i) * in;
        for (int l = 0; l < in; ++l) {
          const T p = a * xj[l];
          dwi[l] = dwi[l] + p;
        }
      }
    }
  } else {
    cpu_internal::BlasGemm(true, false, out, in, batch, T(1), dy, out, x, in,
                           T(0), dw, in);
  }
  if (dx == nullptr) return;
  if (UseOrdered(mode)) {
    for (int j = 0; j < batch; ++j) {
      const T* dyj = dy + static_cast<size_t>(j) * out;
      T* dxj = dx + static_cast<size_t>(j) * in;
      std::fill(dxj, dxj + in, T(0));
      for (int i = 0; i < out; ++i) {
        const T a = dyj[i];
        const T* wi = w + static_cast<size_t>(i) * in;
        for (int l = 0; l < in; ++l) {
          const T p = a * wi[l];
          dxj[l] = dxj[l] + p;
        }
      }
    }
  } else {
    cpu_internal::BlasGemm(false, false, batch, in, out, T(1), dy, out, w, in,
                           T(0), dx, in);
  }
}

// In place: h = max(h, 0).
template <typename T>
void ReluForward(T* h, size_t n) {
  for (size_t i = 0; i < n; ++i)
    h[i] = h[i] < T(0) ? T(0) : h[i];  // NaN stays NaN, as in torch
}

// In place on dh, masked by the ReLU's output h (torch's threshold_backward).
template <typename T>
void ReluBackward(const T* h, T* dh, size_t n) {
  for (size_t i = 0; i < n; ++i) dh[i] = h[i] > T(0) ? dh[i] : T(0);
}

// log Σ_k exp(z[k] - shift): ATen's arithmetic in float, std's in double.
inline float LogSumExpShifted(const float* z, int n, float shift) {
  return torch_compat::AtenLog(torch_compat::AtenSumExp(z, n, shift));
}
inline double LogSumExpShifted(const double* z, int n, double shift) {
  double s = 0;
  for (int k = 0; k < n; ++k) s += std::exp(z[k] - shift);
  return std::log(s);
}
inline void ExpInPlace(float* v, int n) { torch_compat::AtenExp(v, v, n); }
inline void ExpInPlace(double* v, int n) {
  for (int k = 0; k < n; ++k) v[k] = std::exp(v[k]);
}

// nll_loss's sum of -logp[label] over the batch, in torch 1.13's order
// (LossNLL.cpp): an 8-level cascade in blocks of 2^max(4, ceil(log2 n) / 8);
// after adding sample b, level j carries into level j + 1 while b's bits of
// level j are all zero (so sample 0 alone climbs every level).
template <typename T>
class NllCascade {
 public:
  explicit NllCascade(int64_t n)
      : power_(std::max<int64_t>(4, CeilLog2(n) / kLevels)),
        mask_((int64_t{1} << power_) - 1) {}
  void Add(int64_t b, T logp) {
    partial_[0] -= logp;
    for (int j = 0; j + 1 < kLevels; ++j) {
      if ((b & (mask_ << (j * power_))) != 0) break;
      partial_[j + 1] += partial_[j];
      partial_[j] = T(0);
    }
  }
  T Total() const {
    T total = 0;
    for (const T& p : partial_) total += p;
    return total;
  }

 private:
  static constexpr int kLevels = 8;
  const int64_t power_, mask_;
  T partial_[kLevels] = {};
};

// Mean softmax cross-entropy over the batch (nn.CrossEntropyLoss()), and its
// gradient with respect to the logits in dlogits (may be null). Stable:
// log_softmax = (z - max) - log Σ exp(z - max). The per-row losses are summed
// as torch's nll_loss does (NllCascade) and divided by the batch; the gradient
// is torch's log_softmax_backward, g - exp(logp)·Σg with g = -(1/batch) at the
// label, which its AVX2 build fuses into one fma. In float, exp, log and the
// row sum are ATen's (torch_compat/aten_math.h), so the gradient is torch's bit
// for bit; in double (gradient checks) they are std::exp and std::log. Labels
// must be valid (see CheckLabels).
template <typename T>
T SoftmaxCrossEntropy(const T* logits, const int64_t* labels, int batch,
                      int classes, T* dlogits) {
  if (batch == 0) return T(0);
  const T grad = -(T(1) / static_cast<T>(batch));
  NllCascade<T> nll(batch);
  for (int j = 0; j < batch; ++j) {
    const T* z = logits + static_cast<size_t>(j) * classes;
    T mx = z[0];
    for (int k = 1; k < classes; ++k) mx = std::max(mx, z[k]);
    const T lse = LogSumExpShifted(z, classes, mx);
    const int64_t y = labels[j];
    nll.Add(j, (z[y] - mx) - lse);
    if (dlogits != nullptr) {
      T* d = dlogits + static_cast<size_t>(j) * classes;
      for (int k = 0; k < classes; ++k) d[k] = (z[k] - mx) - lse;  // logp
      ExpInPlace(d, classes);
      for (int k = 0; k < classes; ++k) {
        const T g = k == y ? grad : T(0);
        d[k] = std::fma(-d[k], grad, g);
      }
    }
  }
  return nll.Total() / static_cast<T>(batch);
}

// Per-layer scratch for MlpForwardBackward.
template <typename T>
struct MlpWorkspace {
  std::vector<std::vector<T>> act;   // act[l]: output of layer l (post-ReLU)
  std::vector<std::vector<T>> grad;  // grad[l]: d loss / d act[l]
};

// Logits of the whole MLP into act.back() (and into logits if not null).
template <typename T>
void MlpForward(const MlpLayout& layout, const T* params, const T* x, int batch,
                GemmMode mode, MlpWorkspace<T>* ws) {
  const int layers = layout.num_layers();
  ws->act.resize(layers);
  const T* in = x;
  for (int l = 0; l < layers; ++l) {
    const int fi = layout.widths()[l], fo = layout.widths()[l + 1];
    ws->act[l].resize(static_cast<size_t>(batch) * fo);
    LinearForward(in, params + layout.weight(l).offset,
                  params + layout.bias(l).offset, ws->act[l].data(), batch, fi,
                  fo, mode);
    if (l + 1 < layers) ReluForward(ws->act[l].data(), ws->act[l].size());
    in = ws->act[l].data();
  }
}

// Mean CE loss of the batch; grads (layout.num_params()) overwritten.
template <typename T>
T MlpForwardBackward(const MlpLayout& layout, const T* params, T* grads,
                     const T* x, const int64_t* labels, int batch,
                     GemmMode mode, MlpWorkspace<T>* ws,
                     BackwardObserver* observer = nullptr) {
  if (batch < 0) {
    throw std::invalid_argument("batch must be >= 0, got " +
                                std::to_string(batch));
  }
  CheckLabels(labels, batch, layout.num_classes());
  const int layers = layout.num_layers();
  if (batch == 0) {
    std::fill(grads, grads + layout.num_params(), T(0));
    if (observer != nullptr) {
      observer->OnForwardDone();
      for (int l = layers - 1; l >= 0; --l) observer->OnLayerGrads(l, [] {});
    }
    return T(0);
  }
  MlpForward(layout, params, x, batch, mode, ws);
  ws->grad.resize(layers);
  for (int l = 0; l < layers; ++l) ws->grad[l].resize(ws->act[l].size());
  const T loss =
      SoftmaxCrossEntropy(ws->act.back().data(), labels, batch,
                          layout.num_classes(), ws->grad.back().data());
  if (observer != nullptr) observer->OnForwardDone();
  for (int l = layers - 1; l >= 0; --l) {
    const int fi = layout.widths()[l], fo = layout.widths()[l + 1];
    if (l + 1 < layers) {
      ReluBackward(ws->act[l].data(), ws->grad[l].data(), ws->grad[l].size());
    }
    const T* in = l == 0 ? x : ws->act[l - 1].data();
    T* din = l == 0 ? nullptr : ws->grad[l - 1].data();
    LinearBackward(in, params + layout.weight(l).offset, ws->grad[l].data(),
                   grads + layout.weight(l).offset,
                   grads + layout.bias(l).offset, din, batch, fi, fo, mode);
    if (observer != nullptr) observer->OnLayerGrads(l, [] {});
  }
  return loss;
}

}  // namespace ringlab::nn

#endif  // RINGLAB_NN_CPU_OPS_H_
