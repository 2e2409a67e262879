#include "comm/cluster/job_cluster.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "comm/cluster/kernel_config.h"

namespace ringlab::comm::cluster {

std::unique_ptr<EmulatedCluster> CreateJobCluster(
    int ranks, const ClusterRequest& request) {
  const int hosts = request.hosts;
  EmulatedCluster::CheckHostCount(hosts);
  const Link link = ParseLink(request.link, request.link_latency);
  if (hosts == 1) {
    if (!link.unlimited() || link.latency_us > 0) {
      throw std::invalid_argument(
          "--link and --link_latency shape the links between emulated hosts: "
          "give --hosts=2 or more");
    }
    return nullptr;
  }
  if (link.latency_us > 0 && KernelHasNetem() == false) {
    throw std::invalid_argument(
        "--link_latency needs the kernel's netem queueing discipline "
        "(CONFIG_NET_SCH_NETEM), which this kernel's configuration says it "
        "lacks");
  }
  if (ranks % hosts != 0) {
    throw std::invalid_argument(
        "--hosts=" + std::to_string(hosts) + " must divide the " +
        std::to_string(ranks) +
        " ranks evenly (each emulated host holds as many)");
  }
  const std::string why = GainNetworkAdmin();
  if (!why.empty()) throw ClusterError(why);
  return std::make_unique<EmulatedCluster>(hosts, link);
}

int HostOfRank(int rank, int ranks, int hosts) {
  return rank / (ranks / hosts);
}

}  // namespace ringlab::comm::cluster
