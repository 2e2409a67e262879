#include "comm/shm_ring.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "comm/testing/exact_sum.h"
#include "comm/testing/multi_process.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;
using testing::CheckExactAllReduce;
using testing::Describe;
using testing::ExactSumInput;
using testing::RankResult;
using testing::RunRanks;

std::set<std::string> ShmRinglabNames() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "ringlab-", 8) == 0) names.insert(e->d_name);
    }
    closedir(d);
  }
  return names;
}

// Segments other tests create are unlinked within milliseconds; one of ours
// that survives is a leak.
void ExpectNoLeakedSegments(const std::set<std::string>& before) {
  std::set<std::string> after = ShmRinglabNames();
  for (int i = 0; i < 20 && after != before; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    after = ShmRinglabNames();
  }
  for (const std::string& n : after) {
    EXPECT_TRUE(before.count(n)) << "leaked /dev/shm/" << n;
  }
}

void ExpectAllExitedZero(const std::vector<RankResult>& results) {
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
  }
}

std::unique_ptr<Communicator> MakeRing(
    const RankContext& c, milliseconds timeout = milliseconds(30000)) {
  CommOptions options;
  options.timeout = timeout;
  options.local_rank = c.local_rank;
  return CreateCommunicator("shm_ring", c, options);
}

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Runs AllReduce (sum and avg) for each count and checks each element with
// 0 ulp tolerance: the inputs make every sum exact, and avg is that exact
// sum divided by N once, the same float division the expectation does.
void RunExactSums(int world, const std::vector<size_t>& counts,
                  const char* oneshot_bytes, const char* chunk_bytes,
                  const char* stream_stores = nullptr) {
  auto before = ShmRinglabNames();
  auto results = RunRanks(
      world,
      [&](const RankContext& c) {
        if (oneshot_bytes)
          setenv("RINGLAB_SHM_ONESHOT_BYTES", oneshot_bytes, 1);
        if (chunk_bytes) setenv("RINGLAB_SHM_CHUNK_BYTES", chunk_bytes, 1);
        if (stream_stores) {
          setenv("RINGLAB_SHM_STREAM_STORES", stream_stores, 1);
        }
        auto comm = MakeRing(c);
        Check(comm->rank() == c.rank && comm->world_size() == world,
              "rank/world_size");
        for (size_t count : counts) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
            std::vector<float> x(count);
            for (size_t i = 0; i < count; ++i) x[i] = ExactSumInput(c.rank, i);
            comm->AllReduce(x.data(), count, op);
            CheckExactAllReduce(x.data(), count, world, op);
          }
        }
      },
      milliseconds(120000));
  ExpectAllExitedZero(results);
  ExpectNoLeakedSegments(before);
}

std::vector<size_t> CountsFor(int world) {
  return {0,    1,     static_cast<size_t>(world - 1),
          2,    3,     5,
          17,   127,   1021,
          4099, 65537, 262147};
}

