#include "train/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "io/npy.h"
#include "torch_compat/generator.h"

namespace ringlab::train {
namespace {

constexpr char kReference[] = "testdata/seed_ddp/reference/";

// PyTorch's own indices (exported by pytorch_reference.py): n = 100, W = 2,
// seed 0, epoch 0. Indices are integers: exact equality.
TEST(DistributedSamplerTest, MatchesPyTorchExport) {
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<int64_t> expected =
        io::ReadInt64Vector(std::string(kReference) + "sampler_rank" +
                            std::to_string(rank) + ".npy");
    DistributedSampler sampler(100, 2, rank);
    EXPECT_EQ(sampler.num_samples(), 50);
    EXPECT_EQ(sampler.Indices(0), expected) << "rank " << rank;
  }
}

// pytorch-facts.md: n = 100, W = 3 → 34 per rank, the permutation extended by
// its own perm[0], perm[1]; rank r takes perm[r], perm[r + 3], ...
TEST(DistributedSamplerTest, PadsWithTheHeadOfThePermutation) {
  const std::vector<int64_t> perm =
      torch_compat::TorchGenerator(7).RandPerm(100);
  std::vector<int64_t> padded = perm;
  padded.push_back(perm[0]);
  padded.push_back(perm[1]);
  for (int rank = 0; rank < 3; ++rank) {
    DistributedSampler sampler(100, 3, rank, {true, 7, false});
    ASSERT_EQ(sampler.num_samples(), 34);
    const std::vector<int64_t> mine = sampler.Indices(0);
    ASSERT_EQ(mine.size(), 34u);
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i], padded[rank + 3 * i]);
    }
  }
}

TEST(DistributedSamplerTest, DropLastTruncates) {
  DistributedSampler sampler(100, 3, 2, {true, 0, true});
  EXPECT_EQ(sampler.num_samples(), 33);
  std::set<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    for (int64_t i :
         DistributedSampler(100, 3, rank, {true, 0, true}).Indices(0)) {
      EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
    }
  }
  EXPECT_EQ(seen.size(), 99u);
}

TEST(DistributedSamplerTest, NoShuffleIsInOrder) {
  DistributedSampler sampler(5, 2, 1, {false, 0, false});
  EXPECT_EQ(sampler.Indices(3), (std::vector<int64_t>{1, 3, 0}));
}

TEST(DistributedSamplerTest, EpochReseedsAndSamplerSeedIsItsOwn) {
  DistributedSampler sampler(50, 1, 0, {true, 5, false});
  EXPECT_EQ(sampler.Indices(2), torch_compat::TorchGenerator(7).RandPerm(50));
  EXPECT_NE(sampler.Indices(0), sampler.Indices(1));
}

TEST(DistributedSamplerTest, FewerSamplesThanRanksRepeats) {
  DistributedSampler sampler(2, 5, 4, {false, 0, false});
  EXPECT_EQ(sampler.num_samples(), 1);
  EXPECT_EQ(sampler.Indices(0), (std::vector<int64_t>{0}));  // 0,1,0,1,0
}

TEST(DistributedSamplerTest, RejectsBadRank) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::train
