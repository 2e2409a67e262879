// The CUDA backend against the CPU backend on random data. Skips (does not
// fail) where no CUDA device can be used, e.g. on machines without a driver.
#include "nn/cuda_mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/device.h"
#include "nn/cpu_mlp.h"
#include "nn/init.h"
#include "nn/mlp.h"

namespace ringlab::nn {
namespace {

TEST(CudaMlpRegistration, BackendIsLinkedIn) {
  EXPECT_TRUE(HasMlpBackend(Device::kCuda));
  std::string why;
  if (::ringlab::cuda::DeviceCount(&why) == 0) {
    // Without a device, creation fails with a clear message instead of
    // crashing.
    try {
      CreateMlp(Device::kCuda, MlpLayout({3, 2}));
      ADD_FAILURE() << "no exception without a device";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no usable device"),
                std::string::npos)
          << e.what();
    }
  }
}

class CudaMlpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (::ringlab::cuda::DeviceCount(&why) == 0)
      GTEST_SKIP() << "no CUDA device: " << why;
  }
};

// cuBLAS (FP32, no TF32) and the CPU backend sum in different orders: values
// agree to float rounding. Tolerance 1e-4 relative to max(1, |value|), about
// 100x the expected rounding for dot products of length <= 256 with O(1)
// terms; a wrong index or transpose gives O(1) errors. Prints the largest
// difference of every comparison ("[ max diff ]"), so that a run on a GPU
// shows how close it was, not only that it passed. The kernels one by one:
// cuda_kernels_test.
void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                 float tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  double worst = -1, worst_scaled = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::fabs(double(a[i]) - b[i]);
    if (diff > worst) {
      worst = diff;
      worst_scaled = diff / std::max(1.0f, std::fabs(b[i]));
      at = i;
    }
  }
  std::printf(
      "[ max diff ] %s: max |cuda - cpu| = %.3g at %zu (%.3g of max(1, "
      "|cpu|); tolerance %.0e)\n",
      what.c_str(), worst, at, worst_scaled, tol);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * std::max(1.0f, std::fabs(b[i])))
        << what << "[" << i << "]";
  }
}

std::string Name(const SgdOptions& o) {
  char text[96];
  std::snprintf(text, sizeof(text), "sgd(lr=%g,momentum=%g,wd=%g%s)", o.lr,
                o.momentum, o.weight_decay, o.nesterov ? ",nesterov" : "");
  return text;
}

TEST_F(CudaMlpTest, MatchesCpu) {
  for (const char* widths : {"10,5,2", "64,256,128,10", "7,33,1"}) {
    const MlpLayout layout = MlpLayout::Parse(widths);
    std::vector<float> p(layout.num_params());
    torch_compat::TorchGenerator gen(11);
    InitLikeTorch(layout, gen, p.data());
    const int batch = 37;
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0, 1);
    std::vector<float> x(batch * layout.in_features());
    for (float& v : x) v = n(rng);
    std::vector<int64_t> y(batch);
    for (int j = 0; j < batch; ++j) y[j] = (j * 7) % layout.num_classes();

    auto cpu = CreateMlp(Device::kCpu, layout);
    auto gpu = CreateMlp(Device::kCuda, layout);
    ASSERT_EQ(gpu->device(), Device::kCuda);
    cpu->SetParams(p.data());
    gpu->SetParams(p.data());

    std::vector<float> lc(batch * layout.num_classes()), lg(lc.size());
    cpu->Forward(x.data(), batch, lc.data());
    gpu->Forward(x.data(), batch, lg.data());
    ExpectClose(lg, lc, 1e-4f, std::string("logits ") + widths);

    for (const SgdOptions& o :
         {SgdOptions{0.1f}, SgdOptions{0.05f, 0.9f, 0.1f, 1e-3f, false},
          SgdOptions{0.05f, 0.9f, 0.0f, 1e-4f, true}}) {
      auto c = CreateMlp(Device::kCpu, layout);
      auto g = CreateMlp(Device::kCuda, layout);
      c->SetParams(p.data());
      g->SetParams(p.data());
      for (int step = 0; step < 3; ++step) {
        const float loss_c = c->ForwardBackward(x.data(), y.data(), batch);
        const float loss_g = g->ForwardBackward(x.data(), y.data(), batch);
        const std::string where = std::string(widths) + " " + Name(o) +
                                  " step " + std::to_string(step);
        ExpectClose({loss_g}, {loss_c}, 1e-4f, "loss " + where);
        std::vector<float> gc(p.size()), gg(p.size());
        c->GetGrads(gc.data());
        g->GetGrads(gg.data());
        ExpectClose(gg, gc, 1e-4f, "grads " + where);
        c->SgdStep(o);
        g->SgdStep(o);
      }
      std::vector<float> pc(p.size()), pg(p.size());
      c->GetParams(pc.data());
      g->GetParams(pg.data());
      ExpectClose(
          pg, pc, 1e-4f,
          std::string("params ") + widths + " " + Name(o) + " after 3 steps");
    }
  }
}

// Each layer's gradients, waited for on another thread (as a reducing thread
// does), are final when its wait returns, while backward goes on enqueueing.
class ThreadedWaitObserver : public BackwardObserver {
 public:
  void OnLayerGrads(int layer, std::function<void()> wait_ready) override {
    layers_.push_back(layer);
    waiters_.emplace_back(std::move(wait_ready));
  }
  std::vector<int> layers_;
  std::vector<std::thread> waiters_;
};

TEST_F(CudaMlpTest, LayerEventsReportBackwardInOrder) {
  const MlpLayout layout({64, 256, 128, 10});
  std::vector<float> p(layout.num_params());
  torch_compat::TorchGenerator gen(2);
  InitLikeTorch(layout, gen, p.data());
  const int batch = 16;
  std::vector<float> x(batch * layout.in_features(), 0.25f);
  std::vector<int64_t> y(batch, 3);
  auto g = CreateMlp(Device::kCuda, layout);
  g->SetParams(p.data());
  ThreadedWaitObserver observer;
  const float with = g->ForwardBackward(x.data(), y.data(), batch, &observer);
  for (std::thread& t : observer.waiters_) t.join();
  EXPECT_EQ(observer.layers_, (std::vector<int>{2, 1, 0}));
  std::vector<float> observed(p.size()), plain(p.size());
  g->GetGrads(observed.data());
  EXPECT_EQ(g->ForwardBackward(x.data(), y.data(), batch), with);
  g->GetGrads(plain.data());
  EXPECT_EQ(observed, plain);
}

TEST_F(CudaMlpTest, EmptyBatchAndBadLabels) {
  const MlpLayout layout({4, 3});
  auto g = CreateMlp(Device::kCuda, layout);
  EXPECT_EQ(g->ForwardBackward(nullptr, nullptr, 0), 0.0f);
  std::vector<float> grads(layout.num_params(), 1.0f);
  g->GetGrads(grads.data());
  for (float v : grads) EXPECT_EQ(v, 0.0f);
  const std::vector<float> x(4, 1.0f);
  const int64_t bad = 3;
  EXPECT_THROW(g->ForwardBackward(x.data(), &bad, 1), std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::nn