// Default thresholds: small counts one-shot, large ones through the ring.
TEST(ShmRingTest, ExactSumsDefaultPaths) {
  for (int world : {1, 2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    RunExactSums(world, CountsFor(world), nullptr, nullptr);
  }
}

// Everything through the ring, with 4 KiB chunks so that segments span many
// chunks and the wavefront pipeline and mailbox wrap-around are exercised;
// with cached and with streaming (non-temporal) mailbox stores.
TEST(ShmRingTest, ExactSumsRingOnlySmallChunks) {
  for (const char* stream : {"0", "1"}) {
    for (int world : {2, 3, 4}) {
      SCOPED_TRACE("world " + std::to_string(world) + " stream " + stream);
      RunExactSums(world, CountsFor(world), "0", "4096", stream);
    }
  }
}

TEST(ShmRingTest, ExactSums64MiB) {
  const size_t count = (64 << 20) / sizeof(float);
  RunExactSums(2, {count}, nullptr, nullptr);
  RunExactSums(4, {count + 3}, nullptr, nullptr);
}

// Inputs whose sums round: the order matters, and every rank must still hold
// the same bits (each element is reduced once, by one rank, in ring order).
TEST(ShmRingTest, BitwiseIdenticalAcrossRanks) {
  for (const char* oneshot : {"0", "1048576"}) {
    const int world = 3;
    const size_t count = 100003;
    auto results = RunRanks(
        world,
        [&](const RankContext& c) {
          setenv("RINGLAB_SHM_ONESHOT_BYTES", oneshot, 1);
          setenv("RINGLAB_SHM_CHUNK_BYTES", "8192", 1);
          auto comm = MakeRing(c);
          std::mt19937 rng(1234 + c.rank);
          std::uniform_real_distribution<float> u(-1, 1);
          std::vector<float> x(count);
          for (float& v : x) v = u(rng) * std::ldexp(1.0f, rng() % 20);
          comm->AllReduce(x.data(), count, ReduceOp::kAvg);
          std::string bytes(reinterpret_cast<const char*>(x.data()),
                            count * sizeof(float));
          c.store->Set("result/" + std::to_string(c.rank), bytes);
          for (int r = 0; r < world; ++r) {
            Check(c.store->Get("result/" + std::to_string(r),
                               milliseconds(30000)) == bytes,
                  "rank " + std::to_string(r) + " holds different bits");
          }
        },
        milliseconds(60000));
    ExpectAllExitedZero(results);
  }
}

TEST(ShmRingTest, BroadcastAndBarrier) {
  for (int world : {1, 2, 3, 4}) {
    auto results = RunRanks(
        world,
        [&](const RankContext& c) {
          setenv("RINGLAB_SHM_CHUNK_BYTES", "4096", 1);
          auto comm = MakeRing(c);
          for (size_t count : {size_t{0}, size_t{1}, size_t{1000},
                               size_t{17000}, size_t{300001}}) {
            for (int root = 0; root < world; ++root) {
              std::vector<float> x(count);
              for (size_t i = 0; i < count; ++i)
                x[i] = ExactSumInput(c.rank, i);
              comm->Broadcast(x.data(), count, root);
              for (size_t i = 0; i < count; ++i) {
                Check(x[i] == ExactSumInput(root, i),
                      "broadcast count " + std::to_string(count) + " root " +
                          std::to_string(root) + " element " +
                          std::to_string(i));
              }
              comm->Barrier();
            }
          }
          // Mixed kinds back to back reuse the one-shot banks safely.
          for (int i = 0; i < 200; ++i) {
            float v = static_cast<float>(c.rank + i);
            comm->AllReduce(&v, 1, ReduceOp::kSum);
            float want = 0;
            for (int r = 0; r < world; ++r) want += static_cast<float>(r + i);
            Check(v == want, "iteration " + std::to_string(i));
            if (i % 3 == 0) comm->Barrier();
            if (i % 5 == 0) comm->Broadcast(&v, 1, i % world);
          }
          Check(comm->bytes_sent() > 0 || world == 1, "bytes_sent");
        },
        milliseconds(120000));
    ExpectAllExitedZero(results);
  }
}

TEST(ShmRingTest, MismatchedCallsAreReported) {
  struct Case {
    const char* name;
    const char* oneshot;
    size_t count0;  // every rank but rank 1
    size_t count1;
    ReduceOp op1;
  };
  for (const Case& k :
       {Case{"count, inline vs one-shot", nullptr, 10, 12, ReduceOp::kSum},
        Case{"op, inline", nullptr, 10, 10, ReduceOp::kAvg},
        Case{"count, one-shot", "4096", 500, 501, ReduceOp::kSum},
        Case{"count, ring", "0", 10, 100000, ReduceOp::kSum},
        Case{"op, ring", "0", 10, 10, ReduceOp::kAvg}}) {
    SCOPED_TRACE(k.name);
    const int world = 3;
    auto results = RunRanks(
        world,
        [&](const RankContext& c) {
          if (k.oneshot) setenv("RINGLAB_SHM_ONESHOT_BYTES", k.oneshot, 1);
          auto comm = MakeRing(c, milliseconds(20000));
          std::vector<float> x(200000, 1.0f);
          bool odd = c.rank == 1;
          comm->AllReduce(x.data(), odd ? k.count1 : k.count0,
                          odd ? k.op1 : ReduceOp::kSum);
        },
        milliseconds(60000));
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 1) << Describe(results);
      EXPECT_NE(r.output.find("mismatched"), std::string::npos)
          << Describe(results);
    }
  }
}

