// Parameters as one .npy file per state_dict tensor: a round trip, the
// shapes PyTorch expects, and a checkpoint of another layout refused with a
// message naming file, expected and found shape, leaving params untouched.
#include "nn/params_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "io/npy.h"

namespace ringlab::nn {
namespace {

std::string Path(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

TEST(ParamsIoTest, SaveAndLoadParams) {
  const MlpLayout layout({3, 4, 2});
  std::vector<float> p(layout.num_params());
  for (size_t i = 0; i < p.size(); ++i) p[i] = 0.5f * i - 3;
  const std::string dir = Path("ckpt");
  mkdir(dir.c_str(), 0755);
  SaveParams(dir, layout, p.data());
  std::vector<float> q(p.size(), 0.0f);
  LoadParams(dir, layout, q.data());
  EXPECT_EQ(p, q);
  std::vector<int64_t> shape;
  io::ReadNpyFloat32(dir + "/fc1.weight.npy", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{4, 3}));
  // A checkpoint of another layout: the error names file, expected and found.
  const MlpLayout other({3, 5, 2});
  std::vector<float> r(other.num_params(), 9.0f);
  try {
    LoadParams(dir, other, r.data());
    ADD_FAILURE();
  } catch (const io::NpyError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("fc1.weight.npy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected (5, 3), found (4, 3)"), std::string::npos)
        << msg;
  }
  EXPECT_EQ(r[0], 9.0f);  // untouched on error
  EXPECT_THROW(LoadParams(Path("no_ckpt"), layout, q.data()), io::NpyError);
}

}  // namespace
}  // namespace ringlab::nn
