// The wire of the compressors that send one signed byte per gradient (QSGD's
// levels, int8's quantised values) after one float32 header (a norm, a
// scale): the bytes packed four to a float32 word of the collective, which
// only moves them.
#ifndef RINGLAB_SYNC_BYTE_CODEC_H_
#define RINGLAB_SYNC_BYTE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

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

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_BYTE_CODEC_H_
