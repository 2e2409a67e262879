#include "torch_compat/generator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/npy.h"

namespace ringlab::torch_compat {
namespace {

// Written by torch_compat/testdata/export_reference.py with torch 1.13.1; the
// test's cwd is the runfiles root of the workspace, so the package-relative
// path works.
std::string TestData(const std::string& name) {
  return "torch_compat/testdata/" + name;
}

const uint64_t kSeeds[] = {0, 1, 42, 4294967295ull, 4294967303ull};

TEST(TorchGeneratorTest, IsMt19937) {
  // std::mt19937's 10000th output for the default seed 5489 is 4123659995
  // (C++ standard); torch's generator is that engine.
  TorchGenerator gen(5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; ++i) v = gen.Next();
  EXPECT_EQ(v, 4123659995u);
}

TEST(TorchGeneratorTest, SeedIsTakenModulo2To32) {
  TorchGenerator a(7), b((uint64_t{1} << 32) + 7);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.Next(), b.Next());
}

// Exact equality: randperm decides which sample each rank trains on.
TEST(TorchGeneratorTest, UnitUniformIsUniformFromZeroToOne) {
  TorchGenerator a(7), b(7);
  for (int i = 0; i < 10000; ++i) {
    const float x = a.UnitUniform(), y = b.Uniform(0.0f, 1.0f);
    ASSERT_EQ(std::memcmp(&x, &y, sizeof(float)), 0) << "draw " << i;
  }
}

// The prefix is RandPerm's (itself checked against torch's files above),
// element for element, with and without the last step's missing draw.
TEST(TorchGeneratorTest, RandPermPrefixIsRandPermsFirstElements) {
  for (const int64_t n : {1, 2, 7, 1000, 100003}) {
    for (const int64_t k : {int64_t{0}, int64_t{1}, n / 3, n - 1, n}) {
      for (const uint64_t seed : {0u, 5u, 4294967295u}) {
        TorchGenerator whole(seed), prefix(seed);
        const std::vector<int64_t> all = whole.RandPerm(n);
        const std::vector<int64_t> want(all.begin(), all.begin() + k);
        EXPECT_EQ(prefix.RandPermPrefix(n, k), want)
            << "n " << n << " k " << k << " seed " << seed;
      }
    }
  }
  TorchGenerator gen(0);
  EXPECT_THROW(gen.RandPermPrefix(5, 6), std::invalid_argument);
  EXPECT_THROW(gen.RandPermPrefix(5, -1), std::invalid_argument);
}

TEST(TorchGeneratorTest, RandPermMatchesTorch) {
  int cases = 0;
  for (uint64_t seed : kSeeds) {
    for (int64_t n : {1, 2, 3, 10, 100, 1000, 5000}) {
      const std::string file = TestData("randperm_s" + std::to_string(seed) +
                                        "_n" + std::to_string(n) + ".npy");
      const std::vector<int64_t> want = io::ReadInt64Vector(file);
      TorchGenerator gen(seed);
      EXPECT_EQ(gen.RandPerm(n), want) << file;
      if (n == 100) {
        const std::vector<int64_t> want2 = io::ReadInt64Vector(
            TestData("randperm2_s" + std::to_string(seed) + "_n100.npy"));
        EXPECT_EQ(gen.RandPerm(n), want2) << "second draw, seed " << seed;
      }
      ++cases;
    }
  }
  EXPECT_EQ(cases, 35);
}

TEST(TorchGeneratorTest, RandIntMatchesTorch) {
  for (uint64_t seed : kSeeds) {
    for (int64_t k : {2, 7, 1000}) {
      const std::string file = TestData("randint_s" + std::to_string(seed) +
                                        "_k" + std::to_string(k) + ".npy");
      const std::vector<int64_t> want = io::ReadInt64Vector(file);
      TorchGenerator gen(seed);
      std::vector<int64_t> got;
      for (size_t i = 0; i < want.size(); ++i) got.push_back(gen.RandInt(k));
      EXPECT_EQ(got, want) << file;
    }
  }
}

// Bit-exact: uniform_ feeds nn.Linear's init.
TEST(TorchGeneratorTest, UniformMatchesTorchBitForBit) {
  for (uint64_t seed : kSeeds) {
    const std::string file =
        TestData("uniform_s" + std::to_string(seed) + ".npy");
    std::vector<int64_t> shape;
    const std::vector<float> want = io::ReadNpyFloat32(file, &shape);
    TorchGenerator gen(seed);
    int mismatches = 0;
    for (float w : want) mismatches += gen.Uniform(-0.3f, 0.7f) != w;
    EXPECT_EQ(mismatches, 0) << file;
  }
}

TEST(TorchGeneratorTest, RejectsBadArguments) {
  TorchGenerator gen(0);
  EXPECT_THROW(gen.RandPerm(-1), std::invalid_argument);
  EXPECT_THROW(gen.RandInt(0), std::invalid_argument);
  EXPECT_THROW(gen.RandInt(int64_t{1} << 32), std::invalid_argument);
  EXPECT_TRUE(gen.RandPerm(0).empty());
}

}  // namespace
}  // namespace ringlab::torch_compat
