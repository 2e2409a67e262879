// Device memory for the conformance suite's GPU backends: registers, when
// linked, a RankBuffer in cudaMalloc'd memory and the device count (asked of
// a forked child: the test process forks ranks and must never touch CUDA).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/cuda_device.h"
#include "comm/testing/conformance.h"

namespace ringlab::comm::testing {
namespace {

void CudaOk(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " +
                             cudaGetErrorString(err));
  }
}

class DeviceBuffer : public RankBuffer {
 public:
  explicit DeviceBuffer(const std::vector<float>& host) : count_(host.size()) {
    CudaOk(cudaMalloc(reinterpret_cast<void**>(&data_),
                      std::max<size_t>(1, count_) * sizeof(float)),
           "cudaMalloc");
    CudaOk(cudaMemcpy(data_, host.data(), count_ * sizeof(float),
                      cudaMemcpyHostToDevice),
           "cudaMemcpy H2D");
  }
  ~DeviceBuffer() override { cudaFree(data_); }
  float* data() override { return data_; }
  std::vector<float> Download() const override {
    std::vector<float> host(count_);
    CudaOk(cudaMemcpy(host.data(), data_, count_ * sizeof(float),
                      cudaMemcpyDeviceToHost),
           "cudaMemcpy D2H");
    return host;
  }

 private:
  float* data_ = nullptr;
  size_t count_;
};

int CachedDeviceCount(std::string* why) {
  static std::string reason;
  static const int count = CudaDeviceCountInChild(&reason);
  if (why) *why = reason;
  return count;
}

const bool kRegistered = RegisterDeviceBuffers(
    [](const std::vector<float>& host) {
      return std::make_unique<DeviceBuffer>(host);
    },
    CachedDeviceCount);

}  // namespace
}  // namespace ringlab::comm::testing
