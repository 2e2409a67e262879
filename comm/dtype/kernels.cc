#include "comm/dtype/kernels.h"

#include <algorithm>
#include <cstdint>

#include "comm/dtype/simd.h"

namespace ringlab::comm::dtype {
namespace {

// The float32 loops, built for AVX2 and for any x86-64 and picked at load
// time (GCC's target_clones), as shm_ring's copies are.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RINGLAB_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RINGLAB_SIMD_CLONES
#endif

// Plain loops rather than memcpy (this file is built with
// -fno-tree-loop-distribute-patterns): see comm/shm_ring/kernels.cc.
template <typename T>
void CopyLoop(T* __restrict__ out, const T* __restrict__ in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = in[i];
}

// Floats per block of the blocked loops: 2 KiB, so that a block's operands
// stay in L1 between widening, summing and rounding.
constexpr size_t kBlock = 512;

RINGLAB_SIMD_CLONES
void AddF32(void* out, const void* a, const void* b, size_t n) {
  float* __restrict__ o = static_cast<float*>(out);
  const float* __restrict__ x = static_cast<const float*>(a);
  const float* __restrict__ y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}
template <bool kMax>
void ExtremeF32(void* out, const void* a, const void* b, size_t n) {
  float* __restrict__ o = static_cast<float*>(out);
  const float* __restrict__ x = static_cast<const float*>(a);
  const float* __restrict__ y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) {
    o[i] = kMax ? std::max(x[i], y[i]) : std::min(x[i], y[i]);
  }
}
RINGLAB_SIMD_CLONES
void AccumulateF32(void* acc, const void* in, size_t n) {
  float* __restrict__ s = static_cast<float*>(acc);
  const float* __restrict__ x = static_cast<const float*>(in);
  for (size_t i = 0; i < n; ++i) s[i] += x[i];
}
RINGLAB_SIMD_CLONES
void Add2F32(void* acc, void* out, const void* in, size_t n) {
  float* __restrict__ s = static_cast<float*>(acc);
  float* __restrict__ o = static_cast<float*>(out);
  const float* __restrict__ x = static_cast<const float*>(in);
  for (size_t i = 0; i < n; ++i) {
    const float v = s[i] + x[i];
    s[i] = v;
    o[i] = v;
  }
}
RINGLAB_SIMD_CLONES
void AddDivide2F32(void* acc, void* out, const void* in, float d, size_t n) {
  float* __restrict__ s = static_cast<float*>(acc);
  float* __restrict__ o = static_cast<float*>(out);
  const float* __restrict__ x = static_cast<const float*>(in);
  for (size_t i = 0; i < n; ++i) {
    const float v = (s[i] + x[i]) / d;
    s[i] = v;
    o[i] = v;
  }
}
RINGLAB_SIMD_CLONES
void ScaleF32(void* x, float divisor, size_t n) {
  float* __restrict__ v = static_cast<float*>(x);
  for (size_t i = 0; i < n; ++i) v[i] /= divisor;
}
void SumIntoF32(const void* const* srcs, size_t num_srcs, void* const* dsts,
                size_t num_dsts, size_t n, float divisor) {
  alignas(64) float sum[kBlock];
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t m = std::min(kBlock, n - at);
    CopyLoop(sum, static_cast<const float*>(srcs[0]) + at, m);
    for (size_t s = 1; s < num_srcs; ++s) {
      AccumulateF32(sum, static_cast<const float*>(srcs[s]) + at, m);
    }
    if (divisor != 0) ScaleF32(sum, divisor, m);
    for (size_t d = 0; d < num_dsts; ++d) {
      CopyLoop(static_cast<float*>(dsts[d]) + at, sum, m);
    }
  }
}
void CopyF32(float* out, const void* in, size_t n) {
  CopyLoop(out, static_cast<const float*>(in), n);
}
void CopyF32Back(void* out, const float* in, size_t n) {
  CopyLoop(static_cast<float*>(out), in, n);
}

// How a 16-bit type widens to float32 and rounds back, vectorised or not.
template <bool kSimd>
struct HalfCodec {
  static void Widen(float* out, const uint16_t* in, size_t n) {
    for (size_t i = kSimd ? simd::WidenHalf(out, in, n) : 0; i < n; ++i) {
      out[i] = HalfToFloat(in[i]);
    }
  }
  static void Narrow(uint16_t* out, const float* in, size_t n) {
    for (size_t i = kSimd ? simd::NarrowHalf(out, in, n) : 0; i < n; ++i) {
      out[i] = FloatToHalf(in[i]);
    }
  }
};
template <bool kSimd>
struct BFloat16Codec {
  static void Widen(float* out, const uint16_t* in, size_t n) {
    for (size_t i = kSimd ? simd::WidenBFloat16(out, in, n) : 0; i < n; ++i) {
      out[i] = BFloat16ToFloat(in[i]);
    }
  }
  static void Narrow(uint16_t* out, const float* in, size_t n) {
    for (size_t i = kSimd ? simd::NarrowBFloat16(out, in, n) : 0; i < n; ++i) {
      out[i] = FloatToBFloat16(in[i]);
    }
  }
};

// The 16-bit kernels: block by block, widened into float32, reduced there,
// rounded back once per kernel call.
template <class Codec>
struct Loops16 {
  static const uint16_t* In(const void* p) {
    return static_cast<const uint16_t*>(p);
  }
  static uint16_t* Out(void* p) { return static_cast<uint16_t*>(p); }

