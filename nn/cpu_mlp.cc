#include "nn/cpu_mlp.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace ringlab::nn {
namespace {

std::atomic<GemmMode> g_default_mode{GemmMode::kBlas};

const bool kRegistered = RegisterMlpBackend(
    Device::kCpu, [](const MlpLayout& layout) -> std::unique_ptr<Mlp> {
      return CreateCpuMlp(layout, CpuMlpOptions{DefaultCpuGemmMode()});
    });

}  // namespace

const char* GemmModeName(GemmMode mode) {
  switch (mode) {
    case GemmMode::kOrdered:
      return "ordered";
    case GemmMode::kBlas:
      return "blas";
  }
  return "unknown";
}

void SetDefaultCpuGemmMode(GemmMode mode) { g_default_mode = mode; }
GemmMode DefaultCpuGemmMode() { return g_default_mode; }

CpuMlp::CpuMlp(const MlpLayout& layout, CpuMlpOptions options)
    : Mlp(layout),
      options_(options),
      own_params_(options.params_memory ? 0 : layout.num_params(), 0.0f),
      own_grads_(options.grads_memory ? 0 : layout.num_params(), 0.0f),
      params_(options.params_memory ? options.params_memory
                                    : own_params_.data()),
      grads_(options.grads_memory ? options.grads_memory : own_grads_.data()),
      n_(layout.num_params()) {
  (void)kRegistered;
  std::fill(params_, params_ + n_, 0.0f);
  std::fill(grads_, grads_ + n_, 0.0f);
}

void CpuMlp::SetParams(const float* host) {
  std::memcpy(params_, host, n_ * sizeof(float));
}
void CpuMlp::GetParams(float* host) const {
  std::memcpy(host, params_, n_ * sizeof(float));
}
void CpuMlp::GetGrads(float* host) const {
  std::memcpy(host, grads_, n_ * sizeof(float));
}
void CpuMlp::SetGrads(const float* host) {
  std::memcpy(grads_, host, n_ * sizeof(float));
}

float CpuMlp::ForwardBackward(const float* x, const int64_t* labels, int batch,
                              BackwardObserver* observer) {
  return MlpForwardBackward(layout(), params_, grads_, x, labels, batch,
                            options_.gemm, &ws_, observer);
}

void CpuMlp::Forward(const float* x, int batch, float* logits) {
  if (batch < 0) {
    throw std::invalid_argument("batch must be >= 0, got " +
                                std::to_string(batch));
  }
  if (batch == 0) return;
  MlpForward(layout(), params_, x, batch, options_.gemm, &ws_);
  std::copy(ws_.act.back().begin(), ws_.act.back().end(), logits);
}

void CpuMlp::SgdStep(const SgdOptions& options) {
  if (options.momentum != 0.0f && momentum_.empty()) {
    momentum_.assign(n_, 0.0f);
  }
  SgdUpdate(options, params_, grads_,
            momentum_.empty() ? nullptr : momentum_.data(), &have_momentum_,
            n_);
}

bool CpuMlp::GetMomentum(float* host) const {
  if (!have_momentum_) return false;
  std::memcpy(host, momentum_.data(), n_ * sizeof(float));
  return true;
}

void CpuMlp::SetMomentum(const float* host) {
  momentum_.assign(host, host + n_);
  have_momentum_ = true;
}

std::unique_ptr<CpuMlp> CreateCpuMlp(const MlpLayout& layout,
                                     CpuMlpOptions options) {
  return std::make_unique<CpuMlp>(layout, options);
}

// torch.optim.SGD (1.13, _single_tensor_sgd), each `a.add(b, alpha=c)` being
// fmaf(b, c, a) as the CPU kernels compute it:
//   d = g; if wd: d = d + wd·p
//   if momentum: buf = d (first step) or buf = momentum·buf + (1-dampening)·d;
//                d = nesterov ? d + momentum·buf : buf
//   p = p - lr·d
namespace {

// p = fmaf(g, -lr, p) for plain SGD, 8 lanes at a time where the CPU has FMA:
// std::fmaf in code built for baseline x86-64 is a libm call per element (a
// 1.9M-parameter step took 4.3 ms that way), while a fused multiply-add
// instruction rounds once, exactly as fmaf does, so the result is the same
// bit for bit.
__attribute__((target("avx2,fma"))) void PlainSgdFma(float neg_lr,
                                                     float* params,
                                                     const float* grads,
                                                     size_t n) {
  const __m256 scale = _mm256_set1_ps(neg_lr);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 p = _mm256_loadu_ps(params + i);
    const __m256 g = _mm256_loadu_ps(grads + i);
    _mm256_storeu_ps(params + i, _mm256_fmadd_ps(g, scale, p));
  }
  // Leave the upper halves clean: otherwise every SSE instruction after this
  // (in code built without AVX) pays a state-transition penalty.
  _mm256_zeroupper();
  for (; i < n; ++i) params[i] = __builtin_fmaf(grads[i], neg_lr, params[i]);
}

