// Device memory owned by one object: DeviceBuffer<T> holds `size()` elements
// of cudaMalloc'd memory on the device current when it was allocated, frees
// them when destroyed, moves and never copies. Copies to and from the host are
// synchronous. The one device-buffer class of ringlab: the CUDA MLP's
// parameters and activations (which grow with the batch: Reserve), the
// kernels' and backends' tests, the benchmarks' buffers. Failures throw
// CudaError (cuda/error.h). The header needs no CUDA header.
#ifndef RINGLAB_CUDA_DEVICE_BUFFER_H_
#define RINGLAB_CUDA_DEVICE_BUFFER_H_

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ringlab::cuda {
namespace internal {

// cudaMalloc of max(bytes, 1) bytes: never a null pointer, even for nothing,
// so that a buffer of 0 elements still has an address to pass.
void* Malloc(size_t bytes);
void Free(void* device) noexcept;  // errors ignored: called by destructors

}  // namespace internal

// Synchronous copies (cudaMemcpy) between host memory and device memory,
// also memory no DeviceBuffer owns (a communicator's Allocate'd memory).
void CopyToDevice(void* device, const void* host, size_t bytes);
void CopyToHost(void* host, const void* device, size_t bytes);

template <typename T>
class DeviceBuffer {
 public:
  // No memory: get() is null until Reserve.
  DeviceBuffer() = default;
  // `count` elements, uninitialised.
  explicit DeviceBuffer(size_t count) { Reserve(count); }
  // A copy of `host`.
  explicit DeviceBuffer(const std::vector<T>& host)
      : DeviceBuffer(host.size()) {
    Upload(host);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      internal::Free(ptr_);
      ptr_ = std::exchange(other.ptr_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { internal::Free(ptr_); }

  T* get() const { return ptr_; }
  size_t size() const { return size_; }

  // Room for at least n elements. Growing frees the old memory first (its
  // contents are lost), so that peak use stays at the larger buffer.
  void Reserve(size_t n) {
    if (ptr_ != nullptr && n <= size_) return;
    internal::Free(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    ptr_ = static_cast<T*>(internal::Malloc(n * sizeof(T)));
    size_ = n;
  }

  // Copies n <= size() elements from the host to the start of the buffer.
  void Upload(const T* host, size_t n) {
    CheckFits(n);
    CopyToDevice(ptr_, host, n * sizeof(T));
  }
  void Upload(const std::vector<T>& host) { Upload(host.data(), host.size()); }

  // Copies the first n <= size() elements to the host.
  void Download(T* host, size_t n) const {
    CheckFits(n);
    CopyToHost(host, ptr_, n * sizeof(T));
  }
  std::vector<T> Download() const {
    std::vector<T> host(size_);
    Download(host.data(), host.size());
    return host;
  }

 private:
  void CheckFits(size_t n) const {
    if (n > size_) {
      throw std::out_of_range("DeviceBuffer: " + std::to_string(n) +
                              " elements do not fit in " +
                              std::to_string(size_));
    }
  }

  T* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ringlab::cuda

#endif  // RINGLAB_CUDA_DEVICE_BUFFER_H_
