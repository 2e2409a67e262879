// The vectorised widening and rounding of the 16-bit types (simd.cc, built
// for AVX2 and F16C): called only where the CPU has both (kernels.cc asks).
// Each does the first n rounded down to a multiple of 8 and returns how many
// it did; the caller does the tail with dtype.h's scalar code (simd.cc calls
// nothing inline of another header, so that no copy of it built for AVX2
// can be the one a plain x86-64 runs).
#ifndef RINGLAB_COMM_DTYPE_SIMD_H_
#define RINGLAB_COMM_DTYPE_SIMD_H_

#include <cstddef>
#include <cstdint>

namespace ringlab::comm::dtype::simd {

size_t WidenHalf(float* out, const uint16_t* in, size_t n);
size_t NarrowHalf(uint16_t* out, const float* in, size_t n);
size_t WidenBFloat16(float* out, const uint16_t* in, size_t n);
size_t NarrowBFloat16(uint16_t* out, const float* in, size_t n);

}  // namespace ringlab::comm::dtype::simd

#endif  // RINGLAB_COMM_DTYPE_SIMD_H_
