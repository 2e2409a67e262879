// The front's call-check connections (comm/call_mesh.h) between real
// processes: descriptions posted several calls ahead arrive in order and
// reduce to their maximum; a wait keeps moving a backend's queued data; a
// connection that cannot prove the job's secret is dropped while the ranks
// still join, and one that stays silent holds up no rank; a peer that exits is
// named as dead, one that stays silent past the deadline as the rank waited
// for.
#include "comm/call_mesh.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/store.h"
#include "comm/testing/multi_process.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;
using testing::Describe;
using testing::RankResult;
using testing::RunRanks;

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Call k's words on `rank`: every field rank * 10 + k, so the maximum over
// the ranks is (world - 1) * 10 + k.
void WordsOf(int rank, int k, int64_t words[kAgreementWords]) {
  for (int w = 0; w < kAgreementWords; ++w) words[w] = rank * 10 + k;
}

// Connects to a mesh's listener on loopback, answers its nonce with a proof
// made of zeros, and says whether the listener then closed the connection.
bool ConnectAsStranger(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  char nonce[16];
  const int32_t rank = 1;
  const char proof[32] = {};
  const bool dropped =
      connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
          0 &&
      recv(fd, nonce, sizeof(nonce), MSG_WAITALL) == sizeof(nonce) &&
      send(fd, &rank, sizeof(rank), MSG_NOSIGNAL) == sizeof(rank) &&
      send(fd, proof, sizeof(proof), MSG_NOSIGNAL) == sizeof(proof) &&
      recv(fd, nonce, 1, 0) == 0;
  close(fd);
  return dropped;
}

void ExpectAllExited0(const std::vector<RankResult>& results) {
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
  }
}

TEST(CallMeshTest, CallsPostedAheadArriveInOrderAndReduceToTheMaximum) {
  const int world = 3, calls = 5;
  ExpectAllExited0(RunRanks(
      world,
      [&](const RankContext& c) {
        CallMesh mesh(c, "test", milliseconds(10000), milliseconds(10000));
        int64_t words[kAgreementWords];
        for (int k = 0; k < calls; ++k) {
          WordsOf(c.rank, k, words);
          mesh.Post(words, "call " + std::to_string(k));
        }
        for (int k = 0; k < calls; ++k) {
          WordsOf(c.rank, k, words);
          mesh.Collect(words, "call " + std::to_string(k));
          for (int64_t w : words) {
            Check(w == (world - 1) * 10 + k,
                  "call " + std::to_string(k) + ": " + std::to_string(w));
          }
        }
      },
      milliseconds(60000)));
}

// As under MPI, where a rank's finished call left data queued that only its
// next MPI call writes: rank 1 posts only once it has that data, which rank
// 0's progress moves on its third call, so rank 0's wait must keep calling
// it (once before waiting is not enough: rank 0 would time out).
TEST(CallMeshTest, AWaitKeepsMovingTheBackendsQueuedData) {
  ExpectAllExited0(RunRanks(
      2,
      [&](const RankContext& c) {
        CallMesh mesh(c, "test", milliseconds(10000), milliseconds(5000));
        int64_t words[kAgreementWords];
        WordsOf(c.rank, 0, words);
        if (c.rank == 1) {
          c.store->Get("queued data", milliseconds(10000));
          mesh.Post(words, "call 0");
          mesh.Collect(words, "call 0");
          return;
        }
        int calls = 0;
        mesh.Post(words, "call 0");
        mesh.Collect(words, "call 0", [&] {
          if (++calls == 3) c.store->Set("queued data", "moved");
        });
        Check(words[0] == 10, "the maximum is " + std::to_string(words[0]));
      },
      milliseconds(60000)));
}

// Rank 1 first connects to rank 0 as a stranger would, with a proof made
// without the secret: rank 0 drops that connection and still admits rank 1.
TEST(CallMeshTest, AConnectionWithoutTheSecretIsDropped) {
  ExpectAllExited0(RunRanks(
      2,
      [&](const RankContext& c) {
        if (c.rank == 1) {
          const int port =
              std::stoi(c.store->Get("call_mesh/port/0", milliseconds(10000)));
          Check(ConnectAsStranger(port), "rank 0 answered a stranger");
        }
        CallMesh mesh(c, "test", milliseconds(10000), milliseconds(10000));
        int64_t words[kAgreementWords];
        WordsOf(c.rank, 0, words);
        mesh.Post(words, "call 0");
        mesh.Collect(words, "call 0");
        Check(words[0] == 10, "the maximum is " + std::to_string(words[0]));
      },
      milliseconds(60000)));
}

