// Where a job's ranks sit, for the hierarchical backend: its hosts in the
// order of their first rank, each rank's host and place on it (its local
// index), and who is where. Read from the peers the job gathered once
// (RankContext::peers: the host each rank runs on), so any placement works,
// contiguous (torchrun's, mpirun's by slot, `train --hosts`) or not.
#ifndef RINGLAB_COMM_HIER_TOPOLOGY_H_
#define RINGLAB_COMM_HIER_TOPOLOGY_H_

#include <string>
#include <vector>

#include "comm/peers.h"

namespace ringlab::comm::hier {

struct Topology {
  int hosts = 1;           // H
  int ranks_per_host = 1;  // G
  int host = 0;            // this rank's
  int local = 0;           // this rank's index among its host's ranks
  // rank_at[h][l]: the rank at local index l on host h.
  std::vector<std::vector<int>> rank_at;

  // The ranks of this rank's host, by local index; those with this rank's
  // local index, by host.
  std::vector<int> HostGroup() const { return rank_at[host]; }
  std::vector<int> CrossGroup() const;
};

// Throws std::invalid_argument ("hier needs as many ranks on every host
// ...") where the hosts hold different numbers of ranks.
Topology TopologyOf(const std::vector<PeerInfo>& peers, int rank);

}  // namespace ringlab::comm::hier

#endif  // RINGLAB_COMM_HIER_TOPOLOGY_H_
