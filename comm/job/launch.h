// Starts N ranks of this program on this machine, as
// torch.multiprocessing.spawn does for `--nprocs=N`: each child gets RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a TCP
// store the launcher hosts on loopback, so no two ranks race for the port),
// and RINGLAB_JOB_SECRET, 128 fresh random bits without which the store
// admits nobody;
// their stdout and stderr are forwarded line by line, prefixed "[rank R] ",
// without ever blocking on the launcher's own output (comm/job/output_sink.h:
// a reader that stops reading costs lines, counted, never the job).
// A rank's "error: ..." lines are written once at the end, each distinct text
// once with the count of ranks that said the same (comm/job/rank_errors.h).
// When a rank fails, the others are stopped (SIGTERM, then SIGKILL after a
// grace period) and the launcher reports that rank and returns its status.
#ifndef RINGLAB_COMM_JOB_LAUNCH_H_
#define RINGLAB_COMM_JOB_LAUNCH_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ringlab::comm {
namespace cluster {
class EmulatedCluster;
}
class TcpStoreServer;

struct LaunchOptions {
  // Between SIGTERM and SIGKILL for the ranks still running after a failure.
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  // Run /proc/self/exe (this very binary) rather than searching PATH for
  // argv[0]; argv[0] is still what the children see.
  bool exec_self = true;
  // Extra variables for every child, "NAME=value".
  std::vector<std::string> env;
  // At the end, how long the ranks' last output may take to be written
  // where the launcher's own output goes (a reader that stopped reading
  // does not hold the job's end longer).
  std::chrono::milliseconds output_flush{std::chrono::seconds(5)};
  // Emulated hosts to place the ranks on (comm/cluster/job_cluster.h:
  // contiguously, LOCAL_RANK and LOCAL_WORLD_SIZE per host), the store then
  // listening on host 0's address as on a real cluster; none: every rank on
  // this machine, the store on loopback. Must outlive the call.
  const cluster::EmulatedCluster* cluster = nullptr;
  // Whether the launcher hosts the job's store (ringlab's ranks). False for
  // a program with a store of its own (PyTorch's TCPStore on rank 0): then
  // MASTER_PORT is a port for rank 0 to listen on (on emulated hosts 29500,
  // free in host 0's private namespace; else one the kernel found free),
  // and no job secret is given.
  bool host_store = true;
};

// Runs argv in nprocs processes and waits for all of them. Returns 0 when
// every rank exits 0; otherwise prints a last line naming the failure's
// rank: the error it reported ("error: rank R: ..."), else "error: rank R
// exited with status S" or "... killed by signal N", or the stopped rank its
// peers gave up on; and returns S (128 + N for a
// signal) of the first rank that failed (failures seen together: a signal
// death first, then the lowest rank). SIGINT/SIGTERM to the launcher are
// passed on to the ranks. Throws std::invalid_argument for nprocs < 1 or an
// empty argv, std::runtime_error when a rank cannot be started (after
// stopping and reaping those already started).
int LaunchRanks(int nprocs, const std::vector<std::string>& argv,
                const LaunchOptions& options = {});

// The store a launcher hosts for its ranks, with a fresh job secret: on host
// 0's address of `hosts`, as on a real cluster, or on loopback without
// emulated hosts (LauncherStoreAddress).
std::string LauncherStoreAddress(const cluster::EmulatedCluster* hosts);
std::unique_ptr<TcpStoreServer> StartLauncherStore(
    const cluster::EmulatedCluster* hosts);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_LAUNCH_H_
