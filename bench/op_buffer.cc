#include "bench/op_buffer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#ifdef RINGLAB_WITH_CUDA
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#endif

namespace ringlab::bench {

#ifdef RINGLAB_WITH_CUDA
struct OpBuffer::Device {
  explicit Device(size_t count) : memory(count) {}
  cuda::DeviceBuffer<float> memory;
};
#else
struct OpBuffer::Device {};
#endif

OpBuffer::OpBuffer(comm::MemoryKind kind, size_t count, float* allocated)
    : kind_(kind), count_(count) {
  if (allocated != nullptr) {
    ptr_ = allocated;
  } else if (kind_ == comm::MemoryKind::kHost) {
    host_.resize(count);
    ptr_ = host_.data();
  } else {
#ifdef RINGLAB_WITH_CUDA
    device_ = std::make_unique<Device>(count);
    ptr_ = device_->memory.get();
#else
    throw std::runtime_error("device buffers need a build with CUDA");
#endif
  }
}

OpBuffer::~OpBuffer() = default;

void OpBuffer::Upload(const std::vector<float>& values) {
  if (values.size() != count_) {
    throw std::invalid_argument("OpBuffer: " + std::to_string(values.size()) +
                                " values for " + std::to_string(count_) +
                                " floats");
  }
  if (kind_ == comm::MemoryKind::kHost) {
    std::copy(values.begin(), values.end(), ptr_);
    return;
  }
#ifdef RINGLAB_WITH_CUDA
  cuda::CopyToDevice(ptr_, values.data(), count_ * sizeof(float));
#endif
}

void OpBuffer::Download(std::vector<float>* values) {
  values->resize(count_);
  if (kind_ == comm::MemoryKind::kHost) {
    std::copy(ptr_, ptr_ + count_, values->begin());
    return;
  }
#ifdef RINGLAB_WITH_CUDA
  cuda::CopyToHost(values->data(), ptr_, count_ * sizeof(float));
#endif
}

void OpBuffer::Sync() {
#ifdef RINGLAB_WITH_CUDA
  if (kind_ == comm::MemoryKind::kDevice) cuda::Synchronize();
#endif
}

}  // namespace ringlab::bench
