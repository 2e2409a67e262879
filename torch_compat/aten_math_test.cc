#include "torch_compat/aten_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "io/npy.h"

namespace ringlab::torch_compat {
namespace {

// Written by torch_compat/testdata/export_reference.py with torch 1.13.1 (its
// AVX2 kernels). Every comparison is exact: these functions exist so that the
// CPU backend's gradients are torch's bit for bit.
std::vector<float> Load(const std::string& name, int64_t* cols = nullptr) {
  std::vector<int64_t> shape;
  std::vector<float> v =
      io::ReadNpyFloat32("torch_compat/testdata/" + name, &shape);
  if (cols != nullptr) *cols = shape.size() == 2 ? shape[1] : 0;
  return v;
}

size_t CountDiffering(const std::vector<float>& a,
                      const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    // Both NaN-free; -0 and +0 do not occur.
    n += a[i] != b[i];
  }
  return n;
}

TEST(AtenMathTest, ExpIsTorchs) {
  if (!AtenIsVectorised())
    GTEST_SKIP() << "the exports are torch's AVX2 kernels'";
  const std::vector<float> in = Load("aten_exp_in.npy");
  const std::vector<float> want = Load("aten_exp_out.npy");
  std::vector<float> got(in.size()), glibc(in.size());
  AtenExp(in.data(), got.data(), static_cast<int64_t>(in.size()));
  EXPECT_EQ(CountDiffering(got, want), 0u);
  // The data can tell the two apart: glibc's expf is not torch's.
  for (size_t i = 0; i < in.size(); ++i) glibc[i] = std::exp(in[i]);
  EXPECT_GT(CountDiffering(glibc, want), 0u);
}

TEST(AtenMathTest, ExpInPlaceAndAnyTail) {
  const std::vector<float> in = Load("aten_exp_in.npy");
  std::vector<float> whole(in.size());
  AtenExp(in.data(), whole.data(), static_cast<int64_t>(in.size()));
  for (int64_t n : {0, 1, 7, 8, 9, 15, 17}) {
    std::vector<float> part(in.begin() + 100, in.begin() + 100 + n);
    AtenExp(part.data(), part.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(part[i], whole[100 + i]) << n;
  }
}

TEST(AtenMathTest, LogIsTorchs) {
  if (!AtenIsVectorised())
    GTEST_SKIP() << "the exports are torch's AVX2 kernels'";
  const std::vector<float> in = Load("aten_log_in.npy");
  const std::vector<float> want = Load("aten_log_out.npy");
  std::vector<float> got(in.size());
  for (size_t i = 0; i < in.size(); ++i) got[i] = AtenLog(in[i]);
  EXPECT_EQ(CountDiffering(got, want), 0u);
}

// log_softmax(z) = (z - max) - log Σ exp(z - max), as ATen computes it, for
// class counts below, at and past one 8-lane vector.
TEST(AtenMathTest, LogSoftmaxIsTorchs) {
  if (!AtenIsVectorised())
    GTEST_SKIP() << "the exports are torch's AVX2 kernels'";
  size_t glibc_differs = 0;
  for (int classes : {1, 2, 3, 7, 8, 9, 10, 16, 17, 40}) {
    const std::string c = "_c" + std::to_string(classes) + ".npy";
    int64_t cols = 0;
    const std::vector<float> z = Load("aten_log_softmax_in" + c, &cols);
    const std::vector<float> want = Load("aten_log_softmax_out" + c);
    ASSERT_EQ(cols, classes);
    std::vector<float> got(z.size());
    for (size_t r = 0; r * classes < z.size(); ++r) {
      const float* row = z.data() + r * classes;
      const float mx = *std::max_element(row, row + classes);
      const float lse = AtenLog(AtenSumExp(row, classes, mx));
      float glibc_sum = 0;  // index order, glibc's exp
      for (int k = 0; k < classes; ++k) glibc_sum += std::exp(row[k] - mx);
      for (int k = 0; k < classes; ++k) {
        got[r * classes + k] = (row[k] - mx) - lse;
        glibc_differs +=
            (row[k] - mx) - std::log(glibc_sum) != want[r * classes + k];
      }
    }
    EXPECT_EQ(CountDiffering(got, want), 0u) << classes << " classes";
  }
  EXPECT_GT(glibc_differs, 0u);
}

}  // namespace
}  // namespace ringlab::torch_compat
