// Peer information: its encoding, the liveness watch (a dead local peer is
// named, a remote one never judged by a local pid, a reused pid is not the
// peer), the exchange through a store, and how hosts are described.
#include "comm/peers.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/process.h"
#include "comm/store/local_store.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;

PeerInfo Me() {
  PeerInfo me;
  me.host = "node-a (boot 1234abcd, pid namespace 4026531836)";
  me.pid = getpid();
  me.start_time = ProcessStartTime(getpid());
  me.address = "10.0.0.1";
  return me;
}

// A pid that has certainly exited: a child, already reaped.
pid_t ExitedPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST(PeerInfoTest, EncodesAndDecodes) {
  const PeerInfo me = Me();
  const PeerInfo back = PeerInfo::Decode(me.Encode());
  EXPECT_EQ(back.host, me.host);
  EXPECT_EQ(back.pid, me.pid);
  EXPECT_EQ(back.start_time, me.start_time);
  EXPECT_EQ(back.address, me.address);
  EXPECT_TRUE(back.SameProcess(me));
  PeerInfo no_address = me;
  no_address.address.clear();
  EXPECT_EQ(PeerInfo::Decode(no_address.Encode()).address, "");
  for (const char* bad : {"", "x y z w", "12 34", "0 1 1.2.3.4 host"}) {
    EXPECT_THROW(PeerInfo::Decode(bad), std::invalid_argument) << bad;
  }
}

TEST(PeerInfoTest, StartTimeTellsProcessesApart) {
  EXPECT_GT(ProcessStartTime(getpid()), 0u);
  EXPECT_EQ(ProcessStartTime(ExitedPid()), 0u);
  PeerInfo later = Me();
  later.start_time += 1;  // the same pid, another process
  EXPECT_FALSE(later.SameProcess(Me()));
  EXPECT_TRUE(later.SameHost(Me()));
}

TEST(PeerWatchTest, NamesTheLowestDeadLocalPeer) {
  const PeerInfo me = Me();
  PeerInfo alive = me;  // this process, as another rank would be
  alive.pid = getppid();
  alive.start_time = ProcessStartTime(getppid());
  PeerInfo dead = me;
  dead.pid = ExitedPid();
  PeerInfo remote = dead;
  remote.host = "node-b (boot 00000000, pid namespace 1)";
  PeerInfo reused = me;  // this pid, but not the process that started then
  reused.pid = getppid();
  reused.start_time = ProcessStartTime(getppid()) + 1;
  const std::vector<PeerInfo> peers = {me, alive, dead, remote, reused};
  const PeerWatch watch(peers, 0);
  EXPECT_FALSE(watch.Exited(0));
  EXPECT_FALSE(watch.Exited(1));
  EXPECT_TRUE(watch.Exited(2));
  EXPECT_FALSE(watch.Exited(3));  // another host's pid means nothing here
  EXPECT_TRUE(watch.Exited(4));
  EXPECT_FALSE(watch.Exited(7));
  EXPECT_EQ(watch.FirstDeadPeer(), 2);
  EXPECT_TRUE(PeerExited(dead, me));
  EXPECT_FALSE(PeerExited(remote, me));
}

TEST(PeerWatchTest, AloneOrThreadsOfOneProcessWatchNobody) {
  EXPECT_EQ(PeerWatch({Me()}, 0).FirstDeadPeer(), -1);
  EXPECT_EQ(PeerWatch({Me(), Me(), Me()}, 1).FirstDeadPeer(), -1);
  EXPECT_EQ(PeerWatch().FirstDeadPeer(), -1);
}

TEST(ExchangePeersTest, EveryRankLearnsEveryRanks) {
  LocalStore store;
  std::vector<std::vector<PeerInfo>> seen(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      PeerInfo mine = Me();
      mine.address = "10.0.0." + std::to_string(r + 1);
      seen[r] = ExchangePeers(store, r, 3, mine, milliseconds(10000));
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(seen[r].size(), 3u);
    for (int q = 0; q < 3; ++q) {
      EXPECT_EQ(seen[r][q].address, "10.0.0." + std::to_string(q + 1));
    }
  }
  LocalStore lonely;
  EXPECT_THROW(ExchangePeers(lonely, 0, 2, Me(), milliseconds(50)),
               StoreTimeout);
}

TEST(DescribeHostsTest, GroupsRanksByHostInOrderOfTheirLowestRank) {
  std::vector<PeerInfo> peers(7);
  const char* hosts[] = {"a", "b", "a", "a", "a", "a", "b"};
  for (int r = 0; r < 7; ++r) peers[r].host = hosts[r];
  size_t count = 0;
  EXPECT_EQ(DescribeHosts(peers, &count),
            "ranks 0,2,3,4 and 1 more on a; ranks 1,6 on b");
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(DescribeHosts({peers[1]}, &count), "rank 0 on b");
  EXPECT_EQ(count, 1u);
}

}  // namespace
}  // namespace ringlab::comm
