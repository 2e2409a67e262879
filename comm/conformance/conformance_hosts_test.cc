// The conformance suite (comm/testing/conformance.h) with the ranks on real
// emulated hosts (comm/cluster: network and UTS namespaces joined through a
// switch by 1 Gbit/s links), not only told they are (conformance_test's
// hosts): every case over gloo at 2 hosts x 1 rank and 2 hosts x 2 ranks,
// and over hier (shm_ring inside each host, gloo across) at 2 x 2, each
// rank with its host's name, address and link; the ranks' placement itself;
// and a rank killed in the middle of a collective on either host, the
// survivors on both hosts exiting by themselves, naming it. Each job gets a
// cluster of its own; after it, nothing is left: no process, segment or
// listening port (Leftovers), and none of the cluster's network namespaces
// is still held. Skips, saying why, where this process may not create
// network namespaces or lacks iproute2.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/cluster/emulated_cluster.h"
#include "comm/cluster/job_cluster.h"
#include "comm/cluster/link.h"
#include "comm/cluster/namespaces_in_use.h"
#include "comm/communicator.h"
#include "comm/testing/conformance.h"
#include "comm/testing/leftovers.h"
#include "comm/testing/multi_process.h"
#include "gtest/gtest.h"

namespace ringlab::comm::testing {
namespace {

using cluster::EmulatedCluster;
using std::chrono::milliseconds;

constexpr int kHosts = 2;
// Shaped, as a cluster's links are: the bytes pass a token bucket each way.
constexpr char kLink[] = "1gbit";

// Why this process cannot build emulated hosts, found once in main while it
// has one thread (GainNetworkAdmin may make it root of a user namespace);
// "" when it can.
std::string& NoHosts() {
  static std::string why;
  return why;
}

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

class OnHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NoHosts().empty()) GTEST_SKIP() << "skipped: " << NoHosts();
  }

  // A job of `world` ranks on a cluster of kHosts hosts made for it alone,
  // which is gone when this returns; then nothing of the job may be left.
  static std::vector<RankResult> RunOnHosts(
      int world, const std::function<void(const RankContext&)>& body,
      milliseconds timeout) {
    std::set<ino_t> made;
    std::vector<RankResult> results;
    {
      EmulatedCluster hosts(kHosts, cluster::ParseLink(kLink, ""));
      for (int h = 0; h < kHosts; ++h) {
        struct stat info;
        if (stat(hosts.NetworkPath(h).c_str(), &info) == 0) {
          made.insert(info.st_ino);
        }
      }
      EXPECT_EQ(made.size(), static_cast<size_t>(kHosts));
      results = RunRanksOnHosts(hosts, world, body, timeout);
    }
    for (const std::string& leftover : Leftovers()) {
      ADD_FAILURE() << "left behind: " << leftover;
    }
    // Only this cluster's namespaces: other tests may hold their own.
    ExpectReleased(made);
    return results;
  }

 private:
  static void ExpectReleased(const std::set<ino_t>& made) {
    std::set<ino_t> held;
    for (int i = 0; i < 100; ++i) {
      held.clear();
      for (ino_t inode : cluster::NetworkNamespacesInUse()) {
        if (made.count(inode) != 0) held.insert(inode);
      }
      if (held.empty()) return;
      std::this_thread::sleep_for(milliseconds(50));
    }
    ADD_FAILURE() << held.size() << " of the job's network namespaces are "
                  << "still held after it";
  }
};

class CaseOnHostsTest : public OnHostsTest {
 public:
  CaseOnHostsTest(std::string backend, ConformanceCase c, int world)
      : backend_(std::move(backend)), case_(std::move(c)), world_(world) {}

  void TestBody() override {
    const BackendTraits traits = TraitsOf(backend_);
    if (const std::string why = SkipReason(case_, traits); !why.empty()) {
      GTEST_SKIP() << backend_ << ": " << why;
    }
    if (world_ < case_.min_world) {
      GTEST_SKIP() << case_.name << " needs " << case_.min_world << " ranks";
    }
    auto results = RunOnHosts(
        world_,
        [&](const RankContext& c) {
          auto comm = MakeRankCommunicator(backend_, c, milliseconds(60000),
                                           milliseconds(60000));
          case_.run(*comm, traits);
        },
        milliseconds(300000));
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 0) << Describe(results);
    }
    const std::string missing = MustNameMissing(case_, results);
    EXPECT_TRUE(missing.empty()) << missing;
  }

 private:
  std::string backend_;
  ConformanceCase case_;
  int world_;
};

