// Cephes' single-precision log and sincos over 8 lanes, in the operation
// order of the avx_mathfun.h that ATen's AVX2 kernels use (range reduction
// to [sqrt(1/2), sqrt(2)) and a degree-8 polynomial for log; reduction by
// pi/4 in three parts and two degree-2/3 polynomials for sin and cos), and
// ATen's normal_fill_16_AVX2 on top. Built, as ATen is, with -mavx2 -mfma
// and the compiler's default contraction of a * b + c, so that it fuses
// what GCC fused in torch's build.
#include "torch_compat/randn_avx2.h"

#include <immintrin.h>

#include <cstdint>
#include <initializer_list>

namespace ringlab::torch_compat::avx2 {
namespace {

__m256 Set(float v) { return _mm256_set1_ps(v); }
__m256i SetI(int32_t v) { return _mm256_set1_epi32(v); }
__m256 FromBits(int32_t bits) { return _mm256_castsi256_ps(SetI(bits)); }

__m256 Log(__m256 x) {
  const __m256 one = Set(1.0f);
  const __m256 invalid = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OS);
  x = _mm256_max_ps(x, FromBits(0x00800000));  // no subnormals
  __m256i exponent = _mm256_srli_epi32(_mm256_castps_si256(x), 23);
  // The mantissa as a value in [0.5, 1), the exponent to match.
  x = _mm256_and_ps(x, FromBits(~0x7f800000));
  x = _mm256_or_ps(x, Set(0.5f));
  exponent = _mm256_sub_epi32(exponent, SetI(0x7f));
  __m256 e = _mm256_cvtepi32_ps(exponent);
  e = _mm256_add_ps(e, one);
  // Below sqrt(1/2): x = 2x - 1 and one exponent less; else x = x - 1.
  const __m256 below = _mm256_cmp_ps(x, Set(0.707106781186547524f), _CMP_LT_OS);
  __m256 tmp = _mm256_and_ps(x, below);
  x = _mm256_sub_ps(x, one);
  e = _mm256_sub_ps(e, _mm256_and_ps(one, below));
  x = _mm256_add_ps(x, tmp);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 y = Set(7.0376836292E-2f);
  for (float p : {-1.1514610310E-1f, 1.1676998740E-1f, -1.2420140846E-1f,
                  1.4249322787E-1f, -1.6668057665E-1f, 2.0000714765E-1f,
                  -2.4999993993E-1f, 3.3333331174E-1f}) {
    y = _mm256_mul_ps(y, x);
    y = _mm256_add_ps(y, Set(p));
  }
  y = _mm256_mul_ps(y, x);
  y = _mm256_mul_ps(y, z);
  tmp = _mm256_mul_ps(e, Set(-2.12194440e-4f));
  y = _mm256_add_ps(y, tmp);
  tmp = _mm256_mul_ps(z, Set(0.5f));
  y = _mm256_sub_ps(y, tmp);
  tmp = _mm256_mul_ps(e, Set(0.693359375f));
  x = _mm256_add_ps(x, y);
  x = _mm256_add_ps(x, tmp);
  return _mm256_or_ps(x, invalid);  // NaN for x <= 0
}

void SinCos(__m256 x, __m256* s, __m256* c) {
  __m256 sign_sin =
      _mm256_and_ps(x, FromBits(static_cast<int32_t>(0x80000000)));
  x = _mm256_and_ps(x, FromBits(0x7fffffff));
  __m256 y = _mm256_mul_ps(x, Set(1.27323954473516f));  // 4 / pi
  // j = (int(y) + 1) & ~1, the octant, even.
  __m256i j = _mm256_cvttps_epi32(y);
  j = _mm256_add_epi32(j, SetI(1));
  j = _mm256_and_si256(j, SetI(~1));
  y = _mm256_cvtepi32_ps(j);
  const __m256i j_cos = j;
  const __m256 swap_sin =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(j, SetI(4)), 29));
  const __m256 poly_mask = _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_and_si256(j, SetI(2)), _mm256_setzero_si256()));
  // x - y * pi/4, in three parts.
  const __m256 p1 = _mm256_mul_ps(y, Set(-0.78515625f));
  const __m256 p2 = _mm256_mul_ps(y, Set(-2.4187564849853515625e-4f));
  const __m256 p3 = _mm256_mul_ps(y, Set(-3.77489497744594108e-8f));
  x = _mm256_add_ps(x, p1);
  x = _mm256_add_ps(x, p2);
  x = _mm256_add_ps(x, p3);
  __m256i k = _mm256_sub_epi32(j_cos, SetI(2));
  k = _mm256_andnot_si256(k, SetI(4));
  const __m256 sign_cos = _mm256_castsi256_ps(_mm256_slli_epi32(k, 29));
  sign_sin = _mm256_xor_ps(sign_sin, swap_sin);
  // cos on [0, pi/4].
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 yc = Set(2.443315711809948E-005f);
  yc = _mm256_mul_ps(yc, z);
  yc = _mm256_add_ps(yc, Set(-1.388731625493765E-003f));
  yc = _mm256_mul_ps(yc, z);
  yc = _mm256_add_ps(yc, Set(4.166664568298827E-002f));
  yc = _mm256_mul_ps(yc, z);
  yc = _mm256_mul_ps(yc, z);
  const __m256 half_z = _mm256_mul_ps(z, Set(0.5f));
  yc = _mm256_sub_ps(yc, half_z);
  yc = _mm256_add_ps(yc, Set(1.0f));
  // sin on [0, pi/4].
  __m256 ys = Set(-1.9515295891E-4f);
  ys = _mm256_mul_ps(ys, z);
  ys = _mm256_add_ps(ys, Set(8.3321608736E-3f));
  ys = _mm256_mul_ps(ys, z);
  ys = _mm256_add_ps(ys, Set(-1.6666654611E-1f));
  ys = _mm256_mul_ps(ys, z);
  ys = _mm256_mul_ps(ys, x);
  ys = _mm256_add_ps(ys, x);
  // Which polynomial is whose, by octant.
  const __m256 sin2 = _mm256_and_ps(poly_mask, ys);
  const __m256 sin1 = _mm256_andnot_ps(poly_mask, yc);
  ys = _mm256_sub_ps(ys, sin2);
  yc = _mm256_sub_ps(yc, sin1);
  *s = _mm256_xor_ps(_mm256_add_ps(sin1, sin2), sign_sin);
  *c = _mm256_xor_ps(_mm256_add_ps(yc, ys), sign_cos);
}

}  // namespace

void NormalFill16(float* data) {
  const __m256 u1 = _mm256_sub_ps(Set(1.0f), _mm256_loadu_ps(data));
  const __m256 u2 = _mm256_loadu_ps(data + 8);
  const __m256 radius = _mm256_sqrt_ps(_mm256_mul_ps(Set(-2.0f), Log(u1)));
  // 2 * pi in double, rounded to float, as ATen computes it.
  const __m256 theta =
      _mm256_mul_ps(Set(static_cast<float>(2.0 * 3.14159265358979323846)), u2);
  __m256 sin_theta, cos_theta;
  SinCos(theta, &sin_theta, &cos_theta);
  // fmadd(n, std = 1, mean = 0) is n itself.
  _mm256_storeu_ps(data, _mm256_mul_ps(radius, cos_theta));
  _mm256_storeu_ps(data + 8, _mm256_mul_ps(radius, sin_theta));
}

}  // namespace ringlab::torch_compat::avx2
