#include "torch_compat/aten_math.h"

#include <algorithm>
#include <cmath>

namespace ringlab::torch_compat {
namespace aten_internal {  // aten_math_avx2.cc
void SleefExp8(const float* in, float* out);
float SleefLog(float x);
}  // namespace aten_internal
namespace {

using aten_internal::SleefExp8;
using aten_internal::SleefLog;

constexpr int64_t kLanes = 8;  // Vectorized<float>::size() on AVX2

}  // namespace

// torch picks its AVX2 kernels only where the CPU has AVX2 and FMA; Sleef's
// dispatcher then runs its FMA variant, the one these calls reach as well.
bool AtenIsVectorised() {
  static const bool use =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return use;
}

void AtenExp(const float* in, float* out, int64_t n) {
  if (!AtenIsVectorised()) {
    for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i]);
    return;
  }
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) SleefExp8(in + i, out + i);
  if (i < n) {
    float lanes[kLanes] = {};
    std::copy(in + i, in + n, lanes);
    SleefExp8(lanes, lanes);
    std::copy(lanes, lanes + (n - i), out + i);
  }
}

float AtenLog(float x) {
  return AtenIsVectorised() ? SleefLog(x) : std::log(x);
}

float AtenSumExp(const float* row, int64_t n, float shift) {
  float e[kLanes];
  float acc[kLanes] = {};
  for (int64_t d = 0; d < n; d += kLanes) {
    const int64_t count = std::min(kLanes, n - d);
    float shifted[kLanes] = {};
    for (int64_t i = 0; i < count; ++i) shifted[i] = row[d + i] - shift;
    AtenExp(shifted, e, count);
    for (int64_t i = 0; i < count; ++i) acc[i] = d == 0 ? e[i] : acc[i] + e[i];
  }
  if (n < kLanes) {
    float sum = n > 0 ? acc[0] : 0.0f;
    for (int64_t i = 1; i < n; ++i) sum += acc[i];
    return sum;
  }
  float half[4], quarter[2];
  for (int i = 0; i < 4; ++i) half[i] = acc[i] + acc[i + 4];
  for (int i = 0; i < 2; ++i) quarter[i] = half[i] + half[i + 2];
  return quarter[0] + quarter[1];
}

}  // namespace ringlab::torch_compat
