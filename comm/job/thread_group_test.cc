// The host logic of ranks as threads (ThreadGroup, RunRankThreads)
// on plain threads and fake "device pointers": how threads find each other,
// exchange what they allocated, line up before every collective, and fail
// with deadlines that name the missing rank. None of this needs a GPU.
#include "comm/job/thread_group.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/job/rank_threads.h"
#include "comm/store/local_store.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kLong(30000);  // generous: never reached when correct

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs body(rank) on `world` threads, one RankContext each, sharing a store.
RankThreadsResult OnThreads(
    int world, const std::function<void(const RankContext&)>& body) {
  return RunRankThreads(world, body, milliseconds(20000));
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A hand-made context of `world` ranks that are all this process.
RankContext ThreadsContext(Store* store, int rank, int world) {
  RankContext c;
  c.rank = rank;
  c.world_size = world;
  c.store = store;
  PeerInfo me;
  me.host = "this host";
  me.pid = getpid();
  me.start_time = 1;
  me.address = "127.0.0.1";
  c.peers.assign(world > 0 ? world : 0, me);
  return c;
}

// c with another world size (its peers cut or grown to fit).
RankContext WithWorld(RankContext c, int world) {
  c.peers.resize(world, c.peers.at(0));
  c.world_size = world;
  return c;
}

// Every rank gets every rank's value, in rank order, at several world sizes.
TEST(ThreadGroupTest, ExchangesEveryRanksPointer) {
  for (int world : {1, 2, 3, 8}) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::vector<std::vector<std::string>> got(world);
    auto result = OnThreads(world, [&](const RankContext& c) {
      auto group = ThreadGroup::Join(c, kLong, "test");
      // A fake device pointer per rank.
      const std::string mine = std::to_string(0x7f0000000000ull + c.rank);
      got[c.rank] = group->Exchange(c.rank, mine, kLong);
      group->Leave(c.rank);
    });
    ASSERT_TRUE(result.ok()) << result.Describe();
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(got[r].size(), static_cast<size_t>(world));
      for (int q = 0; q < world; ++q) {
        EXPECT_EQ(got[r][q], std::to_string(0x7f0000000000ull + q));
      }
    }
  }
}

// No rank passes the k-th Arrive before every rank has entered it.
TEST(ThreadGroupTest, ArriveLinesUpEveryCall) {
  const int world = 4, calls = 2000;
  std::vector<std::atomic<int>> entered(calls);
  std::atomic<int> early{0};
  auto result = OnThreads(world, [&](const RankContext& c) {
    auto group = ThreadGroup::Join(c, kLong, "test");
    for (int k = 0; k < calls; ++k) {
      entered[k].fetch_add(1);
      group->Arrive(c.rank, "AllReduce", "AllReduce(count=8)", kLong);
      if (entered[k].load() != world) early.fetch_add(1);
    }
    group->Leave(c.rank);
  });
  ASSERT_TRUE(result.ok()) << result.Describe();
  EXPECT_EQ(early.load(), 0);
}

TEST(ThreadGroupTest, MismatchedCallsAreNamedOnEveryRank) {
  auto result = OnThreads(3, [&](const RankContext& c) {
    auto group = ThreadGroup::Join(c, kLong, "test");
    group->Arrive(c.rank, "AllReduce", "AllReduce(count=8)", kLong);
    group->Arrive(c.rank, "AllReduce",
                  c.rank == 1 ? "AllReduce(count=9)" : "AllReduce(count=8)",
                  kLong);
  });
  bool both = false;
  for (const std::string& e : result.errors) {
    EXPECT_NE(e.find("mismatched collectives"), std::string::npos) << e;
    both = both || (e.find("count=8") != std::string::npos &&
                    e.find("count=9") != std::string::npos);
  }
  EXPECT_TRUE(both) << result.Describe();
}

// A rank that joined but never calls: the others' call ends at its deadline,
// naming it.
TEST(ThreadGroupTest, AbsentRankTimesOutNamed) {
  std::string error;
  double waited = 0;
  auto result = OnThreads(3, [&](const RankContext& c) {
    auto group = ThreadGroup::Join(c, kLong, "test");
    if (c.rank == 2) {
      c.store->Get("released", kLong);
      return;
    }
    const auto start = Clock::now();
    const std::string e = ErrorOf(
        [&] { group->Arrive(c.rank, "Barrier", "", milliseconds(300)); });
    if (c.rank == 0) {
      error = e;
      waited = SecondsSince(start);
    }
    c.store->Set("released", "1");
  });
  ASSERT_TRUE(result.ok()) << result.Describe();
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 2 in Barrier"), std::string::npos) << error;
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 5.0);
}

