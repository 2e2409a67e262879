#include "comm/dtype/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "comm/dtype/kernels.h"

namespace ringlab::comm::dtype {
namespace {

bool IsNan16(DataType type, uint16_t v) {
  return type == DataType::kFloat16
             ? (v & 0x7c00u) == 0x7c00u && (v & 0x3ffu) != 0
             : (v & 0x7f80u) == 0x7f80u && (v & 0x7fu) != 0;
}
float Widen(DataType type, uint16_t v) {
  return type == DataType::kFloat16 ? HalfToFloat(v) : BFloat16ToFloat(v);
}
uint16_t Narrow(DataType type, float f) {
  return type == DataType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f);
}

// The reference rounding, by another road than the conversions': the two
// representable values around x (found by bisection over the ordered
// non-negative encodings, widened exactly), the nearer one, the one with an
// even last bit on a tie, infinity beyond the largest finite value's
// rounding boundary.
uint16_t RoundByBisection(DataType type, double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0;
  const double a = std::fabs(x);
  const uint16_t inf = type == DataType::kFloat16 ? 0x7c00u : 0x7f80u;
  uint16_t lo = 0, hi = inf;  // Widen(lo) <= a < Widen(hi), finite lo
  if (a >= Widen(type, inf)) return sign | inf;
  while (hi - lo > 1) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    (Widen(type, mid) <= a ? lo : hi) = mid;
  }
  const double below = Widen(type, lo), above = Widen(type, hi);
  // Above the largest finite value, `above` is infinity: the boundary is
  // where the next value would be (one more ulp at the top exponent).
  const double next = hi == inf ? below + (below - Widen(type, lo - 1)) : above;
  if (a - below < next - a) return sign | lo;
  if (a - below > next - a) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

TEST(DataTypeTest, NamesAndSizes) {
  EXPECT_STREQ(DataTypeName(DataType::kBFloat16), "bfloat16");
  EXPECT_EQ(DataTypeSize(DataType::kFloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat32), 4u);
}

// Every 16-bit value widens exactly and rounds back to itself (NaNs to a
// NaN); every float32 in a dense sample (a stride through all 2^32 bit
// patterns, and every value near the edges: subnormals, the smallest
// normal, the largest finite, ties) rounds as the bisection says.
TEST(DataTypeTest, ConversionsRoundToNearestEven) {
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    SCOPED_TRACE(DataTypeName(type));
    for (uint32_t v = 0; v < 0x10000u; ++v) {
      const uint16_t h = static_cast<uint16_t>(v);
      if (IsNan16(type, h)) {
        EXPECT_TRUE(std::isnan(Widen(type, h)));
        EXPECT_TRUE(IsNan16(type, Narrow(type, Widen(type, h))));
        continue;
      }
      ASSERT_EQ(Narrow(type, Widen(type, h)), h) << v;
    }
    std::vector<uint32_t> patterns;
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4093) {
      patterns.push_back(static_cast<uint32_t>(b));
    }
    for (float edge : {0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f, 65504.0f,
                       65519.99f, 65520.0f, 0x1.fep127f, 1.00048828125f}) {
      for (int d = -3; d <= 3; ++d) {
        patterns.push_back(BitsOf(edge) + d);
        patterns.push_back((BitsOf(edge) + d) | 0x80000000u);
      }
    }
    for (uint32_t bits : patterns) {
      const float f = FloatOf(bits);
      if (std::isnan(f)) {
        EXPECT_TRUE(IsNan16(type, Narrow(type, f)));
        continue;
      }
      ASSERT_EQ(Narrow(type, f), RoundByBisection(type, f))
          << std::hexfloat << f;
    }
  }
}

