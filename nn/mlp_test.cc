#include "nn/mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/cpu_mlp.h"
#include "nn/init.h"
#include "torch_compat/generator.h"

namespace ringlab::nn {
namespace {

TEST(MlpLayoutTest, FlatLayoutAndNames) {
  const MlpLayout layout({10, 5, 2});
  EXPECT_EQ(layout.num_layers(), 2);
  EXPECT_EQ(layout.num_params(), 10u * 5 + 5 + 5 * 2 + 2);
  ASSERT_EQ(layout.tensors().size(), 4u);
  EXPECT_EQ(layout.weight(0).name, "fc1.weight");
  EXPECT_EQ(layout.weight(0).shape, (std::vector<int64_t>{5, 10}));
  EXPECT_EQ(layout.bias(0).name, "fc1.bias");
  EXPECT_EQ(layout.bias(0).offset, 50u);
  EXPECT_EQ(layout.weight(1).name, "fc2.weight");
  EXPECT_EQ(layout.weight(1).offset, 55u);
  EXPECT_EQ(layout.bias(1).offset, 65u);
  EXPECT_EQ(layout.bias(1).size, 2u);
  EXPECT_EQ(layout.ToString(), "10,5,2");
}

TEST(MlpLayoutTest, Parse) {
  EXPECT_EQ(MlpLayout::Parse("3,8,8,4").widths(),
            (std::vector<int>{3, 8, 8, 4}));
  EXPECT_EQ(MlpLayout::Parse(" 10, 5 ,2").ToString(), "10,5,2");
  for (const char* bad : {"", "10", "10,", ",5", "10,,2", "10,x,2", "10,-5,2",
                          "10,0,2", "1.5,2", "10,99999999999999999999"}) {
    try {
      MlpLayout::Parse(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("MlpLayout"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(MlpLayout({4}), std::invalid_argument);
  EXPECT_THROW(MlpLayout({4, 0}), std::invalid_argument);
}

TEST(BackendTest, CpuRegisteredCudaNotLinked) {
  EXPECT_STREQ(DeviceName(Device::kCpu), "cpu");
  EXPECT_STREQ(DeviceName(Device::kCuda), "cuda");
  EXPECT_TRUE(HasMlpBackend(Device::kCpu));
  auto mlp = CreateMlp(Device::kCpu, MlpLayout({3, 2}));
  EXPECT_EQ(mlp->device(), Device::kCpu);
  // This test does not link //nn:cuda_mlp.
  EXPECT_FALSE(HasMlpBackend(Device::kCuda));
  try {
    CreateMlp(Device::kCuda, MlpLayout({3, 2}));
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA backend not built"),
              std::string::npos)
        << e.what();
  }
}

TEST(CpuMlpTest, ParamsStartAtZeroAndRoundTrip) {
  const MlpLayout layout({4, 3, 2});
  auto mlp = CreateMlp(Device::kCpu, layout);
  std::vector<float> p(layout.num_params(), 1.0f);
  mlp->GetParams(p.data());
  for (float v : p) EXPECT_EQ(v, 0.0f);
  for (size_t i = 0; i < p.size(); ++i) p[i] = 0.1f * i;
  mlp->SetParams(p.data());
  EXPECT_EQ(mlp->params()[5], 0.5f);
  std::vector<float> q(p.size());
  mlp->GetParams(q.data());
  EXPECT_EQ(p, q);
}

TEST(CpuMlpTest, EmptyBatchAndBadInput) {
  const MlpLayout layout({4, 3, 2});
  auto mlp = CreateMlp(Device::kCpu, layout);
  std::fill(mlp->grads(), mlp->grads() + layout.num_params(), 7.0f);
  EXPECT_EQ(mlp->ForwardBackward(nullptr, nullptr, 0), 0.0f);
  for (size_t i = 0; i < layout.num_params(); ++i) {
    EXPECT_EQ(mlp->grads()[i], 0.0f);
  }
  const std::vector<float> x(4 * 2, 0.5f);
  const std::vector<int64_t> bad = {0, 2};
  EXPECT_THROW(mlp->ForwardBackward(x.data(), bad.data(), 2),
               std::invalid_argument);
  const std::vector<int64_t> negative = {-1, 0};
  EXPECT_THROW(mlp->ForwardBackward(x.data(), negative.data(), 2),
               std::invalid_argument);
  EXPECT_THROW(mlp->ForwardBackward(x.data(), bad.data(), -1),
               std::invalid_argument);
}

// With zero weights every logit is 0: the loss is log(classes).
TEST(CpuMlpTest, ZeroWeightsGiveLogClasses) {
  const MlpLayout layout({4, 3, 5});
  auto mlp = CreateMlp(Device::kCpu, layout);
  const std::vector<float> x(4 * 3, 1.0f);
  const std::vector<int64_t> y = {0, 1, 4};
  EXPECT_NEAR(mlp->ForwardBackward(x.data(), y.data(), 3), std::log(5.0f),
              1e-6f);
}

// Ordered loop and OpenBLAS compute the same function: agreement to float
// rounding (1e-5 relative on O(1) values, far above the ~1e-7 observed).
TEST(CpuMlpTest, GemmModesAgree) {
  const MlpLayout layout({64, 128, 32, 10});
  std::vector<float> p(layout.num_params());
  torch_compat::TorchGenerator gen(3);
  InitLikeTorch(layout, gen, p.data());
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0, 1);
  const int batch = 40;
  std::vector<float> x(batch * 64);
  for (float& v : x) v = n(rng);
  std::vector<int64_t> y(batch);
  for (int j = 0; j < batch; ++j) y[j] = j % 10;
  auto a = CreateCpuMlp(layout, {GemmMode::kOrdered});
  auto b = CreateCpuMlp(layout, {GemmMode::kBlas});
  a->SetParams(p.data());
  b->SetParams(p.data());
  EXPECT_NEAR(a->ForwardBackward(x.data(), y.data(), batch),
              b->ForwardBackward(x.data(), y.data(), batch), 1e-5f);
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_NEAR(a->grads()[i], b->grads()[i],
                1e-5f * std::max(1.0f, std::fabs(a->grads()[i])))
        << i;
  }
}

// With memory of the caller's, the model computes in it, bit for bit as
// with its own, and leaves the floats around it alone.
TEST(CpuMlpTest, CallersMemoryHoldsParamsAndGrads) {
  const MlpLayout layout = MlpLayout::Parse("5,7,3");
  const size_t n = layout.num_params();
  std::vector<float> params(n + 2, -7.0f), grads(n + 2, -7.0f);
  auto own = CreateCpuMlp(layout, {GemmMode::kBlas});
  auto theirs = CreateCpuMlp(
      layout, {GemmMode::kBlas, params.data() + 1, grads.data() + 1});
  EXPECT_EQ(theirs->params(), params.data() + 1);
  EXPECT_EQ(theirs->grads(), grads.data() + 1);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> init(n), x(4 * 5);
  for (float& v : init) v = normal(rng);
  for (float& v : x) v = normal(rng);
  const std::vector<int64_t> y = {0, 2, 1, 2};
  for (auto* m : {own.get(), theirs.get()}) {
    m->SetParams(init.data());
    m->ForwardBackward(x.data(), y.data(), 4);
    m->SgdStep(SgdOptions{0.1f, 0.9f, 0.0, 0.0f, false});
    m->ForwardBackward(x.data(), y.data(), 4);
  }
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(params[i + 1], own->params()[i]) << i;
    EXPECT_EQ(grads[i + 1], own->grads()[i]) << i;
  }
  EXPECT_EQ(params.front(), -7.0f);
  EXPECT_EQ(params.back(), -7.0f);
  EXPECT_EQ(grads.front(), -7.0f);
  EXPECT_EQ(grads.back(), -7.0f);
}

// Records, as backward reports each layer, which layers' gradients are in
// memory by then: the ones reported must be final, the ones not yet reported
// untouched (the buffer starts as NaN).
class RecordingObserver : public BackwardObserver {
 public:
  explicit RecordingObserver(Mlp& model) : model_(model) {}
  void OnForwardDone() override { events_.push_back("forward"); }
  void OnLayerGrads(int layer, std::function<void()> wait_ready) override {
    wait_ready();
    events_.push_back("layer " + std::to_string(layer));
    snapshots_.emplace_back(model_.layout().num_params());
    model_.GetGrads(snapshots_.back().data());
  }
  std::vector<std::string> events_;
  std::vector<std::vector<float>> snapshots_;

