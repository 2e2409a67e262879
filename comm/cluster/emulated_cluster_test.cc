// The emulated cluster for real: hosts with their own names and addresses,
// traffic between them through the switch, counted on each host's link,
// shaped by the link's token buckets, and nothing of it left once the
// cluster object is gone. Skips, saying why, where this process may not
// create network namespaces.
#include "comm/cluster/emulated_cluster.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm/cluster/link_probe.h"
#include "comm/cluster/namespaces_in_use.h"

namespace ringlab::comm::cluster {
namespace {

class EmulatedClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = GainNetworkAdmin();
    if (!why.empty()) GTEST_SKIP() << "skipped: " << why;
  }
};

// What `command` prints when run on `host` (sh -c, inside its namespaces).
std::string OnHost(const EmulatedCluster& cluster, int host,
                   const std::string& command) {
  // Bazel's test PATH has no sbin, where iproute2 is.
  const std::string with_sbin = "PATH=/usr/sbin:/sbin:$PATH " + command;
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    if (!cluster.Enter(host)) _exit(126);
    execl("/bin/sh", "sh", "-c", with_sbin.c_str(), nullptr);
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t k;
  while ((k = read(out[0], buf, sizeof(buf))) > 0) text.append(buf, k);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_EQ(status, 0) << command;
  return text;
}

