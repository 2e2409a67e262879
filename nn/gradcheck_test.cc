// Finite-difference checks of every backward pass, in double precision on the
// same templates the float backend runs (cpu_ops.h), in both GEMM modes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "nn/cpu_ops.h"

namespace ringlab::nn {
namespace {

// Central differences with h = 1e-6 have truncation error O(h^2 * f''') ~
// 1e-12 and rounding error O(eps / h) ~ 1e-10 for O(1) functions, so analytic
// and numeric gradients must agree to 1e-7 relative (a wrong formula is off by
// O(1)). ReLU kinks are avoided by keeping inputs away from 0 (see below).
constexpr double kH = 1e-6;
constexpr double kTol = 1e-7;

std::vector<double> Random(size_t n, std::mt19937* rng, double scale = 1.0) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = u(*rng);
  return v;
}

// Checks d f / d v[i] for every i against grad[i].
template <typename F>
void CheckGradient(const char* what, std::vector<double>* v,
                   const std::vector<double>& grad, F f) {
  ASSERT_EQ(v->size(), grad.size());
  for (size_t i = 0; i < v->size(); ++i) {
    const double saved = (*v)[i];
    (*v)[i] = saved + kH;
    const double up = f();
    (*v)[i] = saved - kH;
    const double down = f();
    (*v)[i] = saved;
    const double numeric = (up - down) / (2 * kH);
    EXPECT_NEAR(grad[i], numeric, kTol * std::max(1.0, std::fabs(numeric)))
        << what << "[" << i << "]";
  }
}

class GradCheck : public ::testing::TestWithParam<GemmMode> {};

TEST_P(GradCheck, Linear) {
  const GemmMode mode = GetParam();
  std::mt19937 rng(1);
  const int batch = 5, in = 4, out = 3;
  std::vector<double> x = Random(batch * in, &rng), w = Random(out * in, &rng),
                      b = Random(out, &rng), r = Random(batch * out, &rng);
  // Scalar objective L = Σ y·r, so dL/dy = r.
  auto loss = [&] {
    std::vector<double> y(batch * out);
    LinearForward(x.data(), w.data(), b.data(), y.data(), batch, in, out, mode);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  };
  std::vector<double> dw(out * in), db(out), dx(batch * in);
  LinearBackward(x.data(), w.data(), r.data(), dw.data(), db.data(), dx.data(),
                 batch, in, out, mode);
  CheckGradient("dW", &w, dw, loss);
  CheckGradient("db", &b, db, loss);
  CheckGradient("dx", &x, dx, loss);
}

TEST(GradCheckOps, Relu) {
  std::mt19937 rng(2);
  std::vector<double> x = Random(20, &rng), r = Random(20, &rng);
  for (double& v : x) v += v > 0 ? 0.1 : -0.1;  // away from the kink
  auto loss = [&] {
    std::vector<double> h = x;
    ReluForward(h.data(), h.size());
    double s = 0;
    for (size_t i = 0; i < h.size(); ++i) s += h[i] * r[i];
    return s;
  };
  std::vector<double> h = x, d = r;
  ReluForward(h.data(), h.size());
  ReluBackward(h.data(), d.data(), d.size());
  CheckGradient("relu", &x, d, loss);
}

TEST(GradCheckOps, SoftmaxCrossEntropy) {
  std::mt19937 rng(3);
  const int batch = 6, classes = 5;
  std::vector<double> z = Random(batch * classes, &rng, 3.0);
  const std::vector<int64_t> labels = {0, 4, 2, 2, 1, 3};
  std::vector<double> dz(z.size());
  SoftmaxCrossEntropy(z.data(), labels.data(), batch, classes, dz.data());
  CheckGradient("dz", &z, dz, [&] {
    return SoftmaxCrossEntropy<double>(z.data(), labels.data(), batch, classes,
                                       nullptr);
  });
}

TEST(GradCheckOps, CrossEntropyIsStableForHugeLogits) {
  const double z[] = {1000.0, 0.0, -1000.0};
  const int64_t y = 1;
  double dz[3];
  const double loss = SoftmaxCrossEntropy(z, &y, 1, 3, dz);
  EXPECT_NEAR(loss, 1000.0, 1e-9);
  EXPECT_NEAR(dz[0], 1.0, 1e-12);
  EXPECT_NEAR(dz[1], -1.0, 1e-12);
  const float zf[] = {1e30f, 0.0f};
  EXPECT_TRUE(std::isfinite(SoftmaxCrossEntropy<float>(zf, &y, 1, 2, nullptr)));
}

TEST_P(GradCheck, WholeMlp) {
  for (const char* widths : {"4,7,3", "10,5,2", "6,5,4,3"}) {
    const MlpLayout layout = MlpLayout::Parse(widths);
    std::mt19937 rng(4);
    const int batch = 9;
    std::vector<double> params = Random(layout.num_params(), &rng);
    std::vector<double> x = Random(batch * layout.in_features(), &rng);
    std::vector<int64_t> labels(batch);
    for (int j = 0; j < batch; ++j) labels[j] = j % layout.num_classes();
    MlpWorkspace<double> ws;
    // Keep every hidden pre-activation at least 1e-3 from the ReLU kink, far
    // beyond kH, by nudging the biases of units that come too close.
    for (int attempt = 0; attempt < 50; ++attempt) {
      bool moved = false;
      MlpForward(layout, params.data(), x.data(), batch, GetParam(), &ws);
      for (int l = 0; l + 1 < layout.num_layers(); ++l) {
        // Recompute pre-activations: act holds post-ReLU values, so check
        // the layer input directly instead.
        const int fi = layout.widths()[l], fo = layout.widths()[l + 1];
        const double* in = l == 0 ? x.data() : ws.act[l - 1].data();
        std::vector<double> pre(batch * fo);
        LinearForward(in, params.data() + layout.weight(l).offset,
                      params.data() + layout.bias(l).offset, pre.data(), batch,
                      fi, fo, GetParam());
        for (int j = 0; j < batch; ++j) {
          for (int i = 0; i < fo; ++i) {
            if (std::fabs(pre[j * fo + i]) < 1e-3) {
              params[layout.bias(l).offset + i] += 0.01;
              moved = true;
            }
          }
        }
      }
      if (!moved) break;
    }
    std::vector<double> grads(layout.num_params());
    MlpForwardBackward(layout, params.data(), grads.data(), x.data(),
                       labels.data(), batch, GetParam(), &ws);
    MlpWorkspace<double> ws2;
    std::vector<double> scratch(layout.num_params());
    CheckGradient(widths, &params, grads, [&] {
      return MlpForwardBackward(layout, params.data(), scratch.data(), x.data(),
                                labels.data(), batch, GetParam(), &ws2);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, GradCheck,
                         ::testing::Values(GemmMode::kOrdered, GemmMode::kBlas),
                         [](const auto& info) {
                           return std::string(GemmModeName(info.param));
                         });

TEST(TorchColumnSums, AgreesWithPlainSums) {
  // The order is PyTorch's; the value must still be the sum (checked in
  // double, where the order changes nothing visible at 1e-12).
  std::mt19937 rng(5);
  for (int rows : {1, 3, 8, 17, 100, 1000}) {
    for (int cols : {1, 2, 5, 8, 33, 40}) {
      std::vector<double> m = Random(rows * cols, &rng);
      std::vector<double> got(cols);
      TorchColumnSums(m.data(), rows, cols, got.data());
      for (int c = 0; c < cols; ++c) {
        double want = 0;
        for (int r = 0; r < rows; ++r) want += m[r * cols + c];
        EXPECT_NEAR(got[c], want, 1e-12) << rows << "x" << cols << " col " << c;
      }
    }
  }
}

}  // namespace
}  // namespace ringlab::nn
