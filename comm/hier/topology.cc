#include "comm/hier/topology.h"

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringlab::comm::hier {

std::vector<int> Topology::CrossGroup() const {
  std::vector<int> group;
  for (const std::vector<int>& ranks : rank_at) group.push_back(ranks[local]);
  return group;
}

Topology TopologyOf(const std::vector<PeerInfo>& peers, int rank) {
  Topology t;
  std::map<std::string, int> host_index;
  for (size_t r = 0; r < peers.size(); ++r) {
    auto [it, added] = host_index.emplace(peers[r].host, t.rank_at.size());
    if (added) t.rank_at.emplace_back();
    if (static_cast<int>(r) == rank) {
      t.host = it->second;
      t.local = static_cast<int>(t.rank_at[it->second].size());
    }
    t.rank_at[it->second].push_back(static_cast<int>(r));
  }
  t.hosts = static_cast<int>(t.rank_at.size());
  t.ranks_per_host = t.hosts > 0 ? static_cast<int>(t.rank_at[0].size()) : 1;
  for (const std::vector<int>& ranks : t.rank_at) {
    if (static_cast<int>(ranks.size()) != t.ranks_per_host) {
      std::string counts;
      for (const std::vector<int>& r : t.rank_at) {
        counts += (counts.empty() ? "" : ", ") + std::to_string(r.size());
      }
      throw std::invalid_argument(
          "hier needs as many ranks on every host, but its " +
          std::to_string(t.hosts) + " hosts hold " + counts);
    }
  }
  return t;
}

}  // namespace ringlab::comm::hier
