#include "comm/shm_ring/kernels.h"

#include <emmintrin.h>
#include <xmmintrin.h>

#include <algorithm>

namespace ringlab::comm::shm {

// Plain loops rather than memcpy (this file is built with
// -fno-tree-loop-distribute-patterns so they stay loops): glibc's memcpy uses
// `rep movsb` on AMD for mid-sized copies, which measured 1.3 GB/s instead of
// 20+ when source and destination differ by 16 mod 64 bytes, exactly the case
// of a malloc'd user buffer against a page-aligned mailbox.
// Each loop is built twice, for AVX2 and for any x86-64, and picked at load
// time: AVX2 measured about 1.5x on the cache-resident chunks the ring moves.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RINGLAB_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RINGLAB_SIMD_CLONES
#endif

RINGLAB_SIMD_CLONES
void CopyFloats(float* __restrict__ dst, const float* __restrict__ src,
                size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}
RINGLAB_SIMD_CLONES
void CopyFloats2(float* __restrict__ dst1, float* __restrict__ dst2,
                 const float* __restrict__ src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst1[i] = src[i];
    dst2[i] = src[i];
  }
}
RINGLAB_SIMD_CLONES
void AddFloats(float* __restrict__ out, const float* __restrict__ a,
               const float* __restrict__ b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
RINGLAB_SIMD_CLONES
void AccumulateFloats(float* __restrict__ acc, const float* __restrict__ in,
                      size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += in[i];
}
// acc = out = acc + in (the last reduce-scatter step keeps and forwards it).
RINGLAB_SIMD_CLONES
void AddFloats2(float* __restrict__ acc, float* __restrict__ out,
                const float* __restrict__ in, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = acc[i] + in[i];
    acc[i] = v;
    out[i] = v;
  }
}
RINGLAB_SIMD_CLONES
void AddDivideFloats2(float* __restrict__ acc, float* __restrict__ out,
                      const float* __restrict__ in, float d, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = (acc[i] + in[i]) / d;
    acc[i] = v;
    out[i] = v;
  }
}

// Variants that write the mailbox side (`out`, 16-byte aligned: slots are
// page-aligned) with non-temporal stores, so the lines go to memory rather
// than into this core's cache, from where the peer would have to snoop them.
// Chosen by ShmRingTuning::stores; PostSend fences before publishing.
void StreamCopy(float* __restrict__ out, const float* __restrict__ src,
                size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_stream_ps(out + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) out[i] = src[i];
}
void StreamCopy2(float* __restrict__ local, float* __restrict__ out,
                 const float* __restrict__ in, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_loadu_ps(in + i);
    _mm_storeu_ps(local + i, v);
    _mm_stream_ps(out + i, v);
  }
  for (; i < n; ++i) local[i] = out[i] = in[i];
}
void StreamAdd(float* __restrict__ out, const float* __restrict__ a,
               const float* __restrict__ b, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    _mm_stream_ps(out + i,
                  _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}
void StreamAdd2(float* __restrict__ acc, float* __restrict__ out,
                const float* __restrict__ in, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_add_ps(_mm_loadu_ps(acc + i), _mm_loadu_ps(in + i));
    _mm_storeu_ps(acc + i, v);
    _mm_stream_ps(out + i, v);
  }
  for (; i < n; ++i) acc[i] = out[i] = acc[i] + in[i];
}
void StreamAddDivide2(float* __restrict__ acc, float* __restrict__ out,
                      const float* __restrict__ in, float d, size_t n) {
  const __m128 dv = _mm_set1_ps(d);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v =
        _mm_div_ps(_mm_add_ps(_mm_loadu_ps(acc + i), _mm_loadu_ps(in + i)), dv);
    _mm_storeu_ps(acc + i, v);
    _mm_stream_ps(out + i, v);
  }
  for (; i < n; ++i) acc[i] = out[i] = (acc[i] + in[i]) / d;
}

RINGLAB_SIMD_CLONES
void ScaleFloats(float* __restrict__ x, float divisor, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] /= divisor;
}

// Elements [a, b) of every rank's registered buffer become their sum over
// ranks (in rank order, divided by `divisor` when it is not 0), block by
// block through an L1-sized buffer: each element is read once from every
// rank and written once to every rank, the least any allreduce can move.
void SumInto(const float* const* srcs, size_t num_srcs, float* const* dsts,
             size_t num_dsts, size_t at, size_t n, float divisor) {
  constexpr size_t kBlock = 2048;
  alignas(64) float sum[kBlock];
  for (size_t end = at + n; at < end; at += kBlock) {
    const size_t m = std::min(kBlock, end - at);
    CopyFloats(sum, srcs[0] + at, m);
    for (size_t s = 1; s < num_srcs; ++s) {
      AccumulateFloats(sum, srcs[s] + at, m);
    }
    if (divisor != 0) ScaleFloats(sum, divisor, m);
    for (size_t d = 0; d < num_dsts; ++d) CopyFloats(dsts[d] + at, sum, m);
  }
}

void ReduceIntoAll(const std::vector<float*>& slots, size_t a, size_t b,
                   float divisor) {
  if (b <= a) return;
  SumInto(slots.data(), slots.size(), slots.data(), slots.size(), a, b - a,
          divisor);
}

}  // namespace ringlab::comm::shm
