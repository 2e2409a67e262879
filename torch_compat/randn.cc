#include "torch_compat/randn.h"

#include <cmath>
#include <cstdint>

#include "torch_compat/randn_avx2.h"

namespace ringlab::torch_compat {
namespace {

bool HasAvx2AndFma() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// ATen's normal_fill_16 (its build without AVX2).
void NormalFill16Scalar(float* data) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1 - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2 * std::log(u1));
    const float theta = 2.0f * static_cast<float>(3.14159265358979323846) * u2;
    data[j] = radius * std::cos(theta);
    data[j + 8] = radius * std::sin(theta);
  }
}

void NormalFill16(float* data) {
  if (HasAvx2AndFma()) {
    avx2::NormalFill16(data);
  } else {
    NormalFill16Scalar(data);
  }
}

}  // namespace

// at::normal_distribution<double>, one value per element, for fewer than
// 16: Box-Muller in double on two 53-bit uniforms (each from two raw draws,
// the first the high half), cos now and sin cached for the next element.
void SmallRandn(TorchGenerator& generator, float* out, size_t n) {
  auto uniform53 = [&generator] {
    const uint64_t high = generator.Next(), low = generator.Next();
    const uint64_t bits = ((high << 32) | low) & ((uint64_t{1} << 53) - 1);
    return static_cast<double>(bits) * std::ldexp(1.0, -53);
  };
  bool cached = false;
  double next = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cached) {
      out[i] = static_cast<float>(next);
      cached = false;
      continue;
    }
    const double u1 = uniform53(), u2 = uniform53();
    const double r = std::sqrt(-2.0 * std::log(1.0 - u2));
    const double theta = 2.0 * 3.14159265358979323846 * u1;
    next = r * std::sin(theta);
    cached = true;
    out[i] = static_cast<float>(r * std::cos(theta));
  }
}

void Randn(TorchGenerator& generator, float* out, size_t n) {
  if (n < 16) {
    SmallRandn(generator, out, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = generator.Uniform(0.0f, 1.0f);
  for (size_t i = 0; i + 16 <= n; i += 16) NormalFill16(out + i);
  if (n % 16 != 0) {
    float* tail = out + n - 16;
    for (size_t i = 0; i < 16; ++i) tail[i] = generator.Uniform(0.0f, 1.0f);
    NormalFill16(tail);
  }
}

}  // namespace ringlab::torch_compat
