// DeviceBuffer: round trips, growth, moves, empty buffers and the size
// checks. The size checks run everywhere; the rest needs a device and skips
// without one.
#include "cuda/device_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device.h"

namespace ringlab::cuda {
namespace {

TEST(DeviceBufferHostTest, EmptyBufferHasNoMemoryAndRefusesCopies) {
  DeviceBuffer<float> empty;
  EXPECT_EQ(empty.get(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
  float x = 1;
  EXPECT_THROW(empty.Upload(&x, 1), std::out_of_range);
  EXPECT_THROW(empty.Download(&x, 1), std::out_of_range);
  EXPECT_TRUE(empty.Download().empty());
}

class DeviceBufferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

TEST_F(DeviceBufferTest, RoundTrip) {
  const std::vector<int64_t> host = {1, -2, 3, 1LL << 40};
  DeviceBuffer<int64_t> buffer(host);
  EXPECT_NE(buffer.get(), nullptr);
  EXPECT_EQ(buffer.size(), host.size());
  EXPECT_EQ(buffer.Download(), host);
  std::vector<int64_t> two(2);
  buffer.Download(two.data(), 2);
  EXPECT_EQ(two, std::vector<int64_t>({1, -2}));
  EXPECT_THROW(buffer.Download(two.data(), 5), std::out_of_range);
}

TEST_F(DeviceBufferTest, ZeroElementsStillHaveAnAddress) {
  DeviceBuffer<float> buffer(std::vector<float>{});
  EXPECT_NE(buffer.get(), nullptr);
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_TRUE(buffer.Download().empty());
}

TEST_F(DeviceBufferTest, ReserveGrowsOnlyWhenNeeded) {
  DeviceBuffer<float> buffer;
  buffer.Reserve(4);
  float* first = buffer.get();
  ASSERT_NE(first, nullptr);
  buffer.Reserve(3);
  EXPECT_EQ(buffer.get(), first);
  EXPECT_EQ(buffer.size(), 4u);
  buffer.Reserve(1000);
  EXPECT_EQ(buffer.size(), 1000u);
  const std::vector<float> ones(1000, 1.0f);
  buffer.Upload(ones);
  EXPECT_EQ(buffer.Download(), ones);
}

TEST_F(DeviceBufferTest, MovesOwnership) {
  DeviceBuffer<float> a(std::vector<float>{1, 2, 3});
  float* p = a.get();
  DeviceBuffer<float> b(std::move(a));
  EXPECT_EQ(a.get(), nullptr);
  EXPECT_EQ(b.get(), p);
  DeviceBuffer<float> c(std::vector<float>{4});
  c = std::move(b);
  EXPECT_EQ(c.get(), p);
  EXPECT_EQ(c.Download(), std::vector<float>({1, 2, 3}));
}

}  // namespace
}  // namespace ringlab::cuda
