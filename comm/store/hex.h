// Opaque handles (CUDA IPC memory handles, NCCL unique ids) as text, so that
// the GPU backends can pass them through the store, and back.
#ifndef RINGLAB_COMM_STORE_HEX_H_
#define RINGLAB_COMM_STORE_HEX_H_

#include <cstddef>
#include <string>

namespace ringlab::comm {

// Two lower-case hex digits per byte.
std::string ToHex(const void* data, size_t size);

// Fills `size` bytes at data; false (data partly written) unless hex holds
// exactly size bytes of hex digits.
bool FromHex(const std::string& hex, void* data, size_t size);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_STORE_HEX_H_
