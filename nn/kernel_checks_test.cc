// Per-kernel tests of the CUDA backend's small kernels, llm.c's way: bias
// (+ReLU), ReLU backward, bias gradient, softmax cross-entropy, mean loss and
// SGD, each against the CPU backend's reference (nn/cpu_ops.h,
// nn/cpu_mlp.h) on shapes that include odd sizes and sizes past one grid of
// blocks, with each tolerance stated next to its check, and the largest
// difference of every check printed ("[ max diff ]").
//
// One source, two binaries: kernel_math_test runs the kernels' arithmetic
// (cuda_kernel_math.h, the code the kernels call) on the CPU, everywhere;
// cuda_kernels_test (RINGLAB_KERNEL_TEST_CUDA) launches the kernels
// themselves and skips where no GPU can be used.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nn/cpu_mlp.h"
#include "nn/cpu_ops.h"
#include "nn/cuda_kernel_math.h"
#ifdef RINGLAB_KERNEL_TEST_CUDA
#include <cuda_runtime.h>

#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "cuda/error.h"
#include "nn/cuda_kernels.h"
#endif

namespace ringlab::nn {
namespace {

// Unit roundoff of float: every correctly rounded operation errs by at most
// u relative.
constexpr double kU = 0x1p-24;

// What the tests run the kernels through.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void AddBias(std::vector<float>* y, const std::vector<float>& b,
                       int rows, int cols, bool relu) = 0;
  virtual void ReluBackward(const std::vector<float>& h,
                            std::vector<float>* dh) = 0;
  virtual std::vector<float> BiasGrad(const std::vector<float>& dy, int rows,
                                      int cols) = 0;
  virtual void SoftmaxCe(const std::vector<float>& z,
                         const std::vector<int64_t>& labels, int rows, int cols,
                         std::vector<float>* loss, std::vector<float>* dz) = 0;
  virtual float MeanLoss(const std::vector<float>& row_loss) = 0;
  virtual void Sgd(std::vector<float>* p, const std::vector<float>& g,
                   std::vector<float>* buf, const SgdOptions& o,
                   bool first) = 0;
};

// The kernels' arithmetic on the CPU, element by element as the kernels
// apply it.
class HostRunner : public Runner {
 public:
  void AddBias(std::vector<float>* y, const std::vector<float>& b, int rows,
               int cols, bool relu) override {
    for (size_t k = 0; k < y->size(); ++k) {
      (*y)[k] = cuda::AddBiasOne((*y)[k], b[k % cols], relu);
    }
    (void)rows;
  }
  void ReluBackward(const std::vector<float>& h,
                    std::vector<float>* dh) override {
    for (size_t k = 0; k < h.size(); ++k) {
      (*dh)[k] = cuda::ReluBackwardOne(h[k], (*dh)[k]);
    }
  }
  std::vector<float> BiasGrad(const std::vector<float>& dy, int rows,
                              int cols) override {
    std::vector<float> db(cols);
    for (int i = 0; i < cols; ++i) {
      db[i] = cuda::BiasGradColumn(dy.data(), rows, cols, i);
    }
    return db;
  }
  void SoftmaxCe(const std::vector<float>& z,
                 const std::vector<int64_t>& labels, int rows, int cols,
                 std::vector<float>* loss, std::vector<float>* dz) override {
    const float inv = 1.0f / rows;
    for (int j = 0; j < rows; ++j) {
      cuda::SoftmaxCeRow(z.data() + size_t(j) * cols, labels[j], cols, inv,
                         &(*loss)[j], dz->data() + size_t(j) * cols);
    }
  }
  float MeanLoss(const std::vector<float>& row_loss) override {
    return cuda::MeanLossInKernelOrder(row_loss.data(),
                                       static_cast<int>(row_loss.size()));
  }
  void Sgd(std::vector<float>* p, const std::vector<float>& g,
           std::vector<float>* buf, const SgdOptions& o, bool first) override {
    const float keep = static_cast<float>(1.0 - o.dampening);
    for (size_t k = 0; k < p->size(); ++k) {
      (*p)[k] = cuda::SgdOne((*p)[k], g[k], buf->empty() ? nullptr : &(*buf)[k],
                             -o.lr, o.momentum, keep, o.weight_decay,
                             o.nesterov, first);
    }
  }
};

