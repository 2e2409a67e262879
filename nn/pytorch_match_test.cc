// The CPU backend against values exported from PyTorch 1.13.1 by
// testdata/export_reference.py, for fixed weights and inputs. torch computed
// each trace twice, on OpenBLAS and on the reference BLAS; each GemmMode is
// compared with the torch run it is meant to reproduce.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nn/cpu_mlp.h"
#include "nn/npy.h"

namespace ringlab::nn {
namespace {

std::string TestData(const std::string& name) { return "nn/testdata/" + name; }

std::vector<float> LoadF(const std::string& name) {
  std::vector<int64_t> shape;
  return ReadNpyFloat32(TestData(name), &shape);
}

// Distance in units in the last place between two finite floats.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  // Map the sign-magnitude bit patterns onto one monotonic integer line.
  const int64_t la = ia < 0 ? int64_t{INT32_MIN} - ia : ia;
  const int64_t lb = ib < 0 ? int64_t{INT32_MIN} - ib : ib;
  return la > lb ? la - lb : lb - la;
}

int64_t MaxUlp(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, UlpDistance(a[i], b[i]));
  }
  return m;
}

float MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

struct Case {
  const char* widths;
  const char* net;   // file prefix of the fixed inputs
  const char* blas;  // which torch run: "openblas" or "refblas"
  GemmMode mode;     // the mode that reproduces it
};

class PytorchMatchTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const std::string n = GetParam().net;
    layout_ = std::make_unique<MlpLayout>(MlpLayout::Parse(GetParam().widths));
    params_ = LoadF(n + "_params.npy");
    x_ = ReadFloatMatrix(TestData(n + "_x.npy"), &batch_, nullptr,
                         layout_->in_features());
    y_ = ReadInt64Vector(TestData(n + "_y.npy"));
    ASSERT_EQ(static_cast<int64_t>(y_.size()), batch_);
    ASSERT_EQ(params_.size(), layout_->num_params());
  }
  std::string Prefix() const {
    return std::string(GetParam().net) + "_" + GetParam().blas;
  }
  std::unique_ptr<CpuMlp> Make() {
    auto mlp = CreateCpuMlp(*layout_, CpuMlpOptions{GetParam().mode});
    mlp->SetParams(params_.data());
    return mlp;
  }

  std::unique_ptr<MlpLayout> layout_;
  std::vector<float> params_, x_;
  std::vector<int64_t> y_;
  int64_t batch_ = 0;
};

// Logits: bit for bit (observed 0 ulp in all four cases; the products are
// the same operations in the same order). The loss and the logit gradient go
// through exp/log, where ATen's vectorised (Sleef) functions and glibc's may
// differ by an ulp: the loss may differ by 4 ulp and the gradients by 1e-7
// absolute (values are O(0.1)). Observed: loss 0-2 ulp, grads <= 3e-8.
TEST_P(PytorchMatchTest, ForwardLossAndGradients) {
  auto mlp = Make();
  std::vector<float> logits(batch_ * layout_->num_classes());
  mlp->Forward(x_.data(), static_cast<int>(batch_), logits.data());
  const int64_t logit_ulp = MaxUlp(logits, LoadF(Prefix() + "_logits.npy"));
  EXPECT_EQ(logit_ulp, 0);

  const float loss =
      mlp->ForwardBackward(x_.data(), y_.data(), static_cast<int>(batch_));
  const float want_loss = LoadF(Prefix() + "_loss.npy")[0];
  const int64_t loss_ulp = UlpDistance(loss, want_loss);
  EXPECT_LE(loss_ulp, 4) << loss << " vs " << want_loss;

  std::vector<float> grads(layout_->num_params());
  mlp->GetGrads(grads.data());
  const std::vector<float> want = LoadF(Prefix() + "_grads.npy");
  const float max_abs = MaxAbs(grads, want);
  EXPECT_LE(max_abs, 1e-7f);
  std::printf(
      "%s (%s): logits max ulp %lld, loss ulp %lld, grads max abs "
      "%.3g\n",
      Prefix().c_str(), GemmModeName(GetParam().mode),
      static_cast<long long>(logit_ulp), static_cast<long long>(loss_ulp),
      max_abs);
}

