// shm_ring's own tests: paths forced through its tuning (the ring with tiny
// chunks, streaming stores, one-shot against ring; for the allreduce and the
// allgather), bad tuning refused before any rank joins, CPU pinning,
// creation errors. What every backend must do —
// exact sums, broadcasts, mismatches, dead and absent ranks — is the
// conformance suite's (conformance_test.cc), run over shm_ring too.
#include "comm/shm_ring/shm_ring.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/dtype/kernels.h"
#include "comm/store/store.h"
#include "comm/testing/conformance.h"
#include "comm/testing/exact_sum.h"
#include "comm/testing/leftovers.h"
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

// Orphans of the ranks come back to this process, where Leftovers sees them.
const bool kAdopted = (testing::AdoptOrphans(), true);

// No process, segment or listening port may outlive a job.
void ExpectNoLeftovers() {
  for (const std::string& leftover : testing::Leftovers()) {
    ADD_FAILURE() << "left behind: " << leftover;
  }
}

void ExpectAllExitedZero(const std::vector<RankResult>& results) {
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
  }
  ExpectNoLeftovers();
}

std::unique_ptr<Communicator> MakeRing(
    const RankContext& c, const ShmRingTuning& tuning = {},
    milliseconds timeout = milliseconds(30000)) {
  CommOptions options;
  options.timeout = timeout;
  options.tuning = tuning.ToTuning();
  return CreateCommunicator("shm_ring", c, options);
}

using Stores = ShmRingTuning::Stores;

