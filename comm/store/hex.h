// Bytes as hex text and back (Nettle's base16): opaque handles (CUDA IPC
// memory handles, NCCL unique ids) that the GPU backends pass through the
// store, the job's secret in RINGLAB_JOB_SECRET, CPU masks.
#ifndef RINGLAB_COMM_STORE_HEX_H_
#define RINGLAB_COMM_STORE_HEX_H_

#include <cstddef>
#include <string>

namespace ringlab::comm {

// Whether text holds hex digits only (either case; "" does).
bool IsHex(const std::string& text);

// Two lower-case hex digits per byte.
std::string ToHex(const void* data, size_t size);

// Fills `size` bytes at data; false (data partly written) unless hex holds
// exactly size bytes of hex digits.
bool FromHex(const std::string& hex, void* data, size_t size);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_STORE_HEX_H_
