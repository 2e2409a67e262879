// Runs a test body in world_size real processes that find each other through
// a TcpStore, as ranks of a job do. Used by the comm tests (CPU and GPU) to
// exercise collectives, faults and kills with separate address spaces. Bodies
// run in forked children: they report failure by throwing (the message is
// captured in RankResult::output), not with gtest assertions.
#ifndef RINGLAB_COMM_TESTING_MULTI_PROCESS_H_
#define RINGLAB_COMM_TESTING_MULTI_PROCESS_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::comm::testing {

struct RankResult {
  int rank = 0;
  int exit_code = -1;   // -1 when killed by a signal
  int term_signal = 0;  // 0 when it exited
  std::string output;   // the child's stderr and stdout, interleaved
};

// Starts a TcpStoreServer in the parent (loopback), forks world_size children;
// each connects a TcpStore client, builds RankContext{rank, world_size,
// local_rank = rank, &store, the store's secret} (hosts unknown) and calls
// body(context). A child exits 0 when
// body returns and 1 after printing the exception's what() when it throws.
// The parent waits up to `timeout`, then SIGKILLs the rest (their term_signal
// says so), and returns one result per rank, in rank order. Does not touch
// CUDA in the parent.
std::vector<RankResult> RunRanks(
    int world_size, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout);

// "rank 0: exit 0\n<output>..." for failure messages.
std::string Describe(const std::vector<RankResult>& results);

}  // namespace ringlab::comm::testing

#endif  // RINGLAB_COMM_TESTING_MULTI_PROCESS_H_