// The tunings that force each path (with every other setting at its
// default): everything but count 0 through the ring, in 4 KiB chunks so that
// segments span many chunks and the wavefront pipeline and mailbox
// wrap-around are exercised; through the staged path with a 64 KiB area, so
// that large counts go through in many pieces and segments are ragged;
// through the one-shot banks.
ShmRingTuning RingOnly(Stores stores) {
  ShmRingTuning t;
  t.oneshot_bytes = 0;
  t.ring_bytes = 0;
  t.chunk_bytes = 4096;
  t.stores = stores;
  return t;
}
ShmRingTuning StagedOnly() {
  ShmRingTuning t;
  t.oneshot_bytes = 0;
  t.stage_bytes = 65536;
  t.ring_bytes = size_t{1} << 30;
  return t;
}
ShmRingTuning OneShotOnly(size_t bytes) {
  ShmRingTuning t;
  t.oneshot_bytes = bytes;
  return t;
}

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Runs AllReduce (sum and avg) for each count and checks each element with
// 0 ulp tolerance: the inputs make every sum exact, and avg is that exact
// sum divided by N once, the same float division the expectation does.
void RunExactSums(int world, const std::vector<size_t>& counts,
                  const ShmRingTuning& tuning) {
  auto results = RunRanks(
      world,
      [&](const RankContext& c) {
        auto comm = MakeRing(c, tuning);
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
}

std::vector<size_t> CountsFor(int world) {
  return {0,    1,     static_cast<size_t>(world - 1),
          2,    3,     5,
          17,   127,   1021,
          4099, 65537, 262147};
}

// Everything through the ring in 4 KiB chunks, with cached and with
// streaming (non-temporal) mailbox stores.
TEST(ShmRingTest, ExactSumsRingOnlySmallChunks) {
  for (Stores stores : {Stores::kCached, Stores::kStreaming}) {
    for (int world : {2, 3, 4}) {
      SCOPED_TRACE("world " + std::to_string(world) + " stores " +
                   std::to_string(static_cast<int>(stores)));
      RunExactSums(world, CountsFor(world), RingOnly(stores));
    }
  }
}

// Everything but count 0 through the staged allreduce in 64 KiB pieces.
TEST(ShmRingTest, ExactSumsStagedInSmallPieces) {
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    RunExactSums(world, CountsFor(world), StagedOnly());
  }
}

// Rank r's element i in the allgather tests: distinct across ranks and
// exact as a float.
float GatherInput(int rank, size_t i) {
  return static_cast<float>((static_cast<size_t>(rank) << 20) + i % 1048573);
}

// For each count: an AllGather out of place, one in place (each checked bit
// for bit), then an AllReduce (exact sums), so that the allgather's use of
// the banks, mailboxes and staging areas alternates with the allreduce's.
void RunAllGathers(int world, const std::vector<size_t>& counts,
                   const ShmRingTuning& tuning) {
  auto results = RunRanks(
      world,
      [&](const RankContext& c) {
        auto comm = MakeRing(c, tuning);
        for (size_t count : counts) {
          std::vector<float> mine(count);
          for (size_t i = 0; i < count; ++i) mine[i] = GatherInput(c.rank, i);
          for (bool in_place : {false, true}) {
            std::vector<float> all(world * count, -1.0f);
            float* own = all.data() + c.rank * count;
            if (in_place) std::copy(mine.begin(), mine.end(), own);
            comm->AllGather(in_place ? own : mine.data(), all.data(), count);
            for (size_t j = 0; j < all.size(); ++j) {
              Check(
                  all[j] == GatherInput(static_cast<int>(j / count), j % count),
                  std::string(in_place ? "in-place " : "") + "count " +
                      std::to_string(count) + ": element " + std::to_string(j));
            }
          }
          std::vector<float> x(count);
          for (size_t i = 0; i < count; ++i) x[i] = ExactSumInput(c.rank, i);
          comm->AllReduce(x.data(), count, ReduceOp::kSum);
          CheckExactAllReduce(x.data(), count, world, ReduceOp::kSum);
        }
      },
      milliseconds(120000));
  ExpectAllExitedZero(results);
}

// The conformance suite's 16-bit cases (exact sums and averages, unaligned
// buffers, bitwise equality, broadcast and allgather, bus bytes) with each
// path forced, at every world size: the ring in 4 KiB chunks (cached and
// streaming stores: the 16-bit partial sums take the plain ones), the
// staged path in 64 KiB pieces, the one-shot banks for everything up to
// 64 KiB; the registered path with Allocate'd memory.
TEST(ShmRingTest, SixteenBitTypesOnEveryPath) {
  const std::pair<const char*, ShmRingTuning> paths[] = {
      {"ring cached", RingOnly(Stores::kCached)},
      {"ring streaming", RingOnly(Stores::kStreaming)},
      {"staged", StagedOnly()},
      {"one-shot", OneShotOnly(65536)}};
  const testing::BackendTraits traits = testing::TraitsOf("shm_ring");
  for (const auto& [path, tuning] : paths) {
    for (int world : {2, 3, 4}) {
      SCOPED_TRACE(std::string(path) + " world " + std::to_string(world));
      auto results = RunRanks(
          world,
          [&, &tuning = tuning](const RankContext& c) {
            auto comm = MakeRing(c, tuning);
            for (const testing::ConformanceCase& k : testing::DataTypeCases()) {
              if (world >= k.min_world) k.run(*comm, traits);
            }
          },
          milliseconds(120000));
      ExpectAllExitedZero(results);
    }
  }
  // Registered memory: each type's sum of exact inputs, zero-copy.
  auto results = RunRanks(
      3,
      [&](const RankContext& c) {
        auto comm = MakeRing(c, ShmRingTuning{});
        const size_t count = 100003;
        uint16_t* x = reinterpret_cast<uint16_t*>(comm->Allocate(count));
        for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
          const auto& k = dtype::KernelsFor(type);
          for (size_t i = 0; i < count; ++i) {
            const float v = ExactSumInput(c.rank, i);
            k.narrow(x + i, &v, 1);
          }
          comm->AllReduce(x, count, type, ReduceOp::kSum);
          for (size_t i = 0; i < count; ++i) {
            float got, want = 0;
            k.widen(&got, x + i, 1);
            for (int r = 0; r < 3; ++r) want += ExactSumInput(r, i);
            Check(got == want, std::string(DataTypeName(type)) +
                                   " registered: element " + std::to_string(i));
          }
        }
      },
      milliseconds(120000));
  ExpectAllExitedZero(results);
}

