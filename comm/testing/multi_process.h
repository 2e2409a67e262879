// Runs a test body in world_size real processes that find each other through
// a TcpStore, as ranks of a job do (RunRanks; RunRanksOnHosts with the
// processes on emulated hosts of comm/cluster), or in world_size threads of
// one forked process sharing a LocalStore, as ranks-as-threads jobs do
// (RunThreadRanks). Used by the comm tests (CPU and GPU) to exercise
// collectives, faults and kills. Either way bodies run in a forked child, so
// the test process never touches CUDA; they report failure by throwing (the
// message is captured in RankResult::output), not with gtest assertions.
#ifndef RINGLAB_COMM_TESTING_MULTI_PROCESS_H_
#define RINGLAB_COMM_TESTING_MULTI_PROCESS_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/cluster/emulated_cluster.h"
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
// local_rank = rank, &store, the store's secret, every rank's PeerInfo (as
// a job's rendezvous gathers it)} and calls body(context). A child exits 0 when
// body returns and 1 after printing the exception's what() when it throws.
// The parent waits up to `timeout`, then SIGKILLs the rest (their term_signal
// says so), and returns one result per rank, in rank order. Does not touch
// CUDA in the parent.
// With hosts > 1 (dividing world_size) the ranks are told they run on that
// many hosts, contiguously: each rank's host identity in the peers gets the
// suffix " (suite host h)", as ranks on separate machines would differ;
// data still moves over loopback.
std::vector<RankResult> RunRanks(
    int world_size, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout, int hosts = 1);

// RunRanks with the ranks on `hosts`' emulated hosts for real, contiguously
// (host h holds ranks hG ... hG+G-1, G = world_size / hosts.hosts(), as
// cluster::HostOfRank places them): the store listens on host 0's address,
// inside its network namespace, and each child joins its host's network and
// UTS namespaces (EmulatedCluster::Enter) before it does anything else, so
// that its host name, its host identity in the peers, the address it
// reaches the store from (where gloo then listens) and the link its bytes
// cross are that host's. local_rank is the rank's index on its host. A rank
// that cannot enter its host fails, saying so. std::invalid_argument unless
// the hosts divide world_size.
std::vector<RankResult> RunRanksOnHosts(
    const cluster::EmulatedCluster& hosts, int world_size,
    const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout);

// The same job with the ranks as threads of one forked child
// (comm::RunRankThreads, after comm::PrepareProcessForRankThreads). A rank's
// output is what it printed with RankPrint plus its exception's message
// (rank 0's also holds the child's own stdout and stderr); its exit_code is
// 0 when the body returned and 1 when it threw. A rank still running 30 s
// after another failed gets exit_code 2 ("still running"); when the child
// dies or misses `timeout` (then it is SIGKILLed), every rank without a
// result gets its term_signal.
std::vector<RankResult> RunThreadRanks(
    int world_size, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout);

// Prints a line to stdout or, in a rank thread of RunThreadRanks, into that
// rank's output only (threads share stdout: whose line it was could not be
// told there).
void RankPrint(const std::string& line);

// "rank 0: exit 0\n<output>..." for failure messages.
std::string Describe(const std::vector<RankResult>& results);

// SIGKILLs this process after a random 0-`max_ms` ms, from another thread, so
// that the death lands anywhere in what the calling thread does next: how the
// fault tests kill a rank in the middle of a collective.
void KillSelfSoon(int max_ms);

}  // namespace ringlab::comm::testing

#endif  // RINGLAB_COMM_TESTING_MULTI_PROCESS_H_
