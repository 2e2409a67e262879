// The buffer an allreduce_bench row works on, in the memory its backend
// works on: host memory (its own, or memory the backend's Allocate handed
// out), or device memory for the GPU backends (cuda::DeviceBuffer; a build
// without CUDA refuses device buffers).
#ifndef RINGLAB_BENCH_OP_BUFFER_H_
#define RINGLAB_BENCH_OP_BUFFER_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::bench {

class OpBuffer {
 public:
  // `count` floats of `kind`; `allocated` (when not null) is memory the
  // backend allocated, used instead of memory of the buffer's own.
  OpBuffer(comm::MemoryKind kind, size_t count, float* allocated = nullptr);
  ~OpBuffer();
  OpBuffer(const OpBuffer&) = delete;
  OpBuffer& operator=(const OpBuffer&) = delete;

  float* data() { return ptr_; }
  void Upload(const std::vector<float>& values);  // values.size() == count
  void Download(std::vector<float>* values);      // resized to count
  // Waits for the device (an op is only done when the device is: part of its
  // time); nothing for host memory.
  void Sync();

 private:
  struct Device;  // the device memory, where CUDA is built
  comm::MemoryKind kind_;
  size_t count_;
  std::vector<float> host_;
  std::unique_ptr<Device> device_;
  float* ptr_ = nullptr;
};

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_OP_BUFFER_H_
