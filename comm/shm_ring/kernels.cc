#include "comm/shm_ring/kernels.h"

#include <emmintrin.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>

#include "comm/dtype/kernels.h"

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
void CopyBytesLoop(unsigned char* __restrict__ dst,
                   const unsigned char* __restrict__ src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}

bool FloatAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(float) == 0;
}

void CopyBytes(void* __restrict__ dst, const void* __restrict__ src, size_t n) {
  if (n % sizeof(float) == 0 && FloatAligned(dst) && FloatAligned(src)) {
    CopyFloats(static_cast<float*>(dst), static_cast<const float*>(src),
               n / sizeof(float));
  } else {
    CopyBytesLoop(static_cast<unsigned char*>(dst),
                  static_cast<const unsigned char*>(src), n);
  }
}
void CopyBytes2(void* __restrict__ dst1, void* __restrict__ dst2,
                const void* __restrict__ src, size_t n) {
  if (n % sizeof(float) == 0 && FloatAligned(dst1) && FloatAligned(dst2) &&
      FloatAligned(src)) {
    CopyFloats2(static_cast<float*>(dst1), static_cast<float*>(dst2),
                static_cast<const float*>(src), n / sizeof(float));
  } else {
    CopyBytes(dst1, src, n);
    CopyBytes(dst2, src, n);
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

void ReduceIntoAll(const std::vector<float*>& slots, size_t a, size_t b,
                   float divisor) {
  if (b <= a) return;
  std::vector<void*> at(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) at[i] = slots[i] + a;
  dtype::KernelsFor(DataType::kFloat32)
      .sum_into(at.data(), at.size(), at.data(), at.size(), b - a, divisor);
}

}  // namespace ringlab::comm::shm