#ifdef RINGLAB_KERNEL_TEST_CUDA
// Device memory and checks from //cuda (nn::cuda is this package's kernels).
using ::ringlab::cuda::DeviceBuffer;

void Ok(cudaError_t err, const char* what) {
  ::ringlab::cuda::Check(err, what);
}

// The kernels themselves, each launch checked and waited for.
class CudaRunner : public Runner {
 public:
  void AddBias(std::vector<float>* y, const std::vector<float>& b, int rows,
               int cols, bool relu) override {
    DeviceBuffer<float> dy(*y), db(b);
    Ok(cuda::AddBias(dy.get(), db.get(), rows, cols, relu, nullptr), "AddBias");
    Ok(cudaDeviceSynchronize(), "AddBias kernel");
    *y = dy.Download();
  }
  void ReluBackward(const std::vector<float>& h,
                    std::vector<float>* dh) override {
    DeviceBuffer<float> dhv(h), ddh(*dh);
    Ok(cuda::ReluBackward(dhv.get(), ddh.get(), h.size(), nullptr),
       "ReluBackward");
    Ok(cudaDeviceSynchronize(), "ReluBackward kernel");
    *dh = ddh.Download();
  }
  std::vector<float> BiasGrad(const std::vector<float>& dy, int rows,
                              int cols) override {
    DeviceBuffer<float> ddy(dy), ddb(std::vector<float>(cols, -1.0f));
    Ok(cuda::BiasGrad(ddy.get(), ddb.get(), rows, cols, nullptr), "BiasGrad");
    Ok(cudaDeviceSynchronize(), "BiasGrad kernel");
    return ddb.Download();
  }
  void SoftmaxCe(const std::vector<float>& z,
                 const std::vector<int64_t>& labels, int rows, int cols,
                 std::vector<float>* loss, std::vector<float>* dz) override {
    DeviceBuffer<float> dzv(z), dloss(*loss), ddz(*dz);
    DeviceBuffer<int64_t> dlabels(labels);
    Ok(cuda::SoftmaxCrossEntropy(dzv.get(), dlabels.get(), rows, cols,
                                 dloss.get(), ddz.get(), nullptr),
       "SoftmaxCrossEntropy");
    Ok(cudaDeviceSynchronize(), "SoftmaxCrossEntropy kernel");
    *loss = dloss.Download();
    *dz = ddz.Download();
  }
  float MeanLoss(const std::vector<float>& row_loss) override {
    DeviceBuffer<float> drow(row_loss), dout(std::vector<float>(1, -1.0f));
    Ok(cuda::MeanLoss(drow.get(), static_cast<int>(row_loss.size()), dout.get(),
                      nullptr),
       "MeanLoss");
    Ok(cudaDeviceSynchronize(), "MeanLoss kernel");
    return dout.Download()[0];
  }
  void Sgd(std::vector<float>* p, const std::vector<float>& g,
           std::vector<float>* buf, const SgdOptions& o, bool first) override {
    DeviceBuffer<float> dp(*p), dg(g), dbuf(*buf);
    Ok(cuda::Sgd(dp.get(), dg.get(), buf->empty() ? nullptr : dbuf.get(),
                 p->size(), o.lr, o.momentum, o.dampening, o.weight_decay,
                 o.nesterov, first, nullptr),
       "Sgd");
    Ok(cudaDeviceSynchronize(), "Sgd kernel");
    *p = dp.Download();
    if (!buf->empty()) *buf = dbuf.Download();
  }
};
#endif