TEST(CallMeshTest, APeerThatExitsIsNamedAsDead) {
  const auto results = RunRanks(
      2,
      [&](const RankContext& c) {
        CallMesh mesh(c, "test", milliseconds(10000), milliseconds(10000));
        if (c.rank == 1) _exit(0);
        int64_t words[kAgreementWords];
        WordsOf(c.rank, 0, words);
        mesh.Post(words, "call #1 Barrier(count=0)");
        try {
          mesh.Collect(words, "call #1 Barrier(count=0)");
        } catch (const CommError& e) {
          const std::string error = e.what();
          Check(error.find("rank 1 (pid") != std::string::npos &&
                    error.find("died during") != std::string::npos &&
                    error.find("call #1 Barrier") != std::string::npos,
                "the error does not name rank 1 as dead: " + error);
          return;
        }
        throw std::runtime_error("rank 1's exit went unnoticed");
      },
      milliseconds(60000));
  ExpectAllExited0(results);
}

TEST(CallMeshTest, ASilentPeerTimesOutNamingIt) {
  const auto results = RunRanks(
      2,
      [&](const RankContext& c) {
        CallMesh mesh(c, "test", milliseconds(10000), milliseconds(300));
        if (c.rank == 1) {
          std::this_thread::sleep_for(milliseconds(3000));
          return;
        }
        int64_t words[kAgreementWords];
        WordsOf(c.rank, 0, words);
        const auto start = std::chrono::steady_clock::now();
        try {
          mesh.Collect(words, "call #1 Barrier(count=0)");
        } catch (const CommError& e) {
          const std::string error = e.what();
          Check(error.find("timed out") != std::string::npos &&
                    error.find("waiting for rank 1") != std::string::npos,
                "the error does not name rank 1: " + error);
          Check(std::chrono::steady_clock::now() - start < milliseconds(2500),
                "the deadline of 0.3 s was not kept");
          return;
        }
        throw std::runtime_error("rank 1's silence went unnoticed");
      },
      milliseconds(60000));
  ExpectAllExited0(results);
}

// A local process that connects to a listening rank and says nothing held
// the job up: ranks were admitted one at a time, each connection given 5 s
// to prove itself. With a silent stranger on each listener before the ranks
// behind it connect, the mesh forms and agrees on a call at once: rank 2,
// which starts last and whose connections queue behind both strangers,
// measures it (a bound with room for a loaded machine; the old admission
// took at least 5 s).
TEST(CallMeshTest, ASilentStrangerOnEachListenerDelaysNoRank) {
  const auto results = RunRanks(
      3,
      [&](const RankContext& c) {
        int stranger = -1;
        if (c.rank > 0) {
          const int port = std::stoi(
              c.store->Get("call_mesh/port/" + std::to_string(c.rank - 1),
                           milliseconds(10000)));
          stranger = socket(AF_INET, SOCK_STREAM, 0);
          sockaddr_in address{};
          address.sin_family = AF_INET;
          address.sin_port = htons(static_cast<uint16_t>(port));
          address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          Check(connect(stranger, reinterpret_cast<sockaddr*>(&address),
                        sizeof(address)) == 0,
                "the stranger could not connect");
        }
        const auto start = std::chrono::steady_clock::now();
        CallMesh mesh(c, "test", milliseconds(10000), milliseconds(10000));
        int64_t words[kAgreementWords];
        WordsOf(c.rank, 0, words);
        mesh.Post(words, "call 0");
        mesh.Collect(words, "call 0");
        const auto took = std::chrono::duration_cast<milliseconds>(
            std::chrono::steady_clock::now() - start);
        if (stranger >= 0) close(stranger);
        Check(words[0] == 20, "the maximum is " + std::to_string(words[0]));
        if (c.rank == 2) {
          std::printf("rank 2: mesh formed and agreed in %lld ms\n",
                      static_cast<long long>(took.count()));
          Check(took < milliseconds(2000),
                "the mesh took " + std::to_string(took.count()) +
                    " ms to form beside a silent stranger");
        }
      },
      milliseconds(60000));
  ExpectAllExited0(results);
}

}  // namespace
}  // namespace ringlab::comm
