// Device count and choice. Without a GPU (or a driver) the counts must agree
// on 0 with a reason and every choice must fail with CudaError naming the
// lack of a device; with one, LocalDevice is LOCAL_RANK modulo the count and
// SelectDevice makes the device current or refuses an index out of range.
#include "cuda/device.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "cuda/error.h"

namespace ringlab::cuda {
namespace {

// The forked probe must run before this process touches CUDA (CUDA does not
// survive fork()), so it is asked first, here, and the rest compare with it.
int ChildCount(std::string* why) {
  static std::string reason;
  static const int count = DeviceCountInChild(&reason);
  *why = reason;
  return count;
}

TEST(DeviceTest, CountInChildAgreesWithOwnCount) {
  std::string child_why, own_why;
  const int child = ChildCount(&child_why);
  const int own = DeviceCount(&own_why);
  EXPECT_EQ(child, own) << child_why << " / " << own_why;
  if (own == 0) {
    EXPECT_FALSE(own_why.empty());
    EXPECT_FALSE(child_why.empty());
  }
}

TEST(DeviceTest, WithoutDeviceEveryChoiceSaysSo) {
  std::string why;
  if (ChildCount(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  for (int local_rank : {0, 3}) {
    try {
      LocalDevice(local_rank);
      ADD_FAILURE() << "LocalDevice(" << local_rank << ") did not throw";
    } catch (const CudaError& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA device ("),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(SelectDevice(0), CudaError);
  EXPECT_THROW(SelectRankDevice(-1, 0), CudaError);
  EXPECT_THROW(SelectRankDevice(0, 1), CudaError);
}

TEST(DeviceTest, NegativeLocalRankIsRefused) {
  EXPECT_THROW(LocalDevice(-1), std::invalid_argument);
}

TEST(DeviceTest, LocalRankModuloCountAndSelection) {
  std::string why;
  const int count = ChildCount(&why);
  if (count == 0) GTEST_SKIP() << "no CUDA device: " << why;
  for (int r = 0; r < 2 * count + 1; ++r) EXPECT_EQ(LocalDevice(r), r % count);
  SelectDevice(count - 1);
  EXPECT_EQ(CurrentDevice(), count - 1);
  SelectDevice(0);
  EXPECT_EQ(CurrentDevice(), 0);
  // Requested wins; else the local rank's.
  EXPECT_EQ(SelectRankDevice(count - 1, 0), count - 1);
  EXPECT_EQ(CurrentDevice(), count - 1);
  EXPECT_EQ(SelectRankDevice(-1, count), 0);
  EXPECT_EQ(CurrentDevice(), 0);
  for (int bad : {-1, count}) {
    try {
      SelectDevice(bad);
      ADD_FAILURE() << "SelectDevice(" << bad << ") did not throw";
    } catch (const CudaError& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(Synchronize());
}

}  // namespace
}  // namespace ringlab::cuda
