// nn.Linear's initialisation against torch's own: networks of Linear layers
// built in construction order after torch.manual_seed(seed), their
// state_dicts flattened (weight then bias, layer by layer) by
// testdata/export_reference.py.
#include "torch_compat/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/npy.h"

namespace ringlab::torch_compat {
namespace {

std::string TestData(const std::string& name) {
  return "torch_compat/testdata/" + name;
}

TEST(InitTest, Bounds) {
  // kaiming_uniform_(a=sqrt(5)) reduces to 1/sqrt(fan_in) up to rounding.
  EXPECT_NEAR(KaimingUniformBound(10), 1 / std::sqrt(10.0), 1e-15);
  EXPECT_EQ(LinearBiasBound(4), 0.5);
  EXPECT_EQ(LinearBiasBound(0), 0.0);
}

// Bit-for-bit equality with torch.manual_seed(seed); Net(widths): a model
// started from the same seed must hold exactly PyTorch's weights.
TEST(InitTest, MatchesTorchBitForBit) {
  const std::vector<std::vector<int>> nets = {
      {10, 5, 2}, {3, 8, 8, 4}, {1024, 17}};
  int cases = 0;
  for (const std::vector<int>& widths : nets) {
    std::string wname;
    for (int w : widths)
      wname += (wname.empty() ? "" : "_") + std::to_string(w);
    for (uint64_t seed : {0ull, 1ull, 42ull, 4294967295ull, 4294967303ull}) {
      const std::string file =
          TestData("init_" + wname + "_s" + std::to_string(seed) + ".npy");
      std::vector<int64_t> shape;
      const std::vector<float> want = io::ReadNpyFloat32(file, &shape);
      std::vector<float> got(want.size() + 1, -99.0f);
      TorchGenerator gen(seed);
      size_t at = 0;
      for (size_t l = 0; l + 1 < widths.size(); ++l) {
        const size_t weights = size_t(widths[l]) * widths[l + 1];
        ASSERT_LE(at + weights + widths[l + 1], want.size()) << file;
        InitLinearLikeTorch(widths[l], widths[l + 1], gen, &got[at],
                            &got[at + weights]);
        at += weights + widths[l + 1];
      }
      ASSERT_EQ(at, want.size()) << file;
      EXPECT_EQ(got.back(), -99.0f) << "wrote past the last bias";
      size_t mismatches = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        mismatches += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
      }
      EXPECT_EQ(mismatches, 0u) << file;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 15);
}

}  // namespace
}  // namespace ringlab::torch_compat
