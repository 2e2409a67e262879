// The copy and add loops that shm_ring moves data with, and that
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
// out = a + b.
void AddFloats(float* __restrict__ out, const float* __restrict__ a,
               const float* __restrict__ b, size_t n);
// acc += in.
void AccumulateFloats(float* __restrict__ acc, const float* __restrict__ in,
                      size_t n);
// acc = out = acc + in.
void AddFloats2(float* __restrict__ acc, float* __restrict__ out,
                const float* __restrict__ in, size_t n);
// acc = out = (acc + in) / d.
void AddDivideFloats2(float* __restrict__ acc, float* __restrict__ out,
                      const float* __restrict__ in, float d, size_t n);
// x /= divisor.
void ScaleFloats(float* __restrict__ x, float divisor, size_t n);
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

// dsts[d][at, at + n) = the sum of srcs[s][at, at + n) over s, in order
// (then divided by `divisor` when it is not 0), block by block through an
// L1-sized buffer. Allocates nothing: it runs inside every such allreduce.
void SumInto(const float* const* srcs, size_t num_srcs, float* const* dsts,
             size_t num_dsts, size_t at, size_t n, float divisor);

// Elements [a, b) of every buffer in `slots` become their sum over the
// buffers (in order, then divided by `divisor` when it is not 0): each
// element is read once from every buffer and written once to every buffer.
void ReduceIntoAll(const std::vector<float*>& slots, size_t a, size_t b,
                   float divisor);

}  // namespace ringlab::comm::shm

#endif  // RINGLAB_COMM_SHM_RING_KERNELS_H_
