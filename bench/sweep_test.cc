// The sweeps' plan: sizes, iteration caps and exact-sum inputs.
#include "bench/sweep.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace ringlab::bench {
namespace {

TEST(SweepTest, SizesAndIterationCaps) {
  EXPECT_EQ(SweepSizes(4, 256), (std::vector<int64_t>{4, 16, 64, 256}));
  EXPECT_EQ(SweepSizes(1 << 20, 64 << 20),
            (std::vector<int64_t>{1 << 20, 4 << 20, 16 << 20, 64 << 20}));
  EXPECT_TRUE(SweepSizes(64, 16).empty());
  EXPECT_EQ(SweepSizes(4, 1024, 16), (std::vector<int64_t>{4, 64, 1024}));
  // 256 MiB / 4 per size, 5..cap.
  EXPECT_EQ(IterationsFor(4, 2000), 2000);
  EXPECT_EQ(IterationsFor(1 << 20, 2000), 64);
  EXPECT_EQ(IterationsFor(256 << 20, 2000), 5);
  EXPECT_EQ(IterationsFor(4, 100), 100);
  EXPECT_EQ(IterationsFor(256 << 20, 3), 3);
}

// Small integers (|x| <= 30): sums over up to 2^19 ranks stay exact in float.
TEST(SweepTest, ExactSumInputsAreSmallIntegers) {
  for (int rank = 0; rank < 8; ++rank) {
    for (size_t i = 0; i < 1000; ++i) {
      const float x = ExactSumInput(rank, i);
      EXPECT_EQ(x, std::round(x));
      EXPECT_LE(std::fabs(x), 30.0f);
    }
  }
  EXPECT_NE(ExactSumInput(0, 0), ExactSumInput(1, 0));
}

}  // namespace
}  // namespace ringlab::bench
