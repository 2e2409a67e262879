// The element types collectives move and reduce (float32, float16,
// bfloat16), their sizes and names, and the exact conversions between the
// 16-bit types and float32 that every backend's reduction is built on:
// widening is exact; narrowing rounds to nearest, ties to even, keeps
// subnormals and overflows to infinity, as IEEE 754 (and F16C, and torch's
// .to(torch.float16) / .to(torch.bfloat16)) do. NaNs stay NaNs: float16
// keeps the payload's top bits, quietened (as F16C's vcvtps2ph); bfloat16
// becomes torch's canonical 0x7fc0.
#ifndef RINGLAB_COMM_DTYPE_DTYPE_H_
#define RINGLAB_COMM_DTYPE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

namespace ringlab::comm {

enum class DataType { kFloat32, kFloat16, kBFloat16 };

const char* DataTypeName(DataType type);  // "float32", "float16", "bfloat16"
// The type of that name; false (type untouched) for another name.
bool DataTypeNamed(const char* name, DataType* type);
size_t DataTypeSize(DataType type);  // 4, 2, 2
inline constexpr DataType kAllDataTypes[] = {
    DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};
// The same, as a backend description lists the types it takes.
inline std::vector<DataType> AllDataTypes() {
  return {std::begin(kAllDataTypes), std::end(kAllDataTypes)};
}

namespace dtype {

inline uint32_t BitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
inline float FloatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint16_t FloatToHalf(float value) {
  const uint32_t bits = BitsOf(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x47800000u) {  // 2^16 and above, infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (magnitude < 0x38800000u) {
    // Below 2^-14, a half subnormal or zero, a multiple of 2^-24: adding 0.5
    // makes the float adder round to exactly that multiple (floats in
    // [0.5, 1) are 2^-24 apart), to nearest even; what is above 0.5's bits
    // is the half's mantissa (1024 when it rounds up to 2^-14, the smallest
    // normal, whose bits are the same).
    const float aligned = FloatOf(magnitude) + 0.5f;
    return static_cast<uint16_t>(sign | (BitsOf(aligned) - 0x3f000000u));
  }
  // A normal half: rebias the exponent (127 to 15) and round the 13 bits
  // dropped to nearest even; a carry out of the mantissa bumps the exponent
  // (65520 and above become infinity).
  const uint32_t odd = (magnitude >> 13) & 1u;
  magnitude += 0xc8000fffu + odd;  // -(112 << 23) + 0xfff, modulo 2^32
  return static_cast<uint16_t>(sign | (magnitude >> 13));
}

inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) return FloatOf(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) {
    return FloatOf(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  // Zero or a subnormal: mantissa * 2^-24, exact in float.
  return FloatOf(sign | BitsOf(static_cast<float>(mantissa) * 0x1p-24f));
}

inline uint16_t FloatToBFloat16(float value) {
  uint32_t bits = BitsOf(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float BFloat16ToFloat(uint16_t value) {
  return FloatOf(static_cast<uint32_t>(value) << 16);
}

}  // namespace dtype
}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_DTYPE_DTYPE_H_
