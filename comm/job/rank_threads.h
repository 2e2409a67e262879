// Runs the ranks of one job as threads of this process, sharing an in-process
// store (LocalStore): how the trainer, the benchmarks and the tests run a
// threads-mode job (ipc_ring_threads: N ranks on one GPU, each with its own
// stream). A rank's failure is its exception; a rank that fails makes the
// others fail by their own deadlines (their collectives see it leave), so
// the runner waits for them only for a bounded time after the first failure.
#ifndef RINGLAB_COMM_JOB_RANK_THREADS_H_
#define RINGLAB_COMM_JOB_RANK_THREADS_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::comm {

struct RankThreadsResult {
  // Per rank: empty when its body returned, else "what()" of its exception.
  std::vector<std::string> errors;
  // Ranks still running `grace` after the first failure. Their threads are
  // detached and may still use what `body` refers to: the caller must end
  // the process (std::_Exit) rather than return from that scope.
  std::vector<int> stuck;
  bool ok() const;
  // "rank 1: <error>\n..." for every failed or stuck rank.
  std::string Describe() const;
};

// Starts world_size threads; thread r calls body(RankContext{r, world_size,
// local_rank = r, &store, peers: this process for every rank}) with one
// LocalStore shared by all. Returns when
// all have returned, or `grace` after the first one failed.
RankThreadsResult RunRankThreads(
    int world_size, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds grace);

// The context of rank `rank` of `world_size` ranks that are threads of this
// process meeting in `store`: every peer is this process, on this host.
RankContext RankThreadContext(int rank, int world_size, Store* store);

// Before the process first uses CUDA, in a process that will run ranks as
// threads on one GPU: lets 32 streams run kernels side by side
// (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default, unless already set), since
// ranks' kernels that wait for each other must never queue behind one
// another in one hardware queue. CUDA-free; has no effect once CUDA runs.
void PrepareProcessForRankThreads();

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_RANK_THREADS_H_
