// on_hosts: any program's ranks on emulated hosts, as torchrun starts them
// on real ones. It makes the cluster (--hosts, --link, --link_latency:
// comm/cluster), starts --nprocs copies of the command, placed contiguously,
// each inside its host with torchrun's variables (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR = host 0's address, MASTER_PORT
// 29500) and GLOO_SOCKET_IFNAME=eth0 (so that a PyTorch rank's gloo binds its
// host's address), forwards their output prefixed "[rank R] " and stops them
// all when one fails, as `train` does its own ranks. Rank 0 of the program
// hosts its store (PyTorch's TCPStore), as under torchrun.
//   on_hosts --nprocs=2 --hosts=2 --link=1gbit -- /usr/bin/python3 prog.py
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "comm/cluster/cluster_flags.h"
#include "comm/cluster/job_cluster.h"
#include "comm/job/launch.h"

DEFINE_int32(nprocs, 2, "ranks to start");

namespace {

int Main(int argc, char** argv) {
  int split = 1;
  while (split < argc && std::strcmp(argv[split], "--") != 0) ++split;
  ringlab::cli::ParseFlagsOrExit(
      split, argv,
      "starts a program's ranks on emulated hosts, torchrun-style: on_hosts "
      "[flags] -- COMMAND [ARGS...]",
      {"comm/"});
  if (split + 1 >= argc) {
    ringlab::cli::ExitWithUsageError(
        "give the command after --: on_hosts --nprocs=2 --hosts=2 -- CMD");
  }
  if (FLAGS_nprocs < 1 || FLAGS_nprocs > 1024) {
    ringlab::cli::ExitWithUsageError("--nprocs must be in [1, 1024]");
  }
  std::unique_ptr<ringlab::comm::cluster::EmulatedCluster> cluster;
  try {
    cluster = ringlab::comm::cluster::CreateJobCluster(
        FLAGS_nprocs, ringlab::comm::cluster::ClusterRequestFromFlags());
  } catch (const std::invalid_argument& e) {
    ringlab::cli::ExitWithUsageError(e.what());
  }
  ringlab::comm::LaunchOptions options;
  options.exec_self = false;
  options.host_store = false;
  options.cluster = cluster.get();
  if (cluster != nullptr && std::getenv("GLOO_SOCKET_IFNAME") == nullptr) {
    options.env.push_back(std::string("GLOO_SOCKET_IFNAME=") +
                          ringlab::comm::cluster::EmulatedCluster::kInterface);
  }
  return ringlab::comm::LaunchRanks(
      FLAGS_nprocs, std::vector<std::string>(argv + split + 1, argv + argc),
      options);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
