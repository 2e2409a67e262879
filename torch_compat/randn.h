// torch.randn(n) on the CPU, float32, as torch 1.13's AVX2 build draws it
// (at::native::normal_fill_AVX2): n uniform floats from the generator
// (TorchGenerator::Uniform(0, 1)), turned 16 at a time into normals by
// Box-Muller (u1 = 1 - data[j], u2 = data[j + 8]; radius sqrt(-2 log u1),
// angle 2 pi u2; cos into data[j], sin into data[j + 8]) with the vectorised
// Cephes log and sincos of ATen's avx_mathfun.h; when n is not a multiple of
// 16, 16 fresh uniforms overwrite the last 16 values and are transformed
// again. Fewer than 16 values torch draws one by one in double precision
// (at::normal_distribution<double>: Box-Muller on 53-bit uniforms, the sine
// kept for the next element, the generator's cache cleared by manual_seed,
// which PowerSGD calls before each bucket's draws). Where the CPU lacks AVX2
// and FMA, torch computes the same with std::log, std::cos and std::sin, as
// this does there. PowerSGD's initial Q matrices are drawn this way.
#ifndef RINGLAB_TORCH_COMPAT_RANDN_H_
#define RINGLAB_TORCH_COMPAT_RANDN_H_

#include <cstddef>

#include "torch_compat/generator.h"

namespace ringlab::torch_compat {

// out[0, n) = torch.randn(n) drawn from `generator`, as the first draw
// after torch.manual_seed (for n < 16 a cached normal from an earlier draw
// would come first in torch; a fresh generator has none).
void Randn(TorchGenerator& generator, float* out, size_t n);

}  // namespace ringlab::torch_compat

#endif  // RINGLAB_TORCH_COMPAT_RANDN_H_
