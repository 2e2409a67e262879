// Allreduce with the ranks as threads on one GPU (ipc_ring_threads) against a
// device copy-and-add floor measured in the same run: the rows and counters
// of gpu_threads_bench.h, then nccl-tests-style tables.
//   bazel-bin/bench/allreduce_threads_bench --ranks=4 --max_bytes=268435456
//   ... --variants=ipc_ring,ipc_ring:oneshot=0,ipc_ring:oneshot=1073741824
//   ... --plan      (the rows and their iterations; touches no GPU)
// Google Benchmark's flags (--benchmark_filter, --benchmark_out=...) apply.
#include <gflags/gflags.h>

#include <cstdio>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/benchmark_flags.h"
#include "bench/gpu_threads_bench.h"
#include "cli/usage_error.h"
#include "comm/job/rank_threads.h"
#include "comm/tuning_env.h"

DEFINE_int32(ranks, 2, "ranks, each a thread with its own stream");
DEFINE_string(variants, "ipc_ring",
              "comma-separated: ipc_ring[:oneshot=B][:chunk=B][:buffer=B]");
DEFINE_int64(min_bytes, 4, "smallest message");
DEFINE_int64(max_bytes, int64_t{256} << 20,
             "largest message (sizes go by powers of 4)");
DEFINE_int64(iters_cap, 2000, "most iterations of any size");
DEFINE_double(timeout_s, 30, "deadline of every wait of a rank");
DEFINE_bool(floor, true, "also measure the device copy-and-add floor");
DEFINE_int32(cuda_device, 0, "the one GPU all ranks share");
DEFINE_bool(plan, false,
            "print the rows and their iterations, then exit (no GPU needed)");

namespace ringlab::bench {
namespace {

int Main(int argc, char** argv) {
  // Before anything starts CUDA: as many hardware queues as spinning ranks.
  comm::PrepareProcessForRankThreads();
  ParseBenchmarkFlagsOrExit(
      argc, argv,
      "allreduce with the ranks as threads of this process on one GPU "
      "(ipc_ring_threads), against a device copy-and-add floor");
  ThreadsBenchOptions options;
  options.ranks = FLAGS_ranks;
  options.variants.clear();
  std::stringstream variants(FLAGS_variants);
  for (std::string v; std::getline(variants, v, ',');) {
    if (!v.empty()) options.variants.push_back(v);
  }
  options.min_bytes = FLAGS_min_bytes;
  options.max_bytes = FLAGS_max_bytes;
  options.max_iterations = FLAGS_iters_cap;
  options.timeout_s = FLAGS_timeout_s;
  options.floor = FLAGS_floor;
  options.cuda_device = FLAGS_cuda_device;
  try {
    options.tuning = comm::TuningFromEnvironment();
  } catch (const std::invalid_argument& e) {
    cli::ExitWithUsageError(e.what());
  }
  if (options.ranks < 1 || options.variants.empty() || options.min_bytes < 4 ||
      options.max_bytes < options.min_bytes || options.max_iterations < 1 ||
      !(options.timeout_s > 0)) {
    cli::ExitWithUsageError(
        "need --ranks >= 1, a variant, 4 <= --min_bytes <= --max_bytes, "
        "--iters_cap >= 1 and --timeout_s > 0");
  }
  std::vector<std::pair<std::string, int64_t>> plan;
  try {
    plan = ThreadsBenchPlan(options);
  } catch (const std::exception& e) {
    cli::ExitWithUsageError(e.what());
  }
  if (FLAGS_plan) {
    int64_t total = 0;
    for (const auto& [row, iterations] : plan) {
      std::printf("%s %lld\n", row.c_str(), static_cast<long long>(iterations));
      total += iterations;
    }
    std::printf("total iterations %lld\n", static_cast<long long>(total));
    return 0;
  }
  return RunThreadsBench(options);
}

}  // namespace
}  // namespace ringlab::bench

int main(int argc, char** argv) {
  try {
    return ringlab::bench::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
