// The copy loops that shm_ring moves data with (its reductions are
// comm/dtype's, for every element type), and the reduction that
// bench/allreduce_bench measures its floor with, so that the floor is what
// the same kernels do without any synchronisation. Each loop is built for
// AVX2 and for any x86-64 and picked once, when the program loads (GCC's
// target_clones), and stays a loop: see shm_kernels.cc for why not memcpy.
// Pointers marked __restrict__ must not overlap.
#ifndef RINGLAB_COMM_SHM_RING_KERNELS_H_
#define RINGLAB_COMM_SHM_RING_KERNELS_H_

#include <cstddef>
#include <vector>

namespace ringlab::comm::shm {

void CopyFloats(float* __restrict__ dst, const float* __restrict__ src,
                size_t n);
// dst1 = dst2 = src.
void CopyFloats2(float* __restrict__ dst1, float* __restrict__ dst2,
                 const float* __restrict__ src, size_t n);
// The same for n bytes of any element type (float loops where both are
// 4-byte aligned and n a multiple of 4, else byte loops).
void CopyBytes(void* __restrict__ dst, const void* __restrict__ src, size_t n);
void CopyBytes2(void* __restrict__ dst1, void* __restrict__ dst2,
                const void* __restrict__ src, size_t n);
// The same with non-temporal stores to `out` (16-byte aligned).
void StreamCopy(float* __restrict__ out, const float* __restrict__ src,
                size_t n);
void StreamCopy2(float* __restrict__ local, float* __restrict__ out,
                 const float* __restrict__ in, size_t n);
void StreamAdd(float* __restrict__ out, const float* __restrict__ a,
               const float* __restrict__ b, size_t n);
void StreamAdd2(float* __restrict__ acc, float* __restrict__ out,
                const float* __restrict__ in, size_t n);
void StreamAddDivide2(float* __restrict__ acc, float* __restrict__ out,
                      const float* __restrict__ in, float d, size_t n);

// Floats [a, b) of every buffer in `slots` become their sum over the
// buffers (in order, then divided by `divisor` when it is not 0): each
// element is read once from every buffer and written once to every buffer
// (comm/dtype's float32 sum_into, which the registered allreduce runs).
void ReduceIntoAll(const std::vector<float*>& slots, size_t a, size_t b,
                   float divisor);

}  // namespace ringlab::comm::shm

#endif  // RINGLAB_COMM_SHM_RING_KERNELS_H_
