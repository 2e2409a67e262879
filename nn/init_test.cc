// The MLP initialised layer by layer as torch initialises the same Net.
#include "nn/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "io/npy.h"

namespace ringlab::nn {
namespace {

// torch's exports (torch_compat/testdata/export_reference.py): each Net's
// state_dict flattened, which is the MlpLayout's order.
std::string TestData(const std::string& name) {
  return "torch_compat/testdata/" + name;
}

// Bit-for-bit equality with torch.manual_seed(seed); Net(widths): a trainer
// started from the same seed must hold exactly PyTorch's weights.
TEST(InitTest, MatchesTorchBitForBit) {
  int cases = 0;
  for (const char* widths : {"10,5,2", "3,8,8,4", "1024,17"}) {
    const MlpLayout layout = MlpLayout::Parse(widths);
    std::string wname = widths;
    for (char& c : wname) c = c == ',' ? '_' : c;
    for (uint64_t seed : {0ull, 1ull, 42ull, 4294967295ull, 4294967303ull}) {
      const std::string file =
          TestData("init_" + wname + "_s" + std::to_string(seed) + ".npy");
      std::vector<int64_t> shape;
      const std::vector<float> want = io::ReadNpyFloat32(file, &shape);
      ASSERT_EQ(want.size(), layout.num_params()) << file;
      std::vector<float> got(layout.num_params(), -99.0f);
      torch_compat::TorchGenerator gen(seed);
      InitLikeTorch(layout, gen, got.data());
      size_t mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        mismatches += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
      }
      EXPECT_EQ(mismatches, 0u) << file;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 15);
}

}  // namespace
}  // namespace ringlab::nn