TEST(ShmRingTest, KilledRankIsNamedBySurvivorsBeforeTheDeadline) {
  auto before = ShmRinglabNames();
  const int world = 3;
  const int victim = 2;
  auto start = std::chrono::steady_clock::now();
  auto results = RunRanks(
      world,
      [&](const RankContext& c) {
        auto comm = MakeRing(c, milliseconds(30000));
        std::vector<float> x((16 << 20) / sizeof(float), 1.0f);
        if (c.rank == victim) {
          std::thread([] {
            std::this_thread::sleep_for(milliseconds(50));
            kill(getpid(), SIGKILL);
          }).detach();
        }
        for (;;) comm->AllReduce(x.data(), x.size(), ReduceOp::kAvg);
      },
      milliseconds(60000));
  auto elapsed = std::chrono::steady_clock::now() - start;
  // Well inside the 30 s deadline: survivors notice the pid is gone.
  EXPECT_LT(elapsed, std::chrono::seconds(15)) << Describe(results);
  EXPECT_EQ(results[victim].term_signal, SIGKILL) << Describe(results);
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(results[r].exit_code, 1) << Describe(results);
    EXPECT_NE(results[r].output.find("rank 2"), std::string::npos)
        << Describe(results);
    EXPECT_NE(results[r].output.find("died"), std::string::npos)
        << Describe(results);
  }
  ExpectNoLeakedSegments(before);
}

TEST(ShmRingTest, AbsentRankTimesOutNamingIt) {
  const int world = 2;
  auto start = std::chrono::steady_clock::now();
  auto results = RunRanks(
      world,
      [&](const RankContext& c) {
        auto comm = MakeRing(c, milliseconds(1000));
        if (c.rank == 1) {
          std::this_thread::sleep_for(milliseconds(4000));
          return;  // never joins the collective
        }
        float v = 1;
        comm->AllReduce(&v, 1, ReduceOp::kSum);
      },
      milliseconds(30000));
  EXPECT_EQ(results[0].exit_code, 1) << Describe(results);
  EXPECT_NE(results[0].output.find("timed out after 1"), std::string::npos)
      << Describe(results);
  EXPECT_NE(results[0].output.find("rank 1"), std::string::npos)
      << Describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << Describe(results);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// A rank that never joins, and rank 0 killed while it waits for it: the old
// named segment stayed in /dev/shm (it was unlinked only once every rank had
// mapped it). Now nothing is ever named there, and the surviving peer, which
// has mapped the segment, names the dead rank 0 at once.
TEST(ShmRingTest, RankZeroKilledWhileJoiningLeavesNothing) {
  auto before = ShmRinglabNames();
  auto start = std::chrono::steady_clock::now();
  auto results = RunRanks(
      3,
      [&](const RankContext& c) {
        if (c.rank == 2) _exit(3);  // dies before creating its communicator
        if (c.rank == 0) {
          std::thread([] {
            std::this_thread::sleep_for(milliseconds(500));
            kill(getpid(), SIGKILL);
          }).detach();
        }
        // A short deadline: rank 1 normally sees rank 0 die at once, but on a
        // loaded machine (sanitizers, shards) rank 0 may die before it has
        // published anything to watch, and then the deadline names it.
        auto comm = MakeRing(c, milliseconds(5000));
      },
      // Then SIGKILL whoever still waits (as a launcher would stop them):
      // no rank survives to clean up after rank 0.
      milliseconds(12000));
  EXPECT_EQ(results[0].term_signal, SIGKILL) << Describe(results);
  EXPECT_EQ(results[1].exit_code, 1) << Describe(results);
  EXPECT_NE(results[1].output.find("rank 0"), std::string::npos)
      << Describe(results);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15))
      << Describe(results);
  ExpectNoLeakedSegments(before);
}

