// A part of a synchroniser's state that a resumed run needs besides the
// model's parameters (DiLoCo's outer parameters and momentum, PowerSGD's
// errors and Q matrices): checkpoints write and read it by name.
#ifndef RINGLAB_SYNC_SYNC_TENSOR_H_
#define RINGLAB_SYNC_SYNC_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ringlab::sync {

struct SyncTensor {
  std::string name;
  std::vector<float>* values;  // its size is fixed when the state is made
};

// A count (a step, draws of a generator) in two floats of a state tensor,
// 24 bits each, exact up to 2^48.
inline void PutCount(uint64_t v, float* out) {
  out[0] = static_cast<float>(v & 0xffffff);
  out[1] = static_cast<float>(v >> 24);
}
inline uint64_t GetCount(const float* in) {
  return static_cast<uint64_t>(in[0]) | (static_cast<uint64_t>(in[1]) << 24);
}

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_SYNC_TENSOR_H_