// The other BLAS's torch run sums in another order: agreement within float
// rounding only (1e-5 absolute on O(1) logits).
TEST_P(PytorchMatchTest, OtherBlasAgreesWithinRounding) {
  auto mlp = Make();
  std::vector<float> logits(batch_ * layout_->num_classes());
  mlp->Forward(x_.data(), static_cast<int>(batch_), logits.data());
  const std::string other =
      std::string(GetParam().net) + "_" +
      (std::string(GetParam().blas) == "openblas" ? "refblas" : "openblas");
  EXPECT_LE(MaxAbs(logits, LoadF(other + "_logits.npy")), 1e-5f);
}

// Five torch.optim.SGD steps (plain, momentum + dampening + weight decay,
// Nesterov + weight decay): losses and final parameters. Tolerance 1e-6
// absolute: the gradient differences above compound over the steps
// (observed <= 3e-8).
TEST_P(PytorchMatchTest, SgdTrajectories) {
  const struct {
    const char* name;
    SgdOptions opt;
  } configs[] = {
      {"plain", {0.1f, 0.0f, 0.0f, 0.0f, false}},
      {"momentum", {0.05f, 0.9f, 0.1, 1e-3f, false}},
      {"nesterov", {0.05f, 0.9f, 0.0f, 1e-4f, true}},
  };
  for (const auto& c : configs) {
    const std::string prefix = Prefix() + "_sgd_" + c.name;
    auto mlp = Make();
    const std::vector<float> want_losses = LoadF(prefix + "_losses.npy");
    std::vector<float> losses;
    for (size_t s = 0; s < want_losses.size(); ++s) {
      losses.push_back(
          mlp->ForwardBackward(x_.data(), y_.data(), static_cast<int>(batch_)));
      mlp->SgdStep(c.opt);
    }
    std::vector<float> got(layout_->num_params());
    mlp->GetParams(got.data());
    const float max_abs = MaxAbs(got, LoadF(prefix + "_params.npy"));
    for (size_t s = 0; s < losses.size(); ++s) {
      EXPECT_NEAR(losses[s], want_losses[s], 1e-6f) << prefix << " step " << s;
    }
    EXPECT_LE(max_abs, 1e-6f) << prefix;
    std::printf(
        "%s: params max abs %.3g, last loss ulp %lld\n", prefix.c_str(),
        max_abs,
        static_cast<long long>(UlpDistance(losses.back(), want_losses.back())));
  }
}

// torch.optim.SGD alone on exported parameters and five steps of gradients:
// its update is plain float arithmetic, so every config is bit-exact (0 ulp),
// dampening 0.9 included (1 - 0.9 in double, rounded once, as Python does).
TEST(SgdExactTest, UpdateIsBitExactWithTorch) {
  const struct {
    const char* name;
    SgdOptions opt;
  } configs[] = {
      {"plain", {0.1f, 0.0f, 0.0, 0.0f, false}},
      {"momentum_d0", {0.1f, 0.9f, 0.0, 0.0f, false}},
      {"momentum_d09", {0.1f, 0.9f, 0.9, 0.0f, false}},
      {"momentum_d01_wd", {0.05f, 0.9f, 0.1, 1e-3f, false}},
      {"nesterov_wd", {0.05f, 0.9f, 0.0, 1e-4f, true}},
  };
  const std::vector<float> params0 = LoadF("sgd_exact_params0.npy");
  const std::vector<float> grads = LoadF("sgd_exact_grads.npy");
  const size_t n = params0.size();
  ASSERT_EQ(grads.size() % n, 0u);
  for (const auto& c : configs) {
    std::vector<float> params = params0;
    std::vector<float> buf(n);
    bool have_buf = false;
    for (size_t step = 0; step < grads.size() / n; ++step) {
      SgdUpdate(c.opt, params.data(), grads.data() + step * n, buf.data(),
                &have_buf, n);
    }
    const std::vector<float> want =
        LoadF(std::string("sgd_exact_") + c.name + ".npy");
    ASSERT_EQ(want.size(), n);
    size_t differing = 0;
    for (size_t i = 0; i < n; ++i) differing += params[i] != want[i];
    EXPECT_EQ(differing, 0u) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Nets, PytorchMatchTest,
    ::testing::Values(
        Case{"10,5,2", "net_10_5_2", "openblas", GemmMode::kBlas},
        Case{"10,5,2", "net_10_5_2", "refblas", GemmMode::kOrdered},
        Case{"3,8,8,4", "net_3_8_8_4", "openblas", GemmMode::kBlas},
        Case{"3,8,8,4", "net_3_8_8_4", "refblas", GemmMode::kOrdered}),
    [](const auto& info) {
      return std::string(info.param.net) + "_" + info.param.blas;
    });

}  // namespace
}  // namespace ringlab::nn
