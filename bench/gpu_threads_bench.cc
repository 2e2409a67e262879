#include "bench/gpu_threads_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>

#include "bench/backend_variants.h"
#include "bench/device_floor.h"
#include "bench/rank_thread_pool.h"
#include "bench/sweep.h"
#include "benchmark/benchmark.h"
#include "comm/backend.h"
#include "comm/communicator.h"
#include "comm/job/rank_threads.h"
#include "comm/store/local_store.h"
#include "comm/tuning_env.h"
#include "cuda/device.h"
#include "cuda/error.h"

namespace ringlab::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kNcclWhy[] =
    "not run: NCCL refuses two ranks on one GPU (\"Duplicate GPU detected\") "
    "and has no ranks-as-threads mode; allreduce_bench --backends=nccl runs "
    "it at world size 1, or one process per GPU";

// The backend the rows run: the one this binary has whose ranks are threads
// on a GPU (its description says so).
const comm::BackendDescription& ThreadsBackend() {
  for (const comm::BackendDescription* d : comm::RegisteredBackends()) {
    if (d->launch == comm::RankLaunch::kThreads &&
        d->memory == comm::MemoryKind::kDevice) {
      return *d;
    }
  }
  throw std::runtime_error("no GPU backend with ranks as threads is linked in");
}

