// Sleef's 8-lane u10 exp and log, the calls ATen's AVX2 kernels make. Built
// with -mavx2 -mfma (sleef.h declares its 8-lane functions only then);
// aten_math.cc calls these only on a CPU that has both.
#include <immintrin.h>
#include <sleef.h>

namespace ringlab::torch_compat::aten_internal {

void SleefExp8(const float* in, float* out) {
  _mm256_storeu_ps(out, Sleef_expf8_u10(_mm256_loadu_ps(in)));
  _mm256_zeroupper();  // the callers are built without AVX
}

float SleefLog(float x) {
  alignas(32) float lanes[8] = {x, 1, 1, 1, 1, 1, 1, 1};
  _mm256_store_ps(lanes, Sleef_logf8_u10(_mm256_load_ps(lanes)));
  const float result = lanes[0];
  _mm256_zeroupper();
  return result;
}

}  // namespace ringlab::torch_compat::aten_internal