// A rank that leaves (destroys its communicator) makes a waiting peer fail at
// once, not at its deadline.
TEST(ThreadGroupTest, LeavingRankFailsWaitersAtOnce) {
  std::string error;
  double waited = 0;
  auto result = OnThreads(2, [&](const RankContext& c) {
    auto group = ThreadGroup::Join(c, kLong, "test");
    if (c.rank == 1) {
      std::this_thread::sleep_for(milliseconds(100));
      group->Leave(1);
      return;
    }
    const auto start = Clock::now();
    error = ErrorOf([&] { group->Arrive(0, "AllReduce", "", kLong); });
    waited = SecondsSince(start);
    EXPECT_EQ(group->FirstGone(0), 1);
    EXPECT_EQ(group->FirstGone(1), -1);
  });
  ASSERT_TRUE(result.ok()) << result.Describe();
  EXPECT_NE(error.find("rank 1 left"), std::string::npos) << error;
  EXPECT_LT(waited, 5.0);
}

TEST(ThreadGroupTest, ExchangeNamesRanksThatNeverPublish) {
  std::string timed_out, left;
  auto result = OnThreads(3, [&](const RankContext& c) {
    auto group = ThreadGroup::Join(c, kLong, "test");
    if (c.rank == 0) {
      timed_out = ErrorOf([&] { group->Exchange(0, "p0", milliseconds(200)); });
      c.store->Set("timed_out", "1");
    } else if (c.rank == 1) {
      c.store->Get("timed_out", kLong);
      group->Leave(1);
    } else {
      c.store->Get("timed_out", kLong);
      left = ErrorOf([&] { group->Exchange(2, "p2", kLong); });
    }
  });
  ASSERT_TRUE(result.ok()) << result.Describe();
  EXPECT_NE(timed_out.find("ranks 1, 2"), std::string::npos) << timed_out;
  EXPECT_NE(left.find("rank 1 left"), std::string::npos) << left;
}

TEST(ThreadGroupTest, JoinNamesARankThatNeverJoins) {
  std::string error;
  auto result = OnThreads(3, [&](const RankContext& c) {
    if (c.rank == 2) return;
    const std::string e =
        ErrorOf([&] { ThreadGroup::Join(c, milliseconds(200), "test"); });
    if (c.rank == 0) error = e;
  });
  ASSERT_TRUE(result.ok()) << result.Describe();
  EXPECT_NE(error.find("rank 2 did not join"), std::string::npos) << error;
}