// SGD with momentum (and weight decay, Nesterov) on elements [begin, n), as
// torch computes it (above).
void MomentumSgdScalar(const SgdOptions& o, float keep, bool first,
                       float* params, const float* grads, float* buf,
                       size_t begin, size_t n) {
  for (size_t i = begin; i < n; ++i) {
    float d = grads[i];
    if (o.weight_decay != 0.0f) d = std::fmaf(params[i], o.weight_decay, d);
    buf[i] = first ? d : std::fmaf(d, keep, buf[i] * o.momentum);
    d = o.nesterov ? std::fmaf(buf[i], o.momentum, d) : buf[i];
    params[i] = std::fmaf(d, -o.lr, params[i]);
  }
}

// MomentumSgdScalar 8 lanes at a time on the elements up to the last whole 8
// (returns how many): each fmaf one fused instruction and buf·momentum one
// rounded multiply, so the result is the same bit for bit, without a libm
// call per fmaf.
__attribute__((target("avx2,fma"))) size_t MomentumSgdFma(
    const SgdOptions& o, float keep, bool first, float* params,
    const float* grads, float* buf, size_t n) {
  const __m256 neg_lr = _mm256_set1_ps(-o.lr),
               wd = _mm256_set1_ps(o.weight_decay);
  const __m256 momentum = _mm256_set1_ps(o.momentum),
               keep8 = _mm256_set1_ps(keep);
  const bool decay = o.weight_decay != 0.0f;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 p = _mm256_loadu_ps(params + i);
    __m256 d = _mm256_loadu_ps(grads + i);
    if (decay) d = _mm256_fmadd_ps(p, wd, d);
    const __m256 b =
        first
            ? d
            : _mm256_fmadd_ps(
                  d, keep8, _mm256_mul_ps(_mm256_loadu_ps(buf + i), momentum));
    _mm256_storeu_ps(buf + i, b);
    d = o.nesterov ? _mm256_fmadd_ps(b, momentum, d) : b;
    _mm256_storeu_ps(params + i, _mm256_fmadd_ps(d, neg_lr, p));
  }
  _mm256_zeroupper();  // as in PlainSgdFma
  return i;
}

bool CpuHasFma() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

}  // namespace

void SetBlasThreads(int threads) { openblas_set_num_threads(threads); }

void SgdUpdate(const SgdOptions& o, float* params, const float* grads,
               float* buf, bool* have_buf, size_t n) {
  ValidateSgdOptions(o);
  const float neg_lr = -o.lr;
  if (o.momentum == 0.0f && o.weight_decay == 0.0f && CpuHasFma()) {
    PlainSgdFma(neg_lr, params, grads, n);
    return;
  }
  if (o.momentum == 0.0f) {
    for (size_t i = 0; i < n; ++i) {
      float d = grads[i];
      if (o.weight_decay != 0.0f) d = std::fmaf(params[i], o.weight_decay, d);
      params[i] = std::fmaf(d, neg_lr, params[i]);
    }
    return;
  }
  if (buf == nullptr) {
    throw std::invalid_argument("SGD: momentum needs a buffer");
  }
  // Python computes 1 - dampening in double; the kernel takes it as float.
  const float keep = static_cast<float>(1.0 - o.dampening);
  const bool first = !*have_buf;
  const size_t vectorised =
      CpuHasFma() ? MomentumSgdFma(o, keep, first, params, grads, buf, n) : 0;
  MomentumSgdScalar(o, keep, first, params, grads, buf, vectorised, n);
  *have_buf = true;
}

}  // namespace ringlab::nn
