#include "cuda/device_buffer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "cuda/error.h"

namespace ringlab::cuda {
namespace internal {

void* Malloc(size_t bytes) {
  void* device = nullptr;
  Check(cudaMalloc(&device, std::max<size_t>(bytes, 1)),
        "cudaMalloc(" + std::to_string(bytes) + " bytes)");
  return device;
}

void Free(void* device) noexcept {
  if (device != nullptr) cudaFree(device);
}

}  // namespace internal

void CopyToDevice(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  Check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice),
        "cudaMemcpy to the device");
}

void CopyToHost(void* host, const void* device, size_t bytes) {
  if (bytes == 0) return;
  Check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost),
        "cudaMemcpy from the device");
}

}  // namespace ringlab::cuda