// The placement itself, as every rank sees it in the peers: rank r on host
// HostOfRank(r) (contiguous), under that host's name, at its address, with
// its index there as local_rank; so the cases above did cross the link.
TEST_F(OnHostsTest, RanksAreOnTheirHosts) {
  for (int world : {2, 4}) {
    auto results = RunOnHosts(
        world,
        [](const RankContext& c) {
          for (int r = 0; r < c.world_size; ++r) {
            const int h = cluster::HostOfRank(r, c.world_size, kHosts);
            const PeerInfo& peer = c.peers[r];
            Check(peer.host.rfind(EmulatedCluster::HostName(h) + " (", 0) == 0,
                  "rank " + std::to_string(r) + "'s host is " + peer.host);
            Check(
                peer.address == EmulatedCluster::Address(h),
                "rank " + std::to_string(r) + "'s address is " + peer.address);
          }
          Check(c.local_rank == c.rank % (c.world_size / kHosts),
                "local rank " + std::to_string(c.local_rank));
        },
        milliseconds(60000));
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 0) << "world " << world << "\n"
                                << Describe(results);
    }
  }
}

// gloo at 2 hosts x 2 ranks: `victim` dies in the middle of an allreduce.
// Every survivor fails by itself (exit 1, not the job's SIGKILL) within its
// deadlines. The one on the victim's host, which sees its pid gone, names it
// as the rank that died. Those on the other host cannot see its pid, as on a
// real cluster: they name either every peer they waited for (the victim
// among them) or a rank of their own host that had already died of the
// failure; so they must say one or the other.
class KilledMidCollectiveTest : public OnHostsTest {
 public:
  explicit KilledMidCollectiveTest(int victim) : victim_(victim) {}

  void TestBody() override {
    const int world = 4, victim = victim_;
    const BackendTraits traits = TraitsOf("gloo");
    const milliseconds join(5000), op(10000);
    const auto start = std::chrono::steady_clock::now();
    auto results = RunOnHosts(
        world,
        [&](const RankContext& c) {
          auto comm = MakeRankCommunicator("gloo", c, op, join);
          std::vector<float> buffer(1 << 20, 1.0f);
          comm->Barrier();
          comm->AllReduce(buffer.data(), buffer.size(), ReduceOp::kSum);
          if (c.rank == victim) KillSelfSoon(10);
          for (;;) {
            comm->AllReduce(buffer.data(), buffer.size(), ReduceOp::kAvg);
          }
        },
        milliseconds(90000));
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              join + traits.op_deadlines_to_notice_death * op +
                  std::chrono::seconds(10))
        << Describe(results);
    EXPECT_EQ(results[victim].term_signal, SIGKILL) << Describe(results);
    const std::string named = "rank " + std::to_string(victim);
    const int victim_host = cluster::HostOfRank(victim, world, kHosts);
    for (const RankResult& r : results) {
      if (r.rank == victim) continue;
      EXPECT_EQ(r.exit_code, 1) << Describe(results);
      const bool same_host =
          cluster::HostOfRank(r.rank, world, kHosts) == victim_host;
      const bool named_dead =
          r.output.find(named + " (pid") != std::string::npos;
      const bool names_it = r.output.find(named) != std::string::npos;
      const bool a_peer_died =
          r.output.find(" died during ") != std::string::npos;
      EXPECT_TRUE(same_host ? named_dead : names_it || a_peer_died)
          << "survivor " << r.rank << " does not name " << named
          << (same_host ? " as dead" : " nor a peer that died") << "\n"
          << Describe(results);
    }
  }

 private:
  int victim_;
};

void Register(const std::string& backend, int world) {
  const std::string suite = "OnHosts/" + backend + "/" +
                            std::to_string(kHosts) + "x" +
                            std::to_string(world / kHosts);
  for (const ConformanceCase& c : AllCases()) {
    ::testing::RegisterTest(suite.c_str(), c.name.c_str(), nullptr, nullptr,
                            __FILE__, __LINE__, [=]() -> OnHostsTest* {
                              return new CaseOnHostsTest(backend, c, world);
                            });
  }
}

}  // namespace
}  // namespace ringlab::comm::testing

int main(int argc, char** argv) {
  namespace ct = ringlab::comm::testing;
  namespace cluster = ringlab::comm::cluster;
  ::testing::InitGoogleTest(&argc, argv);
  // Before any thread starts: becoming root of a user namespace needs one.
  ct::NoHosts() = cluster::GainNetworkAdmin();
  if (ct::NoHosts().empty()) {
    try {
      cluster::EmulatedCluster probe(ct::kHosts,
                                     cluster::ParseLink(ct::kLink, ""));
    } catch (const cluster::ClusterError& e) {
      ct::NoHosts() = e.what();
    }
  }
  ct::AdoptOrphans();
  ct::Register("gloo", 2);
  ct::Register("gloo", 4);
  ct::Register("hier", 4);
  for (int victim : {0, 3}) {
    const std::string name =
        "rank_killed_mid_collective/rank" + std::to_string(victim);
    ::testing::RegisterTest("OnHosts/gloo/2x2", name.c_str(), nullptr, nullptr,
                            __FILE__, __LINE__, [=]() -> ct::OnHostsTest* {
                              return new ct::KilledMidCollectiveTest(victim);
                            });
  }
  return RUN_ALL_TESTS();
}