 private:
  Mlp& model_;
};

TEST(CpuMlpTest, ObserverSeesEachLayersGradientsAsBackwardProducesThem) {
  const MlpLayout layout({6, 5, 4, 3});
  auto mlp = CreateMlp(Device::kCpu, layout);
  std::vector<float> p(layout.num_params());
  torch_compat::TorchGenerator gen(5);
  InitLikeTorch(layout, gen, p.data());
  mlp->SetParams(p.data());
  std::vector<float> x(2 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i);
  const std::vector<int64_t> y = {0, 2};
  const std::vector<float> nan(layout.num_params(), std::nanf(""));
  mlp->SetGrads(nan.data());
  RecordingObserver observer(*mlp);
  const float loss = mlp->ForwardBackward(x.data(), y.data(), 2, &observer);
  EXPECT_EQ(observer.events_, (std::vector<std::string>{"forward", "layer 2",
                                                        "layer 1", "layer 0"}));
  std::vector<float> final_grads(layout.num_params());
  mlp->GetGrads(final_grads.data());
  auto plain = CreateMlp(Device::kCpu, layout);
  plain->SetParams(p.data());
  EXPECT_EQ(plain->ForwardBackward(x.data(), y.data(), 2), loss);
  std::vector<float> plain_grads(layout.num_params());
  plain->GetGrads(plain_grads.data());
  EXPECT_EQ(final_grads, plain_grads);  // bitwise: the observer changes nothing
  for (int k = 0; k < 3; ++k) {
    const int reported_down_to = 2 - k;
    for (int l = 0; l < 3; ++l) {
      for (const TensorSlot* t : {&layout.weight(l), &layout.bias(l)}) {
        for (size_t i = t->offset; i < t->offset + t->size; ++i) {
          const float seen = observer.snapshots_[k][i];
          if (l >= reported_down_to) {
            ASSERT_EQ(seen, final_grads[i])
                << t->name << " at layer report " << reported_down_to;
          } else {
            ASSERT_TRUE(std::isnan(seen)) << t->name << " written before "
                                          << "its layer was reported";
          }
        }
      }
    }
  }
  RecordingObserver empty(*mlp);
  mlp->ForwardBackward(nullptr, nullptr, 0, &empty);
  EXPECT_EQ(empty.events_, (std::vector<std::string>{"forward", "layer 2",
                                                     "layer 1", "layer 0"}));
}

TEST(SgdTest, PlainIsFusedMultiplyAdd) {
  float p[3] = {1.0f, -2.0f, 0.3f};
  const float g[3] = {0.1f, 0.7f, -1e-3f};
  bool have = false;
  SgdUpdate({0.01f}, p, g, nullptr, &have, 3);
  EXPECT_EQ(p[0], std::fmaf(0.1f, -0.01f, 1.0f));
  EXPECT_EQ(p[1], std::fmaf(0.7f, -0.01f, -2.0f));
  EXPECT_EQ(p[2], std::fmaf(-1e-3f, -0.01f, 0.3f));
}

// The vectorised path (8 lanes and a tail) rounds once per element, as
// fmaf does: checked on values where an unfused multiply-then-add differs.
TEST(SgdTest, VectorisedPlainStepIsFmafBitForBit) {
  const size_t n = 1003;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = normal(rng);
    g[i] = normal(rng);
  }
  const float lr = 0.1f;
  std::vector<float> expected(n);
  size_t unfused_differs = 0;
  for (size_t i = 0; i < n; ++i) {
    expected[i] = std::fmaf(g[i], -lr, p[i]);
    volatile float product = g[i] * -lr;
    unfused_differs += (product + p[i]) != expected[i];
  }
  ASSERT_GT(unfused_differs, 10u) << "the data would not tell fused from not";
  bool have = false;
  SgdUpdate({lr}, p.data(), g.data(), nullptr, &have, n);
  EXPECT_EQ(p, expected);
}

TEST(SgdTest, MomentumBufferStartsAsGradient) {
  float p[1] = {1.0f}, buf[1] = {123.0f};
  const float g[1] = {0.5f};
  bool have = false;
  SgdOptions o;
  o.lr = 0.1f;
  o.momentum = 0.9f;
  o.dampening = 0.5f;
  SgdUpdate(o, p, g, buf, &have, 1);
  EXPECT_TRUE(have);
  EXPECT_EQ(buf[0], 0.5f);  // first step: no dampening applied
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.05f);
  SgdUpdate(o, p, g, buf, &have, 1);
  EXPECT_FLOAT_EQ(buf[0], 0.9f * 0.5f + 0.5f * 0.5f);
  EXPECT_FLOAT_EQ(p[0], 0.95f - 0.1f * 0.7f);
}