// Elementwise check of got against want with a tolerance per element;
// prints the largest difference (and where, and what was allowed there).
// Tolerance 0 means bit for bit (two NaNs count as equal: the GPU's NaN has
// its own payload).
void ExpectWithin(const std::string& what, const std::vector<float>& got,
                  const std::vector<double>& want,
                  const std::function<double(size_t)>& tolerance,
                  const std::string& why) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = -1, worst_allowed = 0;
  size_t at = 0, bad = 0, first_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    const double diff = std::fabs(double(got[i]) - want[i]);
    const double allowed = tolerance(i);
    const bool ok =
        allowed == 0 ? float(want[i]) == got[i] &&
                           std::signbit(got[i]) == std::signbit(float(want[i]))
                     : diff <= allowed;
    if (!ok && bad++ == 0) first_bad = i;
    if (diff > worst || (std::isnan(diff) && !std::isnan(worst))) {
      worst = diff;
      worst_allowed = allowed;
      at = i;
    }
  }
  std::printf(
      "[ max diff ] %s: max |got - want| = %.3g at %zu (allowed %.3g: "
      "%s)\n",
      what.c_str(), worst, at, worst_allowed, why.c_str());
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " element(s) outside "
                     << "the tolerance; first at " << first_bad << ": got "
                     << got[first_bad] << ", want " << want[first_bad];
}

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Uniform in [-scale, scale), from a 64-bit xorshift: tens of millions of
// draws per test, which std::normal_distribution would take seconds for.
std::vector<float> Noise(size_t n, uint32_t seed, float scale = 1.0f) {
  uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t{seed} << 17 | seed);
  std::vector<float> v(n);
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = scale * (static_cast<float>(x >> 40) * 0x1p-23f - 1.0f);
  }
  return v;
}

std::string Shape(int rows, int cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// rows x cols, odd and even, one past a block and past one grid of
// 65535 x 256 threads (the kernels' grid-stride loops).
const std::pair<int, int> kShapes[] = {{1, 1},    {1, 7},    {3, 5},
                                       {37, 10},  {64, 2},   {257, 33},
                                       {1000, 3}, {5, 1000}, {65536, 257}};

class KernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "host") {
      runner_ = std::make_unique<HostRunner>();
      return;
    }
#ifdef RINGLAB_KERNEL_TEST_CUDA
    std::string why;
    if (::ringlab::cuda::DeviceCount(&why) == 0) {
      GTEST_SKIP() << "no CUDA device: " << why;
    }
    runner_ = std::make_unique<CudaRunner>();
#endif
  }
  std::string Name(const std::string& kernel, const std::string& shape) const {
    return kernel + " " + shape + " (" + GetParam() + ")";
  }

  std::unique_ptr<Runner> runner_;
};

// y + b (then ReLU) is one correctly rounded float add on both sides, and
// the ReLU a selection: bit for bit, NaN kept.
TEST_P(KernelTest, AddBiasAndRelu) {
  for (const auto& [rows, cols] : kShapes) {
    for (bool relu : {false, true}) {
      std::vector<float> y = Noise(size_t(rows) * cols, 1 + rows);
      const std::vector<float> b = Noise(cols, 2 + cols);
      y[y.size() / 2] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> want = y;
      for (int j = 0; j < rows; ++j) {
        for (int i = 0; i < cols; ++i) want[size_t(j) * cols + i] += b[i];
      }
      if (relu) ReluForward(want.data(), want.size());
      runner_->AddBias(&y, b, rows, cols, relu);
      ExpectWithin(
          Name(relu ? "AddBias+ReLU" : "AddBias", Shape(rows, cols)), y,
          ToDouble(want), [](size_t) { return 0.0; },
          "one rounded add, bit for bit");
    }
  }
}

