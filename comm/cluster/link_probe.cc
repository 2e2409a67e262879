#include "comm/cluster/link_probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace ringlab::comm::cluster {
namespace {

using Clock = std::chrono::steady_clock;

// A stalled stream fails the probe rather than hanging it.
constexpr int kStallSeconds = 10;

void SetDeadlines(int fd) {
  const timeval stall{kStallSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &stall, sizeof(stall));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof(stall));
}

sockaddr_in AddressOf(int host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, EmulatedCluster::Address(host).c_str(), &address.sin_addr);
  return address;
}

// A listening socket on host `to`'s address; its port in *port.
int Listen(const EmulatedCluster& cluster, int to, int* port) {
  int fd = -1;
  cluster.InNetworkOf(to, [&] {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = AddressOf(to, 0);
    socklen_t length = sizeof(address);
    if (fd < 0 ||
        bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        listen(fd, 1) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) close(fd);
      throw ClusterError("link probe: cannot listen on " +
                         EmulatedCluster::HostName(to) + ": " + why);
    }
    *port = ntohs(address.sin_port);
  });
  return fd;
}

// Host `from` sends until `stop`; false when it could not connect or send.
void Send(const EmulatedCluster& cluster, int from, int to, int port,
          Clock::time_point stop, std::atomic<bool>* failed) {
  cluster.InNetworkOf(from, [&] {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_in address = AddressOf(to, port);
    if (fd < 0) {
      failed->store(true);
      return;
    }
    SetDeadlines(fd);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address),
                sizeof(address)) != 0) {
      failed->store(true);
    }
    const std::vector<char> chunk(1 << 16, 'r');
    while (!failed->load() && Clock::now() < stop) {
      if (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) {
        failed->store(true);
      }
    }
    close(fd);
  });
}

}  // namespace

double MeasureTcpThroughput(const EmulatedCluster& cluster, int from, int to,
                            std::chrono::milliseconds duration) {
  int port = 0;
  const int listener = Listen(cluster, to, &port);
  const auto start = Clock::now();
  const auto settled = start + duration / 4;
  const auto stop = settled + duration;
  std::atomic<bool> failed{false};
  std::thread sender(Send, std::cref(cluster), from, to, port, stop, &failed);
  pollfd incoming{listener, POLLIN, 0};
  const int conn = poll(&incoming, 1, kStallSeconds * 1000) == 1
                       ? accept(listener, nullptr, nullptr)
                       : -1;
  close(listener);
  uint64_t counted = 0;
  Clock::time_point first{}, last{};
  if (conn >= 0) {
    SetDeadlines(conn);
    std::vector<char> buffer(1 << 16);
    ssize_t k;
    while ((k = recv(conn, buffer.data(), buffer.size(), 0)) > 0) {
      const auto now = Clock::now();
      if (now < settled) continue;
      if (counted == 0) first = now;
      counted += static_cast<uint64_t>(k);
      last = now;
    }
    if (k < 0) failed.store(true);
    close(conn);
  }
  sender.join();
  const double seconds = std::chrono::duration<double>(last - first).count();
  if (conn < 0 || failed.load() || !(seconds > 0)) {
    throw ClusterError(
        "link probe: the TCP stream from " + EmulatedCluster::HostName(from) +
        " to " + EmulatedCluster::HostName(to) + " failed or stalled for " +
        std::to_string(kStallSeconds) + " s");
  }
  return counted * 8.0 / seconds;
}

}  // namespace ringlab::comm::cluster