// Sends `bytes` from host `from` to host `to` over TCP through the switch.
void Transfer(const EmulatedCluster& cluster, int from, int to, size_t bytes) {
  int listener = -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(29999);
  inet_pton(AF_INET, EmulatedCluster::Address(to).c_str(), &address.sin_addr);
  cluster.InNetworkOf(to, [&] {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(
        bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
        0);
    ASSERT_EQ(listen(listener, 1), 0);
  });
  std::thread sender([&] {
    cluster.InNetworkOf(from, [&] {
      const int s = socket(AF_INET, SOCK_STREAM, 0);
      ASSERT_EQ(
          connect(s, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
          << std::strerror(errno);
      const std::string chunk(1 << 16, 'x');
      for (size_t sent = 0; sent < bytes; sent += chunk.size()) {
        ASSERT_EQ(write(s, chunk.data(), chunk.size()),
                  static_cast<ssize_t>(chunk.size()));
      }
      close(s);
    });
  });
  // A connection that never comes fails the test, not hangs it.
  pollfd incoming{listener, POLLIN, 0};
  const bool came = poll(&incoming, 1, 30000) == 1;
  const int conn = came ? accept(listener, nullptr, nullptr) : -1;
  if (conn < 0) {
    sender.join();
    close(listener);
    FAIL() << "no connection within 30 s";
  }
  timeval deadline{30, 0};
  setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof(deadline));
  size_t got = 0;
  char buf[1 << 16];
  ssize_t k;
  while ((k = read(conn, buf, sizeof(buf))) > 0) got += k;
  sender.join();
  close(conn);
  close(listener);
  EXPECT_EQ(got, bytes);
}

TEST_F(EmulatedClusterTest, HostsHaveTheirNamesAndAddresses) {
  const EmulatedCluster cluster(3, ParseLink("unlimited", ""));
  for (int h = 0; h < 3; ++h) {
    EXPECT_EQ(OnHost(cluster, h, "hostname"),
              "ringlab-host-" + std::to_string(h) + "\n");
    EXPECT_NE(OnHost(cluster, h, "ip -o -4 address show dev eth0")
                  .find("inet 10.78.0." + std::to_string(h + 1) + "/24"),
              std::string::npos);
  }
}

// 8 MB from host 1 to host 2 cross host 1's link out and host 2's in, and
// not host 0's: the counters are the links' own.
TEST_F(EmulatedClusterTest, TrafficCrossesOnlyTheLinksOfItsHosts) {
  const EmulatedCluster cluster(3, ParseLink("10gbit", ""));
  const EmulatedCluster::Counters before[3] = {cluster.LinkCounters(0),
                                               cluster.LinkCounters(1),
                                               cluster.LinkCounters(2)};
  constexpr size_t kBytes = 8 << 20;
  Transfer(cluster, 1, 2, kBytes);
  const auto sent = [&](int h) {
    return cluster.LinkCounters(h).sent - before[h].sent;
  };
  const auto received = [&](int h) {
    return cluster.LinkCounters(h).received - before[h].received;
  };
  EXPECT_GE(sent(1), kBytes);
  EXPECT_GE(received(2), kBytes);
  // Headers are ~3% at a 1500-byte MTU; acks go the other way.
  EXPECT_LT(sent(1), kBytes * 11 / 10);
  EXPECT_LT(sent(2), kBytes / 10);
  EXPECT_LT(received(0), kBytes / 100);  // a broadcast or two at most
}

// Both ends of each host's veth carry the link's token bucket; an
// unlimited link carries none.
TEST_F(EmulatedClusterTest, EveryLinkIsShapedInBothDirections) {
  {
    const EmulatedCluster cluster(2, ParseLink("2.5gbit", ""));
    for (int h = 0; h < 2; ++h) {
      const std::string qdisc = OnHost(cluster, h, "tc qdisc show dev eth0");
      EXPECT_NE(qdisc.find("tbf"), std::string::npos) << qdisc;
      EXPECT_NE(qdisc.find("rate 2500Mbit"), std::string::npos) << qdisc;
    }
    // Traffic to a host leaves the switch through that host's port:
    // shaped there too, so a host receives at the link's rate.
    Transfer(cluster, 0, 1, 1 << 20);
  }
  const EmulatedCluster unlimited(2, ParseLink("unlimited", ""));
  EXPECT_EQ(OnHost(unlimited, 0, "tc qdisc show dev eth0").find("tbf"),
            std::string::npos);
}

// The token buckets hold a stream to the link's rate: however fast this
// machine, one TCP stream through a 100 Mbit/s link never carries more
// (an upper bound only: how much less a loaded machine carries is the
// benchmark's to measure, not a test's).
TEST_F(EmulatedClusterTest, AStreamCarriesNoMoreThanTheLinksRate) {
  const EmulatedCluster cluster(2, ParseLink("100mbit", ""));
  const double bits =
      MeasureTcpThroughput(cluster, 0, 1, std::chrono::milliseconds(400));
  EXPECT_GT(bits, 0);
  EXPECT_LT(bits, 1.05e8);
}

// A kernel without netem refuses the delay as the user's flag
// (std::invalid_argument: exit status 2 in the binaries), having removed
// what it made.
TEST_F(EmulatedClusterTest, ALatencyNeedsNetemAndSaysSo) {
  try {
    const EmulatedCluster cluster(2, ParseLink("1gbit", "1ms"));
    EXPECT_NE(OnHost(cluster, 0, "tc qdisc show dev eth0").find("netem"),
              std::string::npos);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--link_latency needs the kernel's "
                                         "netem queueing discipline"),
              std::string::npos)
        << e.what();
  }
}

// Once the object is gone no process holds its namespaces: the kernel has
// removed them with their veths, bridge and qdiscs.
TEST_F(EmulatedClusterTest, NothingOutlivesTheCluster) {
  const std::set<ino_t> before = NetworkNamespacesInUse();
  {
    const EmulatedCluster cluster(2, ParseLink("1gbit", ""));
    EXPECT_EQ(NetworkNamespacesInUse().size(), before.size() + 3);
  }
  EXPECT_EQ(NetworkNamespacesInUse(), before);
}

TEST_F(EmulatedClusterTest, HostsOutsideTheRangeAreRefused) {
  EXPECT_THROW(EmulatedCluster(0, Link{}), std::invalid_argument);
  EXPECT_THROW(EmulatedCluster(65, Link{}), std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::comm::cluster
