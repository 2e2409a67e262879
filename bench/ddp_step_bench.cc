// Time per training step of the seed example's run (Net 10,5,2, batch 50 per
// rank, SGD 0.01, 2 ranks) for each synchroniser over shm_ring, next to a
// single process's step: what synchronising gradients costs. Launches its own
// ranks
// (--nprocs, default 2; --comm, default shm_ring); rank 0 reports. Compare with
// PyTorch DDP in the same session with bench/ddp_vs_pytorch.sh.
//
// Each iteration: a barrier (untimed), then forward + backward + synchronise +
// SGD, timed on every rank; the reported (manual) time is rank 0's, whose
// allreduce cannot finish before every rank's has started.
#include <benchmark/benchmark.h>
#include <gflags/gflags.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bench/benchmark_flags.h"
#include "cli/usage_error.h"
#include "comm/backend.h"
#include "comm/communicator.h"
#include "comm/job/launch.h"
#include "comm/job/rendezvous.h"
#include "comm/tuning_env.h"
#include "nn/init.h"
#include "nn/mlp.h"
#include "sync/synchronizer.h"
#include "torch_compat/generator.h"
#include "train/dataset.h"
#include "train/mlp_buffers.h"

DEFINE_int32(nprocs, 2, "ranks to launch (this machine, over --comm)");
DEFINE_string(comm, "shm_ring", "the communicator the synchronisers use");

namespace ringlab::bench {
namespace {

constexpr int kIterations = 2000;

comm::Communicator* g_comm = nullptr;

struct Job {
  nn::MlpLayout layout{{10, 5, 2}};
  std::unique_ptr<nn::Mlp> model;
  train::Dataset data;
  std::vector<int64_t> labels;

  Job() {
    torch_compat::TorchGenerator generator(0);
    std::vector<float> params(layout.num_params());
    nn::InitLikeTorch(layout, generator, params.data());
    data = train::MakeSyntheticDataset(50, 10, 2, generator);
    model = nn::CreateMlp(nn::Device::kCpu, layout);
    model->SetParams(params.data());
  }
};

// sync_name null: one process, no synchroniser.
void RunSteps(benchmark::State& state, const char* sync_name, int period) {
  Job job;
  train::MlpBuffers buffers(*job.model);
  trace::Tracer tracer(/*enabled=*/false, 0);
  sync::OptionValues options;
  std::unique_ptr<sync::Synchronizer> synchronizer;
  if (sync_name != nullptr) {
    std::map<std::string, std::string> given;
    if (period > 1) given["avg_period"] = std::to_string(period);
    options = sync::ParseSyncOptions(sync_name, given);
    synchronizer =
        sync::CreateSync(sync_name, {*g_comm, buffers, options, tracer});
    synchronizer->Start(buffers, /*resumed=*/false);
  }
  sync::Synchronizer* sync = synchronizer.get();
  std::optional<train::LayerToTensorObserver> adapted;
  const nn::SgdOptions sgd{0.01f};
  int64_t step = 0;
  for (auto _ : state) {
    sync::GradObserver* reducer =
        sync ? sync->backward_observer(step) : nullptr;
    nn::BackwardObserver* observer =
        reducer ? &adapted.emplace(*reducer) : nullptr;
    if (g_comm != nullptr && sync != nullptr) g_comm->Barrier();
    const auto start = std::chrono::steady_clock::now();
    job.model->ForwardBackward(job.data.x.data(), job.data.y.data(), 50,
                               observer);
    if (sync != nullptr) sync->AfterBackward(buffers, step);
    job.model->SgdStep(sgd);
    if (sync != nullptr) sync->AfterStep(buffers, step);
    ++step;
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  state.SetLabel(sync ? std::string(sync_name) + " over " + g_comm->backend() +
                            ", " + std::to_string(g_comm->world_size()) +
                            " ranks"
                      : "one process, no communication");
}

void BM_SingleProcessStep(benchmark::State& state) {
  RunSteps(state, nullptr, 0);
}

void BM_DdpStep(benchmark::State& state, const char* sync_name, int period) {
  RunSteps(state, sync_name, period);
}

void RegisterRows() {
  benchmark::RegisterBenchmark("BM_SingleProcessStep", BM_SingleProcessStep)
      ->UseManualTime()
      ->Iterations(kIterations)
      ->Unit(benchmark::kMicrosecond);
  for (const auto& [name, sync, period] :
       {std::tuple{"BM_DdpStep/allreduce", "allreduce", 1},
        std::tuple{"BM_DdpStep/param_avg_K4", "param_avg", 4},
        std::tuple{"BM_DdpStep/none", "none", 1}}) {
    benchmark::RegisterBenchmark(name, BM_DdpStep, sync, period)
        ->UseManualTime()
        ->Iterations(kIterations)
        ->Unit(benchmark::kMicrosecond);
  }
}

class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace
}  // namespace ringlab::bench

int main(int argc, char** argv) {
  using namespace ringlab;
  bench::ParseBenchmarkFlagsOrExit(
      argc, argv,
      "time per training step of the seed example's run (experiments/seed_ddp) "
      "for each synchroniser, "
      "next to a single process's step");
  if (FLAGS_nprocs < 1 || FLAGS_nprocs > 1024) {
    cli::ExitWithUsageError("--nprocs must be in [1, 1024]");
  }
  comm::CommOptions options;
  try {
    comm::BackendNamed(FLAGS_comm);                  // before any rank starts
    options.tuning = comm::TuningFromEnvironment();  // RINGLAB_* variables
  } catch (const std::invalid_argument& e) {
    cli::ExitWithUsageError(e.what());
  }
  try {
    if (!comm::InLaunchedJob()) {
      comm::LaunchOptions launch;
      // One BLAS thread per rank, as the trainer's launcher sets it.
      launch.env.push_back("OPENBLAS_NUM_THREADS=1");
      return comm::LaunchRanks(
          FLAGS_nprocs, std::vector<std::string>(argv, argv + argc), launch);
    }
    const auto rendezvous = comm::Rendezvous::FromEnv(std::chrono::seconds(60));
    auto communicator =
        comm::CreateCommunicator(FLAGS_comm, rendezvous->context(), options);
    bench::g_comm = communicator.get();
    bench::RegisterRows();
    if (communicator->rank() == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      bench::SilentReporter silent;
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
    communicator->Barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
