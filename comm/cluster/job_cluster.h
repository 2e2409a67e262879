// The cluster a job asks for (`--hosts=H --link=RATE --link_latency=D`) and
// where its ranks go on it: contiguously, as torchrun's and mpirun's by-slot
// placement put them, host h holding ranks hG ... hG+G-1 for G = N / H. The
// flags are checked here, once, for every binary that takes them (train,
// allreduce_bench, the experiments).
#ifndef RINGLAB_COMM_CLUSTER_JOB_CLUSTER_H_
#define RINGLAB_COMM_CLUSTER_JOB_CLUSTER_H_

#include <memory>
#include <string>

#include "comm/cluster/emulated_cluster.h"

namespace ringlab::comm::cluster {

struct ClusterRequest {
  int hosts = 1;
  std::string link = "unlimited";
  std::string link_latency;
};

// The emulated hosts for a job of `ranks` ranks; nullptr for one host (the
// machine itself). Throws std::invalid_argument for flags that do not fit
// (H outside [1, 64], N not a multiple of H, a link without hosts to join)
// and ClusterError when the hosts cannot be made. Call it while the process
// has one thread (GainNetworkAdmin).
std::unique_ptr<EmulatedCluster> CreateJobCluster(
    int ranks, const ClusterRequest& request);

// The host of `rank` among `ranks` on `hosts` hosts, contiguously.
int HostOfRank(int rank, int ranks, int hosts);

}  // namespace ringlab::comm::cluster

#endif  // RINGLAB_COMM_CLUSTER_JOB_CLUSTER_H_