  // Widens a and b's block, combines them with f, rounds into out (and a
  // copy into also, when not null).
  template <typename F>
  static void Blocks(void* out, void* also, const void* a, const void* b,
                     size_t n, F f) {
    alignas(64) float x[kBlock];
    alignas(64) float y[kBlock];
    for (size_t at = 0; at < n; at += kBlock) {
      const size_t m = std::min(kBlock, n - at);
      Codec::Widen(x, In(a) + at, m);
      Codec::Widen(y, In(b) + at, m);
      for (size_t i = 0; i < m; ++i) x[i] = f(x[i], y[i]);
      Codec::Narrow(Out(out) + at, x, m);
      if (also != nullptr) {
        CopyLoop(Out(also) + at, Out(out) + at, m);
      }
    }
  }
  static void Add(void* out, const void* a, const void* b, size_t n) {
    Blocks(out, nullptr, a, b, n, [](float u, float v) { return u + v; });
  }
  static void Max(void* out, const void* a, const void* b, size_t n) {
    Blocks(out, nullptr, a, b, n,
           [](float u, float v) { return std::max(u, v); });
  }
  static void Min(void* out, const void* a, const void* b, size_t n) {
    Blocks(out, nullptr, a, b, n,
           [](float u, float v) { return std::min(u, v); });
  }
  static void Accumulate(void* acc, const void* in, size_t n) {
    Add(acc, acc, in, n);
  }
  static void Add2(void* acc, void* out, const void* in, size_t n) {
    Blocks(acc, out, acc, in, n, [](float u, float v) { return u + v; });
  }
  static void AddDivide2(void* acc, void* out, const void* in, float d,
                         size_t n) {
    Blocks(acc, out, acc, in, n, [d](float u, float v) { return (u + v) / d; });
  }
  static void Scale(void* x, float d, size_t n) {
    Blocks(x, nullptr, x, x, n, [d](float u, float) { return u / d; });
  }
  static void SumInto(const void* const* srcs, size_t num_srcs,
                      void* const* dsts, size_t num_dsts, size_t n,
                      float divisor) {
    alignas(64) float sum[kBlock];
    alignas(64) float term[kBlock];
    for (size_t at = 0; at < n; at += kBlock) {
      const size_t m = std::min(kBlock, n - at);
      Codec::Widen(sum, In(srcs[0]) + at, m);
      for (size_t s = 1; s < num_srcs; ++s) {
        Codec::Widen(term, In(srcs[s]) + at, m);
        for (size_t i = 0; i < m; ++i) sum[i] += term[i];
      }
      if (divisor != 0) {
        for (size_t i = 0; i < m; ++i) sum[i] /= divisor;
      }
      Codec::Narrow(Out(dsts[0]) + at, sum, m);
      for (size_t d = 1; d < num_dsts; ++d) {
        CopyLoop(Out(dsts[d]) + at, Out(dsts[0]) + at, m);
      }
    }
  }
  static void Widen(float* out, const void* in, size_t n) {
    Codec::Widen(out, In(in), n);
  }
  static void Narrow(void* out, const float* in, size_t n) {
    Codec::Narrow(Out(out), in, n);
  }
};

template <class L>
constexpr ElementKernels Kernels16(DataType type, bool vectorised) {
  return {type,           2,         vectorised,     &L::Add,
          &L::Max,        &L::Min,   &L::Accumulate, &L::Add2,
          &L::AddDivide2, &L::Scale, &L::SumInto,    &L::Widen,
          &L::Narrow};
}

constexpr ElementKernels kFloat32 = {DataType::kFloat32,
                                     4,
                                     true,
                                     &AddF32,
                                     &ExtremeF32<true>,
                                     &ExtremeF32<false>,
                                     &AccumulateF32,
                                     &Add2F32,
                                     &AddDivide2F32,
                                     &ScaleF32,
                                     &SumIntoF32,
                                     &CopyF32,
                                     &CopyF32Back};
constexpr ElementKernels kHalfScalar =
    Kernels16<Loops16<HalfCodec<false>>>(DataType::kFloat16, false);
constexpr ElementKernels kHalfSimd =
    Kernels16<Loops16<HalfCodec<true>>>(DataType::kFloat16, true);
constexpr ElementKernels kBFloat16Scalar =
    Kernels16<Loops16<BFloat16Codec<false>>>(DataType::kBFloat16, false);
constexpr ElementKernels kBFloat16Simd =
    Kernels16<Loops16<BFloat16Codec<true>>>(DataType::kBFloat16, true);

bool CpuHasSimd() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
#else
  return false;
#endif
}

}  // namespace

const ElementKernels& KernelsFor(DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return CpuHasSimd() ? kHalfSimd : kHalfScalar;
    case DataType::kBFloat16:
      return CpuHasSimd() ? kBFloat16Simd : kBFloat16Scalar;
    case DataType::kFloat32:
      break;
  }
  return kFloat32;
}

const ElementKernels& ScalarKernelsFor(DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return kHalfScalar;
    case DataType::kBFloat16:
      return kBFloat16Scalar;
    case DataType::kFloat32:
      break;
  }
  return kFloat32;
}

}  // namespace ringlab::comm::dtype