TEST(SgdTest, RejectsBadOptions) {
  float p[1] = {0}, g[1] = {0}, buf[1];
  bool have = false;
  SgdOptions nesterov_no_momentum;
  nesterov_no_momentum.nesterov = true;
  EXPECT_THROW(SgdUpdate(nesterov_no_momentum, p, g, buf, &have, 1),
               std::invalid_argument);
  SgdOptions negative_lr;
  negative_lr.lr = -1;
  EXPECT_THROW(SgdUpdate(negative_lr, p, g, buf, &have, 1),
               std::invalid_argument);
}

// A few steps on a learnable problem reduce the loss (sanity, not speed).
TEST(CpuMlpTest, TrainingReducesLoss) {
  const MlpLayout layout({2, 16, 2});
  auto mlp = CreateMlp(Device::kCpu, layout);
  std::vector<float> p(layout.num_params());
  torch_compat::TorchGenerator gen(0);
  InitLikeTorch(layout, gen, p.data());
  mlp->SetParams(p.data());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  const int batch = 64;
  std::vector<float> x(batch * 2);
  std::vector<int64_t> y(batch);
  for (int j = 0; j < batch; ++j) {
    x[2 * j] = u(rng);
    x[2 * j + 1] = u(rng);
    y[j] = x[2 * j] * x[2 * j + 1] > 0;
  }
  SgdOptions o;
  o.lr = 0.5f;
  o.momentum = 0.9f;
  const float first = mlp->ForwardBackward(x.data(), y.data(), batch);
  float last = first;
  for (int s = 0; s < 200; ++s) {
    mlp->SgdStep(o);
    last = mlp->ForwardBackward(x.data(), y.data(), batch);
  }
  EXPECT_LT(last, 0.5f * first);
}

}  // namespace
}  // namespace ringlab::nn