// "ipc_ring:oneshot=0:chunk=65536" -> base with those settings, read as the
// RINGLAB_* variables are (bench/backend_variants.h). A variant names the
// threads backend or the family of its settings (ipc_ring.*).
comm::BackendTuning ThreadsVariantTuning(const std::string& spec,
                                         const comm::BackendTuning& base) {
  const comm::BackendDescription& backend = ThreadsBackend();
  const std::string family = SplitList(spec, ':').empty()
                                 ? std::string()
                                 : SplitList(spec, ':').front();
  bool known = family == backend.name;
  std::string options;
  for (const comm::TuningSetting& s : backend.tuning) {
    known = known || s.name.rfind(family + ".", 0) == 0;
    options += "[:" + s.option + "=N]";
  }
  if (!known) {
    throw std::runtime_error("unknown threads variant '" + spec + "' (" +
                             backend.name + options + ")");
  }
  try {
    return VariantTuning(spec, base);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

std::string RowName(const std::string& label, int64_t bytes) {
  return "allreduce_threads/" + label + "/" + std::to_string(bytes);
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> ThreadsBenchPlan(
    const ThreadsBenchOptions& o) {
  for (const std::string& v : o.variants) {
    ThreadsVariantTuning(v, o.tuning);  // throws if bad
  }
  std::vector<std::pair<std::string, int64_t>> rows;
  for (int64_t bytes : SweepSizes(o.min_bytes, o.max_bytes)) {
    const int64_t iterations = IterationsFor(bytes, o.max_iterations);
    if (o.floor) rows.emplace_back(RowName("floor", bytes), iterations);
    for (const std::string& v : o.variants) {
      rows.emplace_back(RowName(v, bytes), iterations);
    }
  }
  rows.emplace_back("allreduce_threads/nccl", 0);
  return rows;
}

class ThreadsBench::Impl {
 public:
  explicit Impl(ThreadsBenchOptions options)
      : o_(std::move(options)),
        pool_(o_.ranks, std::chrono::milliseconds(
                            static_cast<int64_t>(o_.timeout_s * 1000) + 5000)),
        ranks_(o_.ranks) {
    try {
      pool_.Run([&](int r) {
        ranks_[r].comms.resize(o_.variants.size());
        cuda::SelectDevice(o_.cuda_device);
        cuda::Check(
            cudaStreamCreateWithFlags(&ranks_[r].stream, cudaStreamNonBlocking),
            "cudaStreamCreate");
        return 0.0;
      });
      for (size_t v = 0; v < o_.variants.size(); ++v) Create(v);
    } catch (...) {
      ShutDown();
      throw;
    }
  }

  ~Impl() { ShutDown(); }

  void Register() {
    for (int64_t bytes : SweepSizes(o_.min_bytes, o_.max_bytes)) {
      const int64_t iterations = IterationsFor(bytes, o_.max_iterations);
      if (o_.floor) {
        benchmark::RegisterBenchmark(
            RowName("floor", bytes).c_str(),
            [this, bytes](benchmark::State& s) { Floor(s, bytes); })
            ->UseManualTime()
            ->Iterations(iterations)
            ->Unit(benchmark::kMicrosecond);
      }
      for (size_t v = 0; v < o_.variants.size(); ++v) {
        benchmark::RegisterBenchmark(
            RowName(o_.variants[v], bytes).c_str(),
            [this, v, bytes](benchmark::State& s) { AllReduce(s, v, bytes); })
            ->UseManualTime()
            ->Iterations(iterations)
            ->Unit(benchmark::kMicrosecond);
      }
    }
    benchmark::RegisterBenchmark("allreduce_threads/nccl",
                                 [](benchmark::State& s) {
                                   s.SkipWithError(kNcclWhy);
                                   for (auto _ : s) {
                                   }
                                 })
        ->Iterations(1);
  }

  void PrintTables(std::FILE* out) const;

 private:
  struct Rank {
    cudaStream_t stream = nullptr;
    std::vector<std::unique_ptr<comm::Communicator>> comms;  // per variant
    float* a = nullptr;  // the op's buffer (the floor's input)
    float* b = nullptr;  // the floor's staging buffer
  };
  struct Result {
    double seconds = 0;
    int64_t wrong = 0;
  };

  // Communicators and streams are destroyed on their own threads, all ranks
  // at once (a communicator waits for its peers to leave before freeing).
  void ShutDown() noexcept {
    try {
      pool_.Run([&](int r) {
        ranks_[r].comms.clear();
        if (ranks_[r].stream != nullptr) cudaStreamDestroy(ranks_[r].stream);
        ranks_[r].stream = nullptr;
        return 0.0;
      });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "allreduce_threads: shutting down: %s\n", e.what());
    }
  }

  // The variant's communicator on every rank, with the variant's tuning.
  void Create(size_t v) {
    comm::CommOptions options;
    options.tuning = ThreadsVariantTuning(o_.variants[v], o_.tuning);
    options.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(o_.timeout_s * 1000));
    options.join_timeout =
        std::max(options.timeout, std::chrono::milliseconds(30000));
    options.cuda_device = o_.cuda_device;
    const std::string& backend = ThreadsBackend().name;
    pool_.Run([&](int r) {
      ranks_[r].comms[v] = comm::CreateCommunicator(
          backend, comm::RankThreadContext(r, o_.ranks, &store_), options);
      return 0.0;
    });
  }

  // Buffers of `count` floats on every rank (no kernel runs meanwhile, so
  // cudaMalloc's device-wide synchronisation cannot meet a spinning peer).
  void Allocate(size_t count, bool staging) {
    pool_.Run([&](int r) {
      const size_t bytes = std::max<size_t>(count, 1) * sizeof(float);
      cuda::Check(cudaMalloc(reinterpret_cast<void**>(&ranks_[r].a), bytes),
                  "cudaMalloc");
      if (staging) {
        cuda::Check(cudaMalloc(reinterpret_cast<void**>(&ranks_[r].b), bytes),
                    "cudaMalloc");
      }
      std::vector<float> host(count);
      for (size_t i = 0; i < count; ++i) host[i] = ExactSumInput(r, i);
      cuda::Check(cudaMemcpy(ranks_[r].a, host.data(), count * sizeof(float),
                             cudaMemcpyHostToDevice),
                  "cudaMemcpy H2D");
      return 0.0;
    });
  }
  void Free() {
    pool_.Run([&](int r) {
      cuda::Check(cudaFree(ranks_[r].a), "cudaFree");
      cuda::Check(cudaFree(ranks_[r].b), "cudaFree");
      ranks_[r].a = ranks_[r].b = nullptr;
      return 0.0;
    });
  }

  // Every rank's element errors in the first op, which is checked.
  int64_t CheckedOp(size_t v, size_t count) {
    const auto wrong = pool_.Run([&](int r) {
      comm::Communicator& c = *ranks_[r].comms[v];
      c.AllReduce(ranks_[r].a, count, comm::ReduceOp::kSum);
      std::vector<float> host(count);
      cuda::Check(cudaMemcpy(host.data(), ranks_[r].a, count * sizeof(float),
                             cudaMemcpyDeviceToHost),
                  "cudaMemcpy D2H");
      double bad = 0;
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int q = 0; q < o_.ranks; ++q) want += ExactSumInput(q, i);
        bad += host[i] != want;
      }
      return bad;
    });
    double total = 0;
    for (double w : wrong) total += w;
    return static_cast<int64_t>(total);
  }

  // Runs the timed loop: each iteration, every rank's op timed by `op`
  // (seconds), the slowest rank's time is the iteration's.
  double Loop(benchmark::State& state, const std::function<double(int)>& op) {
    double total = 0;
    for (auto _ : state) {
      const std::vector<double> times = pool_.Run(op);
      const double t = *std::max_element(times.begin(), times.end());
      state.SetIterationTime(t);
      total += t;
    }
    return total / static_cast<double>(state.iterations());
  }

  bool SkipIfBroken(benchmark::State& state) {
    if (broken_.empty()) return false;
    state.SkipWithError(
        ("not run after an earlier failure: " + broken_).c_str());
    for (auto _ : state) {
    }
    return true;
  }

  void Floor(benchmark::State& state, int64_t bytes) {
    if (SkipIfBroken(state)) return;
    const size_t count = static_cast<size_t>(bytes) / sizeof(float);
    try {
      Allocate(count, /*staging=*/true);
      const double seconds = Loop(state, [&](int r) {
        pool_.Barrier(r);
        const auto t0 = Clock::now();
        cuda::Check(LaunchDeviceFloor(ranks_[r].a, ranks_[r].b, count,
                                      ranks_[r].stream),
                    "device floor launch");
        cuda::Check(cudaStreamSynchronize(ranks_[r].stream), "device floor");
        return std::chrono::duration<double>(Clock::now() - t0).count();
      });
      Free();
      state.counters["time_us"] = seconds * 1e6;
      results_[{"floor", bytes}] = {seconds, 0};
    } catch (const std::exception& e) {
      broken_ = e.what();
      state.SkipWithError(broken_.c_str());
    }
  }

  void AllReduce(benchmark::State& state, size_t v, int64_t bytes) {
    if (SkipIfBroken(state)) return;
    const size_t count = static_cast<size_t>(bytes) / sizeof(float);
    try {
      Allocate(count, /*staging=*/false);
      const int64_t wrong = CheckedOp(v, count);
      const double seconds = Loop(state, [&](int r) {
        comm::Communicator& c = *ranks_[r].comms[v];
        c.Barrier();
        const auto t0 = Clock::now();
        c.AllReduce(ranks_[r].a, count, comm::ReduceOp::kSum);
        return std::chrono::duration<double>(Clock::now() - t0).count();
      });
      Free();
      const int n = o_.ranks;
      const double algbw = static_cast<double>(bytes) / seconds / 1e9;
      state.counters["time_us"] = seconds * 1e6;
      state.counters["algbw_GBps"] = algbw;
      state.counters["busbw_GBps"] = algbw * 2.0 * (n - 1) / n;
      state.counters["wrong"] = static_cast<double>(wrong);
      const auto floor = results_.find({"floor", bytes});
      if (floor != results_.end()) {
        state.counters["xfloor"] = seconds / floor->second.seconds;
      }
      state.SetBytesProcessed(bytes * state.iterations());
      results_[{o_.variants[v], bytes}] = {seconds, wrong};
    } catch (const std::exception& e) {
      // Buffers stay allocated: a failed op's kernel may not have stopped.
      broken_ = e.what();
      state.SkipWithError(broken_.c_str());
    }
  }

  const ThreadsBenchOptions o_;
  RankThreadPool pool_;
  comm::LocalStore store_;
  std::vector<Rank> ranks_;
  std::map<std::pair<std::string, int64_t>, Result> results_;
  std::string broken_;  // the first failure: later rows are not run
};

