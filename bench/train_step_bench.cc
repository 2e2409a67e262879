// One training step (ForwardBackward + SgdStep) of the MLP, per backend: the
// document's 10,5,2 net at batch 50 (latency-bound; CPU in both GEMM modes) and
// a 1024,4096,4096,10 net at batch 256 (compute-bound). CUDA cases report an
// error instead of a time where the CUDA backend is not linked or no device
// is usable. Run from bazel-bin with e.g. --benchmark_min_time=0.2.
#include <benchmark/benchmark.h>

#include <exception>
#include <memory>
#include <random>
#include <vector>

#include "bench/benchmark_flags.h"
#include "nn/cpu_mlp.h"
#include "nn/init.h"
#include "nn/mlp.h"

namespace ringlab::nn {
namespace {

struct Problem {
  MlpLayout layout;
  std::vector<float> params, x;
  std::vector<int64_t> labels;
  int batch;
};

Problem MakeProblem(const char* widths, int batch) {
  Problem p{MlpLayout::Parse(widths), {}, {}, {}, batch};
  p.params.resize(p.layout.num_params());
  torch_compat::TorchGenerator gen(0);
  InitLikeTorch(p.layout, gen, p.params.data());
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0, 1);
  p.x.resize(static_cast<size_t>(batch) * p.layout.in_features());
  for (float& v : p.x) v = n(rng);
  p.labels.resize(batch);
  for (int j = 0; j < batch; ++j) p.labels[j] = j % p.layout.num_classes();
  return p;
}

void RunSteps(benchmark::State& state, Mlp* mlp, const Problem& p) {
  mlp->SetParams(p.params.data());
  SgdOptions sgd;
  sgd.lr = 1e-3f;
  float loss = 0;
  for (auto _ : state) {
    loss = mlp->ForwardBackward(p.x.data(), p.labels.data(), p.batch);
    mlp->SgdStep(sgd);  // CUDA: synchronises, so the time covers the step
  }
  benchmark::DoNotOptimize(loss);
  state.SetItemsProcessed(state.iterations() * p.batch);
  state.counters["params"] = static_cast<double>(p.layout.num_params());
}

void BM_CpuStep(benchmark::State& state, const char* widths, int batch,
                GemmMode mode) {
  const Problem p = MakeProblem(widths, batch);
  auto mlp = CreateCpuMlp(p.layout, CpuMlpOptions{mode});
  RunSteps(state, mlp.get(), p);
}

void BM_CudaStep(benchmark::State& state, const char* widths, int batch) {
  const Problem p = MakeProblem(widths, batch);
  std::unique_ptr<Mlp> mlp;
  try {
    mlp = CreateMlp(Device::kCuda, p.layout);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    for (auto _ : state) {
    }
    return;
  }
  RunSteps(state, mlp.get(), p);
}

// The ordered loop on the big net would take seconds per step: not run.
BENCHMARK_CAPTURE(BM_CpuStep, net_10_5_2_b50_ordered, "10,5,2", 50,
                  GemmMode::kOrdered)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CpuStep, net_10_5_2_b50_blas, "10,5,2", 50,
                  GemmMode::kBlas)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CpuStep, net_1024_4096_4096_10_b256_blas,
                  "1024,4096,4096,10", 256, GemmMode::kBlas)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_CudaStep, net_10_5_2_b50, "10,5,2", 50)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_CudaStep, net_1024_4096_4096_10_b256, "1024,4096,4096,10",
                  256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace ringlab::nn

int main(int argc, char** argv) {
  ringlab::bench::ParseBenchmarkFlagsOrExit(
      argc, argv,
      "one training step of the MLP per backend (CPU, and CUDA where it is "
      "built and a device is usable)");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
