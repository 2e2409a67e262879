// Allreduce with the ranks as threads on one GPU (ipc_ring_threads), as
// Google Benchmark rows that any benchmark binary can register (the
// standalone allreduce_threads_bench does; allreduce_bench can). What a
// one-GPU machine says about the ring and one-shot kernels' speed, next to a
// device floor measured in the same run:
//   allreduce_threads/floor/<bytes>: every rank, at once on its own stream,
//     copies its buffer into a staging one and adds it in (device_floor.h);
//   allreduce_threads/<variant>/<bytes>: one allreduce (sum) of <bytes> over
//     the GPU backend whose ranks are threads (ipc_ring_threads); variants
//     "ipc_ring" (the default tuning) or e.g. "ipc_ring:oneshot=0" (ring
//     only), "ipc_ring:oneshot=1073741824" (one-shot only), also chunk= and
//     buffer= (the ipc_ring.* settings, over options.tuning);
//   allreduce_threads/nccl: an error row saying why it is empty (NCCL
//     refuses two ranks on one GPU).
// Counters, as allreduce_bench's: time_us (per op, the slowest rank's,
// mean over iterations; timed from after a barrier to the op's return,
// host line-up included), algbw_GBps, busbw_GBps (nccl-tests'), wrong (of
// the first, checked op, summed over ranks; inputs are exact-sum integers),
// and xfloor (time over the floor's at that size). Iterations per size are
// fixed (IterationsFor: 256 MiB / 4 per size, 5..cap), so every rank runs the
// same sequence and a run's length is known before it starts.
#ifndef RINGLAB_BENCH_GPU_THREADS_BENCH_H_
#define RINGLAB_BENCH_GPU_THREADS_BENCH_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/tuning.h"

namespace ringlab::bench {

struct ThreadsBenchOptions {
  int ranks = 2;
  std::vector<std::string> variants = {"ipc_ring"};
  int64_t min_bytes = 4;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t max_iterations = 2000;  // per size (IterationsFor's cap)
  double timeout_s = 30;          // every wait of a rank
  bool floor = true;
  int cuda_device = 0;
  // What every variant starts from (binaries: the RINGLAB_* variables,
  // comm::TuningFromEnvironment()).
  comm::BackendTuning tuning;
};

// The rows options describe, in the order Register adds them, each with its
// iteration count: for a plan printed before anything runs (no CUDA).
// Throws std::runtime_error for a variant it cannot parse.
std::vector<std::pair<std::string, int64_t>> ThreadsBenchPlan(
    const ThreadsBenchOptions& options);

class ThreadsBench {
 public:
  // Starts options.ranks rank threads, each creating one ipc_ring_threads
  // communicator per variant (call comm::PrepareProcessForRankThreads()
  // before the process first uses CUDA). Throws std::runtime_error when they
  // cannot start (e.g. no GPU), with the ranks' reasons, or for a variant it
  // cannot parse.
  explicit ThreadsBench(ThreadsBenchOptions options);
  // Destroys the communicators on their own threads (they wait for each
  // other before freeing what peers read).
  ~ThreadsBench();
  ThreadsBench(const ThreadsBench&) = delete;
  ThreadsBench& operator=(const ThreadsBench&) = delete;

  // Registers the rows with Google Benchmark: at every size the floor
  // first, then every variant; then the nccl row. Keep this object alive
  // until benchmark::RunSpecifiedBenchmarks has returned.
  void Register();
  // nccl-tests-style tables of what ran: per variant, size, count, time,
  // algbw, busbw, #wrong, floor time and xfloor.
  void PrintTables(std::FILE* out) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The whole run: says what it runs on stderr, registers the rows, runs
// every benchmark registered (Google Benchmark's flags apply), prints the
// tables. Throws std::runtime_error without a GPU.
int RunThreadsBench(const ThreadsBenchOptions& options);

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_GPU_THREADS_BENCH_H_
