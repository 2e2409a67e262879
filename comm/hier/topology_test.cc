#include "comm/hier/topology.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace ringlab::comm::hier {
namespace {

std::vector<PeerInfo> OnHosts(const std::vector<std::string>& hosts) {
  std::vector<PeerInfo> peers;
  for (const std::string& host : hosts) peers.push_back({host, 1, 1, ""});
  return peers;
}

TEST(TopologyTest, ContiguousPlacement) {
  const auto peers = OnHosts({"a", "a", "b", "b"});
  const Topology t = TopologyOf(peers, 3);
  EXPECT_EQ(t.hosts, 2);
  EXPECT_EQ(t.ranks_per_host, 2);
  EXPECT_EQ(t.host, 1);
  EXPECT_EQ(t.local, 1);
  EXPECT_EQ(t.HostGroup(), (std::vector<int>{2, 3}));
  EXPECT_EQ(t.CrossGroup(), (std::vector<int>{1, 3}));
}

// Round-robin placement (mpirun --map-by node): hosts in the order of their
// first rank, local indices in rank order.
TEST(TopologyTest, AnyPlacement) {
  const auto peers = OnHosts({"b", "a", "b", "a", "b", "a"});
  const Topology t = TopologyOf(peers, 4);
  EXPECT_EQ(t.hosts, 2);
  EXPECT_EQ(t.ranks_per_host, 3);
  EXPECT_EQ(t.host, 0);  // "b", rank 0's
  EXPECT_EQ(t.local, 2);
  EXPECT_EQ(t.HostGroup(), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(t.CrossGroup(), (std::vector<int>{4, 5}));
}

TEST(TopologyTest, OneHostAndOneRankPerHost) {
  EXPECT_EQ(TopologyOf(OnHosts({"a", "a", "a"}), 1).CrossGroup(),
            (std::vector<int>{1}));
  EXPECT_EQ(TopologyOf(OnHosts({"a", "b", "c"}), 1).HostGroup(),
            (std::vector<int>{1}));
}

TEST(TopologyTest, UnevenHostsAreRefused) {
  try {
    TopologyOf(OnHosts({"a", "a", "b"}), 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "hier needs as many ranks on every host, but its 2 hosts "
                 "hold 2, 1");
  }
}

}  // namespace
}  // namespace ringlab::comm::hier
