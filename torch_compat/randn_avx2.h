// The AVX2 Box-Muller of 16 uniforms in place (randn_avx2.cc, built for AVX2
// and FMA as ATen's AVX2 kernels are): called only where the CPU has both.
#ifndef RINGLAB_TORCH_COMPAT_RANDN_AVX2_H_
#define RINGLAB_TORCH_COMPAT_RANDN_AVX2_H_

namespace ringlab::torch_compat::avx2 {

void NormalFill16(float* data);

}  // namespace ringlab::torch_compat::avx2

#endif  // RINGLAB_TORCH_COMPAT_RANDN_AVX2_H_
