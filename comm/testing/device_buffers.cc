// Device memory for the conformance suite's GPU backends: registers, when
// linked, a RankBuffer in device memory (cuda::DeviceBuffer) and the device
// count (asked of a forked child: the test process forks ranks and must never
// touch CUDA).
#include <memory>
#include <string>
#include <vector>

#include "comm/testing/conformance.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"

namespace ringlab::comm::testing {
namespace {

class DeviceRankBuffer : public RankBuffer {
 public:
  explicit DeviceRankBuffer(const std::vector<float>& host) : buffer_(host) {}
  float* data() override { return buffer_.get(); }
  std::vector<float> Download() const override { return buffer_.Download(); }

 private:
  cuda::DeviceBuffer<float> buffer_;
};

int CachedDeviceCount(std::string* why) {
  static std::string reason;
  static const int count = cuda::DeviceCountInChild(&reason);
  if (why) *why = reason;
  return count;
}

const bool kRegistered = RegisterDeviceBuffers(
    [](const std::vector<float>& host) {
      return std::make_unique<DeviceRankBuffer>(host);
    },
    CachedDeviceCount);

}  // namespace
}  // namespace ringlab::comm::testing