// A bad tuning variable on one rank fails every rank at once, naming it,
// instead of leaving the others to wait out their deadline.
TEST(ShmRingTest, BadEnvironmentOnOneRankFailsEveryRankFast) {
  for (int bad : {0, 1}) {
    SCOPED_TRACE("bad rank " + std::to_string(bad));
    auto start = std::chrono::steady_clock::now();
    auto results = RunRanks(
        3,
        [&](const RankContext& c) {
          if (c.rank == bad) setenv("RINGLAB_SHM_CHUNK_BYTES", "12", 1);
          auto comm = MakeRing(c, milliseconds(30000));
          float v = 1;
          comm->AllReduce(&v, 1, ReduceOp::kSum);
        },
        milliseconds(60000));
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(15))
        << Describe(results);
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 1) << Describe(results);
      EXPECT_NE(r.output.find("RINGLAB_SHM_CHUNK_BYTES=12"), std::string::npos)
          << Describe(results);
      if (r.rank != bad) {
        EXPECT_NE(r.output.find("rank " + std::to_string(bad)),
                  std::string::npos)
            << Describe(results);
      }
    }
  }
}

// Ranks pinned each to its own CPU (as allreduce_bench --pin does) are not
// oversubscribed: the decision uses the union of the ranks' masks, not one
// rank's single CPU.
TEST(ShmRingTest, PinnedRanksAreNotOversubscribed) {
  const int world = 2;
  if (sysconf(_SC_NPROCESSORS_ONLN) < world) GTEST_SKIP() << "needs 2 CPUs";
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  std::vector<int> cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &mine)) cpus.push_back(i);
  }
  if (static_cast<int>(cpus.size()) < world) {
    GTEST_SKIP() << "needs 2 CPUs in the affinity mask";
  }
  auto results = RunRanks(
      world,
      [&](const RankContext& c) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[c.rank], &one);
        Check(sched_setaffinity(0, sizeof(one), &one) == 0, "pin");
        setenv("RINGLAB_SHM_DEBUG", "1", 1);
        setenv("RINGLAB_SHM_STREAM_STORES", "0", 1);
        auto comm = MakeRing(c);
      },
      milliseconds(30000));
  ExpectAllExitedZero(results);
  for (const RankResult& r : results) {
    EXPECT_NE(r.output.find("2 ranks on 2 CPUs -> not oversubscribed"),
              std::string::npos)
        << Describe(results);
  }
}

TEST(ShmRingTest, ErrorsForBadArguments) {
  auto results = RunRanks(
      2,
      [&](const RankContext& c) {
        auto comm = MakeRing(c);
        float v = 0;
        bool threw = false;
        try {
          comm->Broadcast(&v, 1, 5);
        } catch (const std::invalid_argument&) {
          threw = true;
        }
        Check(threw, "root 5 accepted");
        comm->Barrier();  // still usable: nothing was started
      },
      milliseconds(30000));
  ExpectAllExitedZero(results);
  RankContext no_store;
  EXPECT_THROW(CreateCommunicator("shm_ring", no_store, CommOptions{}),
               std::invalid_argument);
  EXPECT_THROW(CreateCommunicator("no_such_backend", no_store, CommOptions{}),
               std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::comm