TEST(ThreadGroupTest, JoinRefusesBadArgumentsTwinsAndWorldSizes) {
  LocalStore store;
  EXPECT_THROW(ThreadGroup::Join(ThreadsContext(nullptr, 0, 1), kLong, "t"),
               std::invalid_argument);
  EXPECT_THROW(ThreadGroup::Join(ThreadsContext(&store, 1, 1), kLong, "t"),
               std::invalid_argument);
  EXPECT_THROW(ThreadGroup::Join(ThreadsContext(&store, -1, 2), kLong, "t"),
               std::invalid_argument);
  EXPECT_THROW(ThreadGroup::Join(ThreadsContext(&store, 0, 0), kLong, "t"),
               std::invalid_argument);
  RankContext no_peers = ThreadsContext(&store, 0, 2);
  no_peers.peers.clear();
  EXPECT_THROW(ThreadGroup::Join(no_peers, kLong, "t"), std::invalid_argument);

  // Two threads both claiming rank 0 of a world of 1 under one prefix.
  LocalStore twins_store;
  std::atomic<int> twins{0};
  std::vector<std::shared_ptr<ThreadGroup>> keep(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      const std::string e = ErrorOf([&] {
        keep[t] =
            ThreadGroup::Join(ThreadsContext(&twins_store, 0, 1), kLong, "t");
      });
      if (e.find("joined twice") != std::string::npos) twins.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  // Whichever comes second is refused (the store counts the claims).
  EXPECT_EQ(twins.load(), 1);
}

TEST(ThreadGroupTest, RanksDisagreeingOnWorldSizeFail) {
  std::string error;
  auto result = OnThreads(2, [&](const RankContext& c) {
    // Rank 1 thinks the world is 2, rank 0 that it is 1: rank 0 joins alone
    // and keeps its group until rank 1 has tried. Rank 1 tries only once
    // rank 0's group exists (had it come first, its world of 2 would have
    // been the group's, and rank 0 the one refused).
    const int world = c.rank == 0 ? 1 : 2;
    std::shared_ptr<ThreadGroup> group;
    if (c.rank == 1) c.store->Get("zero_joined", kLong);
    const std::string e = ErrorOf(
        [&] { group = ThreadGroup::Join(WithWorld(c, world), kLong, "test"); });
    if (c.rank == 1) {
      error = e;
      c.store->Set("tried", "1");
    } else {
      c.store->Set("zero_joined", e.empty() ? "1" : e);
      c.store->Get("tried", kLong);
    }
  });
  ASSERT_TRUE(result.ok()) << result.Describe();
  EXPECT_NE(error.find("world size"), std::string::npos) << error;
}

// A rank that the job's peer information puts in another process is named
// as such, before anything is asked of the store.
TEST(ThreadGroupTest, RanksInAnotherProcessAreRefused) {
  LocalStore store;
  RankContext c = ThreadsContext(&store, 0, 2);
  c.peers[1].pid = 1;
  const std::string error =
      ErrorOf([&] { ThreadGroup::Join(c, kLong, "test"); });
  EXPECT_NE(error.find("different processes"), std::string::npos) << error;
  EXPECT_NE(error.find("use ipc_ring"), std::string::npos) << error;
  EXPECT_FALSE(store.Check({"claim/0"}));
  c.peers[1].pid = getpid();
  c.peers[1].start_time = 2;  // this pid, another process
  EXPECT_NE(ErrorOf([&] {
              ThreadGroup::Join(c, kLong, "test");
            }).find("different processes"),
            std::string::npos);
}

// Two jobs under the same prefix in one process, each with its own store,
// never meet.
TEST(ThreadGroupTest, JobsWithTheSamePrefixStayApart) {
  std::vector<std::string> seen(2);
  std::vector<std::thread> jobs;
  for (int job = 0; job < 2; ++job) {
    jobs.emplace_back([&, job] {
      auto result = OnThreads(2, [&](const RankContext& c) {
        auto group = ThreadGroup::Join(c, kLong, "t");
        auto all = group->Exchange(c.rank, "job" + std::to_string(job), kLong);
        if (c.rank == 0) seen[job] = all[0] + "," + all[1];
        group->Leave(c.rank);
      });
      if (!result.ok()) seen[job] = result.Describe();
    });
  }
  for (auto& j : jobs) j.join();
  EXPECT_EQ(seen[0], "job0,job0");
  EXPECT_EQ(seen[1], "job1,job1");
}

TEST(ThreadGroupTest, WaitForPeersToLeaveHasADeadline) {
  auto result = OnThreads(2, [&](const RankContext& c) {
    auto group = ThreadGroup::Join(c, kLong, "test");
    if (c.rank == 0) {
      const auto start = Clock::now();
      if (group->WaitForPeersToLeave(0, milliseconds(200))) {
        throw std::runtime_error("rank 1 had not left");
      }
      if (SecondsSince(start) < 0.2) throw std::runtime_error("too early");
      c.store->Set("go", "1");
      if (!group->WaitForPeersToLeave(0, kLong)) {
        throw std::runtime_error("rank 1 left but the wait timed out");
      }
    } else {
      c.store->Get("go", kLong);
      group->Leave(1);
    }
  });
  EXPECT_TRUE(result.ok()) << result.Describe();
}

TEST(RankThreadsTest, ContextsAndSharedStore) {
  std::vector<int> ranks(4, -1);
  auto result = RunRankThreads(
      4,
      [&](const RankContext& c) {
        ranks[c.rank] = c.rank + 10 * c.world_size + 100 * c.local_rank;
        c.store->Add("count", 1);
        c.store->Set("r" + std::to_string(c.rank), "x");
        for (int q = 0; q < c.world_size; ++q) {
          c.store->Get("r" + std::to_string(q), kLong);
        }
      },
      milliseconds(1000));
  ASSERT_TRUE(result.ok()) << result.Describe();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ranks[r], r + 40 + 100 * r);
  EXPECT_THROW(RunRankThreads(
                   0, [](const RankContext&) {}, kLong),
               std::invalid_argument);
}

TEST(RankThreadsTest, FailuresAreReportedPerRank) {
  auto result = RunRankThreads(
      3,
      [](const RankContext& c) {
        if (c.rank == 1) throw CommError("boom on 1");
      },
      milliseconds(1000));
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.errors[0], "");
  EXPECT_EQ(result.errors[1], "boom on 1");
  EXPECT_NE(result.Describe().find("rank 1: boom on 1"), std::string::npos);
}

// A rank still running `grace` after another failed is reported stuck and
// the runner returns instead of hanging.
TEST(RankThreadsTest, StuckRanksAfterAFailureAreReportedInTime) {
  // Never freed (static, so not reported as leaks): the stuck thread
  // outlives the call and may still be returning from the body at the end.
  static auto* release = new std::atomic<bool>(false);
  static auto* finished = new std::atomic<bool>(false);
  static auto* body = new std::function<void(const RankContext&)>(
      [release, finished](const RankContext& c) {
        if (c.rank == 0) throw CommError("rank 0 failed");
        while (!release->load()) std::this_thread::sleep_for(milliseconds(5));
        finished->store(true);
      });
  const auto start = Clock::now();
  auto result = RunRankThreads(2, *body, milliseconds(300));
  EXPECT_LT(SecondsSince(start), 10.0);
  EXPECT_EQ(result.stuck, std::vector<int>{1});
  EXPECT_NE(result.Describe().find("rank 1: still running"), std::string::npos);
  release->store(true);
  while (!finished->load()) std::this_thread::sleep_for(milliseconds(5));
}

}  // namespace
}  // namespace ringlab::comm