// The SIMD loops against the scalar twin, bit for bit, on every kernel, odd
// lengths (tails) and unaligned pointers, with values of every magnitude
// (NaN, infinities, subnormals included).
TEST(DataTypeTest, VectorisedKernelsMatchTheScalarTwin) {
  std::mt19937 rng(7);
  for (DataType type : kAllDataTypes) {
    SCOPED_TRACE(DataTypeName(type));
    const ElementKernels& fast = KernelsFor(type);
    const ElementKernels& slow = ScalarKernelsFor(type);
    const size_t size = fast.size;
    for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{1031}}) {
      auto random_bytes = [&] {
        std::vector<uint8_t> v((n + 1) * size);
        for (auto& b : v) b = static_cast<uint8_t>(rng());
        return v;
      };
      const std::vector<uint8_t> a = random_bytes(), b = random_bytes();
      auto run = [&](const ElementKernels& k, int which) {
        std::vector<uint8_t> x = a, y(x.size()), z(x.size());
        void* xa = x.data() + size;  // unaligned for a 16-bit type by 2
        const void* bb = b.data() + size;
        const void* srcs[2] = {xa, bb};
        void* dsts[2] = {y.data(), z.data()};
        std::vector<float> wide(n);
        switch (which) {
          case 0:
            k.add(y.data(), xa, bb, n);
            break;
          case 1:
            k.accumulate(xa, bb, n);
            break;
          case 2:
            k.add2(xa, y.data(), bb, n);
            break;
          case 3:
            k.add_divide2(xa, y.data(), bb, 3.0f, n);
            break;
          case 4:
            k.scale(xa, 3.0f, n);
            break;
          case 5:
            k.sum_into(srcs, 2, dsts, 2, n, 2.0f);
            break;
          case 6:
            k.widen(wide.data(), bb, n);
            k.narrow(z.data(), wide.data(), n);
            std::memcpy(y.data(), wide.data(), std::min(y.size(), n * 4));
            break;
        }
        x.insert(x.end(), y.begin(), y.end());
        x.insert(x.end(), z.begin(), z.end());
        return x;
      };
      for (int which = 0; which < 9; ++which) {
        auto want = run(slow, which), got = run(fast, which);
        // NaN payloads may differ in float32 arithmetic; compare the rest.
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i + size <= got.size(); i += size) {
          if (std::memcmp(&got[i], &want[i], size) == 0) continue;
          uint16_t g16, w16;
          std::memcpy(&g16, &got[i], 2);
          std::memcpy(&w16, &want[i], 2);
          const bool both_nan = size == 2
                                    ? IsNan16(type, g16) && IsNan16(type, w16)
                                    : std::isnan(FloatOf(BitsOf(0)));
          ASSERT_TRUE(both_nan)
              << "kernel " << which << " n " << n << " byte " << i;
        }
      }
    }
  }
}

// One hop of a ring on two 16-bit values is their correctly rounded sum:
// the float32 sum of two halves (or two bfloat16) is exact or too far from
// a tie for the second rounding to matter (docs/pytorch-fidelity.md,
// "fp16_compress_hook"), so it equals rounding the exact sum once. Checked on
// every pair of a dense sample of finite values.
TEST(DataTypeTest, OneHopIsTheCorrectlyRoundedSum) {
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    SCOPED_TRACE(DataTypeName(type));
    std::vector<uint16_t> values;
    for (uint32_t v = 0; v < 0x10000u; v += 37) {
      const uint16_t h = static_cast<uint16_t>(v);
      if (!IsNan16(type, h) && std::isfinite(Widen(type, h))) {
        values.push_back(h);
      }
    }
    const ElementKernels& k = KernelsFor(type);
    std::vector<uint16_t> a(values.size()), out(values.size());
    for (size_t shift = 1; shift < values.size(); shift += 97) {
      for (size_t i = 0; i < values.size(); ++i) {
        a[i] = values[(i + shift) % values.size()];
      }
      k.add(out.data(), a.data(), values.data(), values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        const double exact = static_cast<double>(Widen(type, a[i])) +
                             static_cast<double>(Widen(type, values[i]));
        ASSERT_EQ(out[i], RoundByBisection(type, exact))
            << Widen(type, a[i]) << " + " << Widen(type, values[i]);
      }
    }
  }
}

}  // namespace
}  // namespace ringlab::comm::dtype