// A selection: bit for bit, with h at 0, -0, NaN and negatives.
TEST_P(KernelTest, ReluBackward) {
  for (size_t n : {size_t{1}, size_t{5}, size_t{1023}, size_t{16776977}}) {
    std::vector<float> h = Noise(n, 3), dh = Noise(n, 4);
    h[0] = 0.0f;
    if (n > 2) h[1] = -0.0f;
    if (n > 3) h[2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want = dh;
    nn::ReluBackward(h.data(), want.data(), n);
    runner_->ReluBackward(h, &dh);
    ExpectWithin(
        Name("ReluBackward", std::to_string(n)), dh, ToDouble(want),
        [](size_t) { return 0.0; }, "a selection, bit for bit");
  }
}

// The kernel sums each column in row order, the CPU backend in torch's
// cascade: both recursive sums of `rows` terms err by at most
// (rows-1)·u·Σ|x| (Higham), so they differ by at most twice that. Against
// the same in-order sum done here it must agree bit for bit.
TEST_P(KernelTest, BiasGrad) {
  for (const auto& [rows, cols] : kShapes) {
    const std::vector<float> dy = Noise(size_t(rows) * cols, 5 + rows);
    std::vector<float> cpu(cols);
    TorchColumnSums(dy.data(), rows, cols, cpu.data());
    std::vector<double> in_order(cols), magnitude(cols);
    for (int i = 0; i < cols; ++i) {
      float s = 0.0f;
      for (int j = 0; j < rows; ++j) {
        s += dy[size_t(j) * cols + i];
        magnitude[i] += std::fabs(dy[size_t(j) * cols + i]);
      }
      in_order[i] = s;
    }
    const std::vector<float> got = runner_->BiasGrad(dy, rows, cols);
    ExpectWithin(
        Name("BiasGrad vs CPU backend", Shape(rows, cols)), got, ToDouble(cpu),
        [&](size_t i) { return 2.0 * (rows - 1) * kU * magnitude[i]; },
        "2(rows-1)·u·Σ|dy|: two summation orders");
    ExpectWithin(
        Name("BiasGrad vs row order", Shape(rows, cols)), got, in_order,
        [](size_t) { return 0.0; }, "the kernel's own order, bit for bit");
  }
}

// Against the CPU backend's loss in double precision, row by row. Per row,
// with M = max_k |z_k - max z| and L = log Σ exp(z_k - max): the sum of cols
// exponentials (each within 2 ulp on a GPU, of an argument rounded once)
// errs by (cols + 3 + M)·u relative, so L by that plus u·|L|, and the loss
// -(z_y - max - L) by u·|z_y - max| more; dz_k = (p_k - [k=y])/rows adds
// p·u·(|z_k - max| + |L| + 3) and 3u·|p - [k=y]|, over rows. The bound
// below is that first-order sum, x4 for the terms it drops; a wrong index
// or formula errs by O(1/rows) or more.
TEST_P(KernelTest, SoftmaxCrossEntropy) {
  for (const auto& [rows, cols] : kShapes) {
    // The largest shape is for the elementwise kernels' grid-stride loops.
    if (size_t(rows) * cols > (1u << 20)) continue;
    for (float scale : {1.0f, 8.0f, 60.0f}) {
      const std::vector<float> z =
          Noise(size_t(rows) * cols, 7 + rows + cols, scale);
      std::vector<int64_t> labels(rows);
      for (int j = 0; j < rows; ++j) labels[j] = (j * 7 + 3) % cols;
      std::vector<double> want_loss(rows), want_dz(z.size()), tol_loss(rows),
          tol_dz(z.size());
      for (int j = 0; j < rows; ++j) {
        std::vector<double> row(z.begin() + size_t(j) * cols,
                                z.begin() + size_t(j + 1) * cols);
        std::vector<double> d(cols);
        want_loss[j] =
            SoftmaxCrossEntropy(row.data(), &labels[j], 1, cols, d.data());
        double mx = row[0], m = 0, sum = 0;
        for (double v : row) mx = std::max(mx, v);
        for (double v : row) {
          m = std::max(m, mx - v);
          sum += std::exp(v - mx);
        }
        const double lse = std::log(sum);
        tol_loss[j] = 4 * kU * (cols + 4 + 2 * m + 2 * std::fabs(lse));
        for (int k = 0; k < cols; ++k) {
          want_dz[size_t(j) * cols + k] = d[k] / rows;
          tol_dz[size_t(j) * cols + k] =
              4 * kU * (cols + 9 + 2 * m + 2 * std::fabs(lse)) / rows;
        }
      }
      std::vector<float> loss(rows, -1.0f), dz(z.size(), -1.0f);
      runner_->SoftmaxCe(z, labels, rows, cols, &loss, &dz);
      const std::string shape =
          Shape(rows, cols) + " logits in +-" + std::to_string(int(scale));
      ExpectWithin(
          Name("SoftmaxCE loss", shape), loss, want_loss,
          [&](size_t j) { return tol_loss[j]; },
          "4u·(cols + 4 + 2M + 2|L|), see above");
      ExpectWithin(
          Name("SoftmaxCE dlogits", shape), dz, want_dz,
          [&](size_t i) { return tol_dz[i]; },
          "4u·(cols + 9 + 2M + 2|L|)/rows, see above");
    }
  }
}

// Against the exact (double) mean: each of the 256 threads sums
// ceil(rows/256) losses, then 8 levels of pairwise adds and one division,
// so the error is at most (ceil(rows/256) + 9)·u·Σ|l|/rows. The CPU backend
// folds its mean into its softmax loop (torch's cascade), so the exact mean
// is the reference here; the kernel's own order must agree bit for bit.
TEST_P(KernelTest, MeanLoss) {
  for (int rows : {1, 7, 255, 256, 257, 1000, 70001}) {
    std::vector<float> l = Noise(rows, 11 + rows);
    double exact = 0, magnitude = 0;
    for (float& v : l) {
      v = std::fabs(v) * 3;  // losses are >= 0
      exact += v;
      magnitude += v;
    }
    exact /= rows;
    const float got = runner_->MeanLoss(l);
    const double bound =
        ((rows + cuda::kMeanLossThreads - 1) / cuda::kMeanLossThreads + 9) *
        kU * magnitude / rows;
    ExpectWithin(
        Name("MeanLoss vs exact mean", std::to_string(rows)), {got}, {exact},
        [&](size_t) { return bound; }, "(ceil(rows/256) + 9)·u·Σ|l|/rows");
    ExpectWithin(
        Name("MeanLoss vs its order", std::to_string(rows)), {got},
        {cuda::MeanLossInKernelOrder(l.data(), rows)},
        [](size_t) { return 0.0; }, "the same adds, bit for bit");
  }
}

// torch.optim.SGD: the same fmaf chain on both sides, bit for bit, over
// three steps (the momentum buffer's first step and later ones).
TEST_P(KernelTest, Sgd) {
  const SgdOptions options[] = {{0.1f},
                                {0.05f, 0.0f, 0.0, 1e-3f, false},
                                {0.05f, 0.9f, 0.1, 1e-3f, false},
                                {0.05f, 0.9f, 0.0, 1e-4f, true}};
  for (size_t n : {size_t{1}, size_t{5}, size_t{1023}, size_t{16776977}}) {
    for (size_t o = 0; o < std::size(options); ++o) {
      std::vector<float> p = Noise(n, 13), want = p;
      std::vector<float> buf(options[o].momentum != 0 ? n : 0, 0.0f),
          want_buf = buf;
      bool have = false;
      for (int step = 0; step < 3; ++step) {
        const std::vector<float> g = Noise(n, 17 + step);
        SgdUpdate(options[o], want.data(), g.data(),
                  want_buf.empty() ? nullptr : want_buf.data(), &have, n);
        runner_->Sgd(&p, g, &buf, options[o], step == 0);
      }
      const std::string shape = std::to_string(n) + " options#" +
                                std::to_string(o) + " after 3 steps";
      ExpectWithin(
          Name("SGD params", shape), p, ToDouble(want),
          [](size_t) { return 0.0; }, "the same fmaf chain");
      if (!buf.empty()) {
        ExpectWithin(
            Name("SGD momentum buffer", shape), buf, ToDouble(want_buf),
            [](size_t) { return 0.0; }, "the same fmaf chain");
      }
    }
  }
}

#ifdef RINGLAB_KERNEL_TEST_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, KernelTest, ::testing::Values("cuda"),
                         [](const auto& info) { return info.param; });
#else
INSTANTIATE_TEST_SUITE_P(Host, KernelTest, ::testing::Values("host"),
                         [](const auto& info) { return info.param; });
#endif

}  // namespace
}  // namespace ringlab::nn
