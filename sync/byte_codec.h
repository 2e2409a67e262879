// What the compressors share: the wire of those that send one signed byte per
// gradient (QSGD's levels, int8's quantised values) after one float32 header
// (a norm, a scale), the bytes packed four to a float32 word of the
// collective, which only moves them; a sum over a bucket in double; and the
// largest magnitude a scale is made from (int8's, Streaming DiLoCo's).
#ifndef RINGLAB_SYNC_BYTE_CODEC_H_
#define RINGLAB_SYNC_BYTE_CODEC_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace ringlab::sync {

// Words for `count` bytes and the header.
inline size_t ByteWireCount(size_t count) { return 1 + (count + 3) / 4; }

inline void PutHeader(float header, void* wire) {
  std::memcpy(wire, &header, sizeof(float));
}
inline float GetHeader(const void* wire) {
  float header;
  std::memcpy(&header, wire, sizeof(float));
  return header;
}
inline int8_t* WireBytes(void* wire) {
  return reinterpret_cast<int8_t*>(static_cast<char*>(wire) + sizeof(float));
}
inline const int8_t* WireBytes(const void* wire) {
  return reinterpret_cast<const int8_t*>(static_cast<const char*>(wire) +
                                         sizeof(float));
}

// The sum of term(x[i]) in double, in eight running sums (the loop
// vectorises). Its float32 rounding is that of the exact sum but where the
// exact sum lies within the double sums' error (about n * 2^-53 of it) of a
// float32 rounding boundary: so a PyTorch reference that sums in double, in
// its own order, rounds to the same float32 but with odds of about n * 2^-29.
template <typename Term>
double SumInDouble(const float* x, size_t n, Term term) {
  double partial[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) partial[j] += term(x[i + j]);
  }
  double sum = 0;
  for (double p : partial) sum += p;
  for (; i < n; ++i) sum += term(x[i]);
  return sum;
}

// Rounds to the nearest integer, ties to even (torch.round), for |v| < 2^22:
// adding and taking away 1.5 * 2^23 leaves no fraction under the default
// rounding mode (std::nearbyint is a library call on the baseline x86-64;
// without -ffast-math the compiler may not fold the pair away).
inline float RoundHalfEven(float v) {
  constexpr float kShift = 12582912.0f;
  return (v + kShift) - kShift;
}

// The largest |x|, in eight running maxima (exact in any order); NaN where a
// value is NaN or infinite, as torch's abs().max() propagates a NaN (int8's
// bucket, Streaming DiLoCo's tensor then goes out as zeros under a NaN scale,
// on both sides).
inline float LargestMagnitude(const float* grads, size_t count) {
  constexpr float kMax = std::numeric_limits<float>::max();
  float largest[8] = {};
  int finite = 1;  // not a bool: & keeps the loop free of branches
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float m = std::fabs(grads[i + j]);
      largest[j] = std::max(largest[j], m);
      finite &= m <= kMax;
    }
  }
  for (; i < count; ++i) {
    const float m = std::fabs(grads[i]);
    largest[0] = std::max(largest[0], m);
    finite &= m <= kMax;
  }
  return finite ? *std::max_element(largest, largest + 8)
                : std::numeric_limits<float>::quiet_NaN();
}

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_BYTE_CODEC_H_
