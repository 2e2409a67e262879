// The test drivers themselves: RunRanks' ranks are real processes that meet
// through a TCP store and learn every rank's peer information as a job's
// rendezvous gives it (so a ranks-as-threads group refuses them at once),
// RunThreadRanks' are threads of one forked process; both report each
// rank's exit and output.
#include "comm/testing/multi_process.h"

#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "comm/job/thread_group.h"
#include "comm/store/store.h"
#include "gtest/gtest.h"

namespace ringlab::comm::testing {
namespace {

using std::chrono::milliseconds;

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

TEST(RunRanksTest, RanksAreProcessesThatKnowEachOther) {
  auto results = RunRanks(
      3,
      [](const RankContext& c) {
        Check(c.peers.size() == 3, "peers for every rank");
        Check(c.peers[c.rank].pid == getpid(), "this rank's pid");
        for (int q = 0; q < 3; ++q) {
          Check(q == c.rank || !c.peers[q].SameProcess(c.peers[c.rank]),
                "ranks in one process");
          Check(c.peers[q].SameHost(c.peers[c.rank]), "ranks on two hosts");
          Check(c.peers[q].address == "127.0.0.1", c.peers[q].address);
        }
        c.store->Set("from/" + std::to_string(c.rank), "x");
        c.store->Wait(RankKeys("from", 3), milliseconds(10000));
        if (c.rank == 2) throw std::runtime_error("rank 2 says no");
      },
      milliseconds(60000));
  EXPECT_EQ(results[0].exit_code, 0) << Describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << Describe(results);
  EXPECT_EQ(results[2].exit_code, 1) << Describe(results);
  EXPECT_NE(results[2].output.find("rank 2 says no"), std::string::npos);
}

// What a threads-mode backend meets when it is launched one process per
// rank: refused at once, naming the processes.
TEST(RunRanksTest, AThreadGroupOfProcessesIsRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  auto results = RunRanks(
      2,
      [](const RankContext& c) {
        std::string error;
        try {
          ThreadGroup::Join(c, milliseconds(30000), "test");
        } catch (const CommError& e) {
          error = e.what();
        }
        Check(error.find("different processes") != std::string::npos,
              "not refused: '" + error + "'");
      },
      milliseconds(60000));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(RunThreadRanksTest, RanksAreThreadsOfOneProcess) {
  auto results = RunThreadRanks(
      3,
      [](const RankContext& c) {
        for (int q = 0; q < 3; ++q) {
          Check(c.peers[q].SameProcess(c.peers[c.rank]), "another process");
        }
        RankPrint("rank " + std::to_string(c.rank) + " here");
      },
      milliseconds(60000));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
    EXPECT_NE(r.output.find("rank " + std::to_string(r.rank) + " here"),
              std::string::npos)
        << Describe(results);
  }
}

}  // namespace
}  // namespace ringlab::comm::testing