void ThreadsBench::Impl::PrintTables(std::FILE* out) const {
  const int n = o_.ranks;
  std::fprintf(out,
               "\n# allreduce, ranks as threads on one GPU (ipc_ring_threads): "
               "float, sum, %d ranks; time in us is the slowest rank's, mean "
               "over iterations; floor = every rank's device copy-and-add at "
               "once\n",
               n);
  for (const std::string& v : o_.variants) {
    std::fprintf(out, "\n# variant %s\n", v.c_str());
    std::fprintf(out, "%12s %12s %12s %8s %8s %7s %12s %7s\n", "size(B)",
                 "count", "time(us)", "algbw", "busbw", "#wrong", "floor(us)",
                 "xfloor");
    for (int64_t bytes : SweepSizes(o_.min_bytes, o_.max_bytes)) {
      const auto it = results_.find({v, bytes});
      if (it == results_.end()) continue;
      const double algbw = bytes / it->second.seconds / 1e9;
      const auto f = results_.find({"floor", bytes});
      const double floor_s = f == results_.end() ? 0 : f->second.seconds;
      std::fprintf(out, "%12lld %12lld %12.2f %8.3f %8.3f %7lld %12.2f %7.2f\n",
                   static_cast<long long>(bytes),
                   static_cast<long long>(bytes / 4), it->second.seconds * 1e6,
                   algbw, algbw * 2.0 * (n - 1) / n,
                   static_cast<long long>(it->second.wrong), floor_s * 1e6,
                   floor_s > 0 ? it->second.seconds / floor_s : 0.0);
    }
  }
  std::fprintf(out, "\n# nccl: %s\n", kNcclWhy);
  if (!broken_.empty()) {
    std::fprintf(out, "# stopped after a failure: %s\n", broken_.c_str());
  }
  std::fflush(out);
}

ThreadsBench::ThreadsBench(ThreadsBenchOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ThreadsBench::~ThreadsBench() = default;
void ThreadsBench::Register() { impl_->Register(); }
void ThreadsBench::PrintTables(std::FILE* out) const {
  impl_->PrintTables(out);
}

int RunThreadsBench(const ThreadsBenchOptions& options) {
  ThreadsBench bench(options);
  std::fprintf(stderr,
               "allreduce: %d ranks as threads of one process, on one "
               "GPU; variants:",
               options.ranks);
  for (const std::string& v : options.variants) {
    std::fprintf(stderr, " %s", v.c_str());
  }
  std::fprintf(stderr, "\n");
  bench.Register();
  benchmark::RunSpecifiedBenchmarks();
  bench.PrintTables(stdout);
  benchmark::Shutdown();
  return 0;
}

}  // namespace ringlab::bench
