// ATen's float exp, log and row sum of exponentials, bit for bit with torch
// 1.13's CPU kernels (its AVX2 build, the one Debian's torch runs on x86-64):
// log_softmax and its backward compute exp and log with Sleef's u10 functions
// (Debian's torch links Debian's libsleef, as this does) and sum a row's
// exponentials over 8 vector lanes folded by a pairwise tree. glibc's expf
// differs from Sleef's by an ulp in about a third of a 10-class batch's
// logit gradients; one such ulp, averaged over two ranks, sends training on a
// measurably different path within 100 steps, so ringlab computes what torch
// computes. On a CPU without AVX2 and FMA, torch falls back to std::exp and
// std::log in the same lane order, and so do these.
#ifndef RINGLAB_TORCH_COMPAT_ATEN_MATH_H_
#define RINGLAB_TORCH_COMPAT_ATEN_MATH_H_

#include <cstdint>

namespace ringlab::torch_compat {

// Whether this CPU has AVX2 and FMA: where torch runs its AVX2 kernels and
// these functions reproduce them bit for bit (elsewhere both fall back to
// std::exp and std::log).
bool AtenIsVectorised();

// out[i] = exp(in[i]) for i < n, as Vectorized<float>::exp. In place is fine.
void AtenExp(const float* in, float* out, int64_t n);

// log(x) as Vectorized<float>::log.
float AtenLog(float x);

// Σ_k exp(row[k] - shift) in vec::map_reduce_all's order: fewer than 8
// elements are summed in index order; otherwise lane i accumulates elements
// i, i + 8, i + 16, ... and the 8 lanes fold as (0+4, 1+5, 2+6, 3+7), then
// (0+2, 1+3), then (0+1).
float AtenSumExp(const float* row, int64_t n, float shift);

}  // namespace ringlab::torch_compat

#endif  // RINGLAB_TORCH_COMPAT_ATEN_MATH_H_
