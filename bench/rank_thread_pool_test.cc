// RankThreadPool, on the CPU: one thread per rank kept
// across jobs, all ranks lined up by Barrier, failures and a stuck rank
// reported with deadlines.
#include "bench/rank_thread_pool.h"

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ringlab::bench {
namespace {

using std::chrono::milliseconds;

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(RankThreadPoolTest, EveryRankKeepsItsThread) {
  RankThreadPool pool(4, milliseconds(10000));
  std::vector<std::thread::id> first(4), second(4);
  auto results = pool.Run([&](int r) {
    first[r] = std::this_thread::get_id();
    return r * 1.5;
  });
  EXPECT_EQ(results, (std::vector<double>{0, 1.5, 3, 4.5}));
  pool.Run([&](int r) {
    second[r] = std::this_thread::get_id();
    return 0.0;
  });
  EXPECT_EQ(first, second);
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 4u);
}

TEST(RankThreadPoolTest, BarrierLinesUpEveryRank) {
  const int ranks = 4, rounds = 2000;
  RankThreadPool pool(ranks, milliseconds(10000));
  std::vector<std::atomic<int>> entered(rounds);
  std::atomic<int> early{0};
  pool.Run([&](int r) {
    for (int k = 0; k < rounds; ++k) {
      entered[k].fetch_add(1);
      pool.Barrier(r);
      if (entered[k].load() != ranks) early.fetch_add(1);
    }
    return 0.0;
  });
  EXPECT_EQ(early.load(), 0);
}

TEST(RankThreadPoolTest, FailuresNameTheirRankAndThePoolGoesOn) {
  RankThreadPool pool(3, milliseconds(10000));
  const std::string error = ErrorOf([&] {
    pool.Run([](int r) -> double {
      if (r == 1) throw std::runtime_error("boom");
      return 0;
    });
  });
  EXPECT_EQ(error, "rank 1: boom");
  EXPECT_EQ(pool.Run([](int r) { return double(r); }),
            (std::vector<double>{0, 1, 2}));
}

TEST(RankThreadPoolTest, BarrierTimesOutNamingAbsentRanks) {
  RankThreadPool pool(3, milliseconds(300));
  std::string error;
  const std::string run_error = ErrorOf([&] {
    pool.Run([&](int r) -> double {
      if (r == 2) return 0;  // never reaches the barrier
      pool.Barrier(r);
      return 0;
    });
  });
  EXPECT_NE(run_error.find("barrier timed out"), std::string::npos)
      << run_error;
  EXPECT_NE(run_error.find("rank(s) 2"), std::string::npos) << run_error;
}

// A rank that never finishes: Run returns at its deadline, and the pool
// refuses further jobs rather than hand out a new one under a running one.
TEST(RankThreadPoolTest, StuckRankEndsRunAtTheDeadline) {
  // Never freed (static, so not reported as leaks): the stuck thread
  // outlives the test body.
  static auto* release = new std::atomic<bool>(false);
  static auto* pool = new RankThreadPool(2, milliseconds(300));
  static auto* job = new std::function<double(int)>([](int r) {
    while (r == 1 && !release->load()) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    return 0.0;
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ErrorOf([&] { pool->Run(*job); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(error.find("1 of 2 rank(s) did not finish"), std::string::npos)
      << error;
  EXPECT_NE(ErrorOf([&] { pool->Run(*job); }).find("unusable"),
            std::string::npos);
  release->store(true);
}

}  // namespace
}  // namespace ringlab::bench
