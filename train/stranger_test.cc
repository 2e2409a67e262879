// A stranger hammers a job's store while the job starts and runs: idle
// connections held open, junk, requests of the store's old, unauthenticated
// protocol for the very keys the job uses (its ranks' hosts, its shared-
// memory segment's address), handshakes with a wrong secret. The job must
// finish unharmed, training exactly what it trains alone, and the stranger
// must get nothing but the store's hello.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/job_secret.h"
#include "comm/store/store_protocol.h"
#include "train/cli_testing.h"

namespace {

using namespace ringlab::train::testing;  // NOLINT: the CLI test helpers
namespace wire = ringlab::comm::store_protocol;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (fd >= 0 &&
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    return fd;
  }
  if (fd >= 0) close(fd);
  return -1;
}

// Everything the server sends on fd until it closes it or 20 ms pass.
std::string Drain(int fd) {
  std::string got;
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 20) <= 0) return got;
    char buf[512];
    const ssize_t k = recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) return got;
    got.append(buf, static_cast<size_t>(k));
  }
}

// Four threads, each holding 25 connections open that send nothing, and
// sending attacks as fast as the server answers them.
class Stranger {
 public:
  void Start(std::atomic<int>* port) {
    for (int t = 0; t < 4; ++t) {
      threads_.emplace_back([this, port, t] { Run(port, t); });
    }
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }
  std::atomic<int64_t> attempts{0};      // connections a server accepted
  std::atomic<int64_t> leaked_bytes{0};  // received beyond the hello

 private:
  void Run(std::atomic<int>* port, int seed) {
    std::mt19937 rng(seed);
    const std::vector<std::string> attacks = {
        wire::RequestFrame(wire::kSet, "rendezvous/host/1", "evil"),
        wire::RequestFrame(wire::kSet, "shm_ring/0/name", "memfd:1:3:4"),
        wire::RequestFrame(wire::kGet, "rendezvous/host/0", ""),
        wire::RequestFrame(wire::kAdd, "shm_ring/0/state", "-1"),
        wire::ClientProof(ringlab::comm::GenerateJobSecret(),
                          std::string(wire::kNonceBytes, 's'),
                          std::string(wire::kNonceBytes, 'c')),
    };
    std::vector<int> idle;
    while (!stop_) {
      const int p = port->load();
      while (idle.size() < 25) {
        const int fd = Connect(p);
        if (fd < 0) break;
        idle.push_back(fd);
      }
      const int fd = Connect(p);
      if (fd < 0) continue;
      ++attempts;
      std::string bytes = attacks[rng() % attacks.size()];
      if (rng() % 3 == 0) {  // junk instead
        bytes.assign(1 + rng() % 200, '\0');
        for (char& c : bytes) c = static_cast<char>(rng());
      }
      send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      const std::string got = Drain(fd);
      close(fd);
      if (got.size() > wire::kHelloBytes) {
        leaked_bytes += static_cast<int64_t>(got.size() - wire::kHelloBytes);
      }
      // Reopen the idle connections the server closed.
      for (size_t i = idle.size(); i-- > 0;) {
        char c;
        if (recv(idle[i], &c, 1, MSG_DONTWAIT | MSG_PEEK) == 0) {
          close(idle[i]);
          idle.erase(idle.begin() + static_cast<long>(i));
        }
      }
    }
    for (int fd : idle) close(fd);
  }

  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

TEST(StrangerTest, AStrangerHammeringTheStoreChangesNothing) {
  const std::string flags =
      "--quiet --timeout=30 --epochs=2000 --batch_size=16 --out_dir=";
  const std::string alone = TempDir("alone");
  ASSERT_EQ(RunTrain(flags + alone).status, 0);

  const std::string out = TempDir("hammered");
  std::atomic<int> port{0};
  ByHand job;
  job.args = [&](int) { return flags + out; };
  job.on_port = [&](int p) { port = p; };
  Stranger stranger;
  stranger.Start(&port);
  const auto start = std::chrono::steady_clock::now();
  const auto ranks = RunRanksByHand("hammered", job);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  stranger.Stop();

  ASSERT_EQ(ranks.size(), 2u);
  std::printf(
      "the stranger got through %lld time(s) in %.2f s (and held up to 100 "
      "idle connections); rank 0's stderr:\n%s",
      static_cast<long long>(stranger.attempts.load()), seconds,
      ranks[0].err.c_str());
  for (const RankRun& rank : ranks) EXPECT_EQ(rank.status, 0) << rank.err;
  EXPECT_EQ(Losses(out), Losses(alone));
  for (const std::string& tensor : kTensors) {
    EXPECT_EQ(ReadText(out + "/final/" + tensor + ".npy"),
              ReadText(alone + "/final/" + tensor + ".npy"))
        << tensor;
  }
  EXPECT_GT(stranger.attempts.load(), 20) << "the stranger hardly got through";
  EXPECT_EQ(stranger.leaked_bytes.load(), 0) << "the store answered a stranger";
  // Rank 1 says nothing; rank 0's store logs the strangers at most once per
  // 10 s, not once per connection.
  EXPECT_EQ(ranks[1].err, "");
  EXPECT_EQ(ranks[0].err.find("error"), std::string::npos) << ranks[0].err;
  EXPECT_LE(Lines(ranks[0].err), 2 + static_cast<int>(seconds / 10))
      << ranks[0].err;
}

}  // namespace