// AllGather through each path, forced at every world size: the ring with
// 4 KiB chunks (blocks of many chunks forwarded round every rank, mailbox
// wrap-around; cached and streaming stores), the staged path with a 64 KiB
// area (many pieces), and the one-shot banks.
TEST(ShmRingTest, AllGatherEveryPath) {
  const std::vector<size_t> counts = {0, 1, 3, 1021, 4099, 65537, 262147};
  const std::pair<const char*, ShmRingTuning> paths[] = {
      {"ring cached", RingOnly(Stores::kCached)},
      {"ring streaming", RingOnly(Stores::kStreaming)},
      {"staged", StagedOnly()},
      {"one-shot", OneShotOnly(16 << 20)},
  };
  for (const auto& [path, tuning] : paths) {
    for (int world : {2, 3, 4}) {
      SCOPED_TRACE(std::string(path) + " world " + std::to_string(world));
      RunAllGathers(world, counts, tuning);
    }
  }
}

// A rank killed in the middle of allgathers, on the ring and on the staged
// path: the survivors fail by themselves, well before their 30 s deadline,
// naming it.
TEST(ShmRingTest, RankKilledMidAllGatherIsNamed) {
  ShmRingTuning ring, staged;
  ring.ring_bytes = 0;
  ring.chunk_bytes = 4096;
  staged.ring_bytes = size_t{1} << 30;
  staged.stage_bytes = 65536;
  for (const ShmRingTuning& tuning : {ring, staged}) {
    SCOPED_TRACE(*tuning.ring_bytes == 0 ? "ring" : "staged");
    constexpr int world = 3, victim = 2;
    constexpr size_t count = size_t{1} << 20;
    const auto start = std::chrono::steady_clock::now();
    auto results = RunRanks(
        world,
        [&](const RankContext& c) {
          auto comm = MakeRing(c, tuning, milliseconds(30000));
          std::vector<float> mine(count, 1.0f), all(world * count);
          comm->AllGather(mine.data(), all.data(), count);
          if (c.rank == victim) {
            std::thread([] {
              std::this_thread::sleep_for(milliseconds(5));
              kill(getpid(), SIGKILL);
            }).detach();
          }
          for (;;) comm->AllGather(mine.data(), all.data(), count);
        },
        milliseconds(60000));
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(15))
        << Describe(results);
    EXPECT_EQ(results[victim].term_signal, SIGKILL) << Describe(results);
    for (const RankResult& r : results) {
      if (r.rank == victim) continue;
      EXPECT_EQ(r.exit_code, 1) << Describe(results);
      EXPECT_NE(r.output.find("rank 2"), std::string::npos)
          << Describe(results);
      EXPECT_NE(r.output.find("AllGather"), std::string::npos)
          << Describe(results);
    }
    ExpectNoLeftovers();
  }
}

// Inputs whose sums round: the order matters, and every rank must still hold
// the same bits (each element is reduced once, by one rank, in a fixed
// order), through the ring, the staged path and the one-shot path.
TEST(ShmRingTest, BitwiseIdenticalAcrossRanks) {
  ShmRingTuning ring, staged, oneshot = OneShotOnly(1 << 20);
  ring.oneshot_bytes = 0;
  ring.ring_bytes = 0;
  staged.oneshot_bytes = 0;
  staged.stage_bytes = 65536;
  for (ShmRingTuning tuning : {ring, staged, oneshot}) {
    tuning.chunk_bytes = 8192;
    const int world = 3;
    const size_t count = 100003;
    auto results = RunRanks(
        world,
        [&](const RankContext& c) {
          auto comm = MakeRing(c, tuning);
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

// A store that only counts what is asked of it (and has nothing).
class CountingStore : public Store {
 public:
  void Set(const std::string&, const std::string&) override { ++calls; }
  std::string Get(const std::string& key, milliseconds timeout) override {
    ++calls;
    std::this_thread::sleep_for(timeout);
    throw StoreTimeout("CountingStore: no key " + key);
  }
  int64_t Add(const std::string&, int64_t) override {
    ++calls;
    return 0;
  }
  void Wait(const std::vector<std::string>& keys,
            milliseconds timeout) override {
    Get(keys.at(0), timeout);
  }
  int calls = 0;
};

// Tuning outside its range is refused by CreateCommunicator, naming the
// setting, its value, its range and its variable, before shm_ring starts to
// join: at once, though the job's other rank never comes (a join would wait
// for it until the 30 s deadline), and without a word to the store.
TEST(ShmRingTest, BadTuningIsRefusedBeforeJoining) {
  CountingStore store;
  RankContext c;
  c.world_size = 2;
  c.store = &store;
  c.peers.resize(2);
  ShmRingTuning bad;
  bad.chunk_bytes = 12;
  const auto start = std::chrono::steady_clock::now();
  try {
    MakeRing(c, bad, milliseconds(30000));
    ADD_FAILURE() << "created with chunk_bytes 12";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "shm_ring.chunk_bytes = 12 is outside [4096, 67108864] "
                  "(RINGLAB_SHM_CHUNK_BYTES)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(store.calls, 0);
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
        ShmRingTuning tuning;
        tuning.debug = true;
        tuning.stores = Stores::kCached;
        auto comm = MakeRing(c, tuning);
      },
      milliseconds(30000));
  ExpectAllExitedZero(results);
  for (const RankResult& r : results) {
    EXPECT_NE(r.output.find("2 ranks on 2 CPUs -> not oversubscribed"),
              std::string::npos)
        << Describe(results);
  }
}

// A rank that exits while the ranks join, after the job's start (where every
// rank's peer information was gathered) but before it maps the segment, is
// named by every other rank within 0.5 s of its death, not at the join
// deadline (30 s here). Its death time travels through the store:
// steady_clock is the machine's monotonic clock, the same in every process.
TEST(ShmRingTest, RankExitingWhileJoiningIsNamedWithinHalfASecond) {
  constexpr int world = 3, victim = 2;
  auto results = RunRanks(
      world,
      [&](const RankContext& c) {
        if (c.rank == victim) {
          const auto now = std::chrono::steady_clock::now();
          c.store->Set("died_at",
                       std::to_string(now.time_since_epoch().count()));
          _exit(3);
        }
        CommOptions options;
        options.join_timeout = milliseconds(30000);
        std::string error;
        try {
          CreateCommunicator("shm_ring", c, options)->Barrier();
        } catch (const CommError& e) {
          error = e.what();
        }
        const auto noticed = std::chrono::steady_clock::now();
        Check(!error.empty(), "joined without rank 2");
        const std::chrono::steady_clock::time_point died(
            std::chrono::steady_clock::duration(
                std::stoll(c.store->Get("died_at", milliseconds(30000)))));
        Check(noticed - died < milliseconds(500),
              "noticed " + std::to_string((noticed - died).count() / 1000000) +
                  " ms after the death: " + error);
        Check(error.find("rank 2") != std::string::npos &&
                  error.find("died") != std::string::npos,
              "the error does not name the dead rank 2: " + error);
      },
      milliseconds(60000));
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, r.rank == victim ? 3 : 0) << Describe(results);
  }
  ExpectNoLeftovers();
}

// The store says where rank 0's segment is; the segment's header carries a
// tag only holders of the job's secret can compute. A rank of another job
// (here: a rank given another secret) refuses the file, and rank 0 names it.
TEST(ShmRingTest, ASegmentOfAnotherJobIsRefused) {
  auto results = RunRanks(
      2,
      [&](const RankContext& c) {
        RankContext mine = c;
        if (c.rank == 1) mine.job_secret = std::string(32, 'x');
        CommOptions options;
        options.join_timeout = milliseconds(20000);
        CreateCommunicator("shm_ring", mine, options);
      },
      milliseconds(60000));
  EXPECT_EQ(results[1].exit_code, 1) << Describe(results);
  EXPECT_NE(results[1].output.find("is not this job's segment"),
            std::string::npos)
      << Describe(results);
  EXPECT_EQ(results[0].exit_code, 1) << Describe(results);
  EXPECT_NE(results[0].output.find("rank 1"), std::string::npos)
      << Describe(results);
  ExpectNoLeftovers();
}

// (Bad arguments to the collectives: the conformance suite.)
TEST(ShmRingTest, CreationErrors) {
  RankContext no_store;
  EXPECT_THROW(CreateCommunicator("shm_ring", no_store, CommOptions{}),
               std::invalid_argument);
  EXPECT_THROW(CreateCommunicator("no_such_backend", no_store, CommOptions{}),
               std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::comm
