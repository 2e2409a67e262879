// Runs the conformance suite (comm/testing/conformance.h) over every backend
// registered in this binary whose ranks are forked processes (RunRanks) or
// threads of one process (RunThreadRanks): each case at world sizes 1-4
// (mismatches at 3), then the faults a job must survive — a rank killed
// before, during and after joining and in the middle of a collective (for
// ranks as threads: a rank that leaves at those points), and a rank alive
// but absent — with the survivors exiting by themselves within their
// deadline, naming it. After every job, nothing may be left: no process, no
// ringlab segment, no listening port. Tests are registered at start-up, one
// per backend and case, so a backend added later is covered by linking it
// in. mpi runs the same cases under mpirun (conformance_mpi_test.sh); gloo,
// hier and mpi run them on real emulated hosts too (conformance_hosts_test,
// conformance_mpi_hosts_test).
#include "comm/testing/conformance.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/store/store.h"
#include "comm/testing/leftovers.h"
#include "comm/testing/multi_process.h"
#include "gtest/gtest.h"

namespace ringlab::comm::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void ExpectNoLeftovers() {
  for (const std::string& leftover : Leftovers()) {
    ADD_FAILURE() << "left behind: " << leftover;
  }
}

// Base of every test here: skips GPU backends where no device exists, saying
// so, and knows the world sizes this machine can run.
class BackendTest : public ::testing::Test {
 public:
  explicit BackendTest(std::string backend)
      : backend_(std::move(backend)), traits_(TraitsOf(backend_)) {}

 protected:
  void SetUp() override {
    if (!traits_.needs_gpu) return;
    std::string why;
    devices_ = CudaDevices(&why);
    ASSERT_GE(devices_, 0) << backend_ << " needs device buffers: " << why;
    if (devices_ == 0) GTEST_SKIP() << backend_ << ": no CUDA device: " << why;
  }
  bool WorldFits(int world) const {
    if (!traits_.ranks_are_threads && world > MaxProcessRanks()) return false;
    return !traits_.one_gpu_per_rank || world <= devices_;
  }
  // The job, with the ranks as this backend has them.
  std::vector<RankResult> Run(
      int world, const std::function<void(const RankContext&)>& body,
      milliseconds timeout) const {
    if (traits_.ranks_are_threads) return RunThreadRanks(world, body, timeout);
    // On several hosts where they divide the world (hier at 2 and 4 ranks:
    // 2 hosts of 1 and of 2).
    const int hosts =
        world % traits_.suite_hosts == 0 ? traits_.suite_hosts : 1;
    return RunRanks(world, body, timeout, hosts);
  }

  std::string backend_;
  BackendTraits traits_;
  int devices_ = 0;
};

class CaseTest : public BackendTest {
 public:
  CaseTest(std::string backend, ConformanceCase c)
      : BackendTest(std::move(backend)), case_(std::move(c)) {}

  void TestBody() override {
    if (const std::string why = SkipReason(case_, traits_); !why.empty()) {
      GTEST_SKIP() << backend_ << ": " << why;
    }
    std::vector<int> worlds;
    for (int w : case_.must_name.empty() ? std::vector<int>{1, 2, 3, 4}
                                         : std::vector<int>{3, 2}) {
      if (w >= case_.min_world && WorldFits(w)) worlds.push_back(w);
    }
    if (!case_.must_name.empty() && worlds.size() > 1) worlds.resize(1);
    if (worlds.empty()) {
      GTEST_SKIP() << backend_ << " runs at most "
                   << (traits_.one_gpu_per_rank ? devices_ : MaxProcessRanks())
                   << " rank(s) here (GPUs, RINGLAB_TEST_MAX_PROCESS_RANKS); "
                   << case_.name << " needs " << case_.min_world;
    }
    for (int world : worlds) {
      SCOPED_TRACE(backend_ + " world " + std::to_string(world));
      auto results = Run(
          world,
          [&](const RankContext& c) {
            auto comm = MakeRankCommunicator(backend_, c, milliseconds(60000),
                                             milliseconds(60000));
            case_.run(*comm, traits_);
          },
          milliseconds(300000));
      for (const RankResult& r : results) {
        EXPECT_EQ(r.exit_code, 0) << Describe(results);
      }
      const std::string missing = MustNameMissing(case_, results);
      EXPECT_TRUE(missing.empty()) << missing;
      ExpectNoLeftovers();
    }
  }

 private:
  ConformanceCase case_;
};

enum class Fault { kBeforeJoin, kDuringJoin, kAfterJoin, kMidCollective };

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kBeforeJoin:
      return "rank_killed_before_joining";
    case Fault::kDuringJoin:
      return "rank_killed_while_joining";
    case Fault::kAfterJoin:
      return "rank_killed_after_joining";
    case Fault::kMidCollective:
      return "rank_killed_mid_collective";
  }
  return "?";
}

class FaultTest : public BackendTest {
 public:
  FaultTest(std::string backend, Fault fault, int victim)
      : BackendTest(std::move(backend)),
        fault_(fault),
        registered_victim_(victim) {}

  void TestBody() override {
    if (!traits_.survives_peer_death) {
      GTEST_SKIP() << backend_ << ": a dead rank ends the whole job";
    }
    // 3 ranks, or 2 where fewer processes may share the GPU (the last rank
    // is then the victim `rank2` names).
    const int world = WorldFits(3) ? 3 : 2;
    const int victim = std::min(registered_victim_, world - 1);
    if (!WorldFits(world)) {
      GTEST_SKIP() << backend_ << " needs one GPU per rank: " << world
                   << " ranks, " << devices_ << " GPU(s)";
    }
    // Joining has 5 s and collectives 30 s: a survivor that noticed the
    // death only at a collective's deadline would exceed the bound (15 s,
    // more where a backend's join waits out several deadlines or, Gloo's,
    // a collective's may; BackendTraits).
    const milliseconds join(5000), op(30000);
    const auto start = Clock::now();
    auto results = RunRanks(
        world,
        [&](const RankContext& c) {
          const bool is_victim = c.rank == victim;
          if (is_victim && fault_ == Fault::kBeforeJoin) _exit(3);
          if (is_victim && fault_ == Fault::kDuringJoin) KillSelfSoon(3);
          auto comm = MakeRankCommunicator(backend_, c, op, join);
          auto buffer =
              MakeBuffer(comm->memory(), std::vector<float>((4 << 20), 1.0f));
          comm->Barrier();
          if (is_victim && fault_ == Fault::kAfterJoin) kill(getpid(), SIGKILL);
          comm->AllReduce(buffer->data(), 4 << 20, ReduceOp::kSum);
          if (is_victim && fault_ == Fault::kMidCollective) KillSelfSoon(10);
          for (;;) comm->AllReduce(buffer->data(), 4 << 20, ReduceOp::kAvg);
        },
        milliseconds(90000));
    const auto elapsed = Clock::now() - start;
    const bool joining =
        fault_ == Fault::kBeforeJoin || fault_ == Fault::kDuringJoin;
    const int deadlines = joining ? traits_.join_deadlines_to_notice_death : 1;
    const int op_deadlines = joining ? 0 : traits_.op_deadlines_to_notice_death;
    EXPECT_LT(elapsed,
              deadlines * join + op_deadlines * op + std::chrono::seconds(10))
        << Describe(results);
    if (fault_ == Fault::kBeforeJoin) {
      EXPECT_EQ(results[victim].exit_code, 3) << Describe(results);
    } else {
      EXPECT_EQ(results[victim].term_signal, SIGKILL) << Describe(results);
    }
    const std::string named = "rank " + std::to_string(victim);
    for (const RankResult& r : results) {
      if (r.rank == victim) continue;
      // Exit 1 is the survivor's own failure; a launcher's SIGKILL would
      // show as a signal.
      EXPECT_EQ(r.exit_code, 1) << Describe(results);
      EXPECT_NE(r.output.find(named), std::string::npos)
          << "survivor " << r.rank << " does not name " << named << "\n"
          << Describe(results);
    }
    ExpectNoLeftovers();
  }

 private:
  Fault fault_;
  int registered_victim_;  // the job's is clipped to its world
};

// Ranks as threads: a rank that stops (its thread returns, destroying its
// communicator) before joining, after joining, or between collectives while
// the others go on. The others fail by themselves, in time, naming it.
class RankLeavesTest : public BackendTest {
 public:
  RankLeavesTest(std::string backend, Fault when)
      : BackendTest(std::move(backend)), when_(when) {}

  void TestBody() override {
    const int world = 3, victim = 2;
    const milliseconds join(5000), op(30000);
    const auto start = Clock::now();
    auto results = Run(
        world,
        [&](const RankContext& c) {
          if (c.rank == victim && when_ == Fault::kBeforeJoin) return;
          auto comm = MakeRankCommunicator(backend_, c, op, join);
          auto buffer =
              MakeBuffer(comm->memory(), std::vector<float>((4 << 20), 1.0f));
          comm->Barrier();
          if (c.rank == victim && when_ == Fault::kAfterJoin) return;
          for (int i = 0;; ++i) {
            if (c.rank == victim && i == 3) return;
            comm->AllReduce(buffer->data(), 4 << 20, ReduceOp::kAvg);
          }
        },
        milliseconds(60000));
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(15))
        << Describe(results);
    const std::string named = "rank " + std::to_string(victim);
    for (const RankResult& r : results) {
      if (r.rank == victim) {
        EXPECT_EQ(r.exit_code, 0) << Describe(results);
        continue;
      }
      EXPECT_EQ(r.exit_code, 1) << Describe(results);
      EXPECT_NE(r.output.find(named), std::string::npos)
          << "survivor " << r.rank << " does not name " << named << "\n"
          << Describe(results);
    }
    ExpectNoLeftovers();
  }

 private:
  Fault when_;
};

// A rank that joins, then never calls the collective: the survivor's call
// ends at its deadline (1 s, timed from after joining), naming that rank.
class AbsentRankTest : public BackendTest {
 public:
  using BackendTest::BackendTest;
  void TestBody() override {
    if (!WorldFits(2)) GTEST_SKIP() << backend_ << ": needs 2 GPUs";
    auto results = Run(
        2,
        [&](const RankContext& c) {
          auto comm = MakeRankCommunicator(backend_, c, milliseconds(1000),
                                           milliseconds(60000));
          if (c.rank == 1) {
            // Alive, never calling: wait for the survivor's word.
            c.store->Get("absent/released", milliseconds(60000));
            return;
          }
          auto buffer = MakeBuffer(comm->memory(), {1.0f});
          const auto start = Clock::now();
          std::string error;
          try {
            comm->AllReduce(buffer->data(), 1, ReduceOp::kSum);
          } catch (const CommError& e) {
            error = e.what();
          }
          const auto waited = Clock::now() - start;
          c.store->Set("absent/released", "1");
          Check(!error.empty(), "AllReduce returned without the peer");
          Check(waited >= milliseconds(1000) && waited < milliseconds(10000),
                "failed after " + std::to_string(waited.count() / 1000000) +
                    " ms, not at its 1 s deadline: " + error);
          Check(error.find("timed out") != std::string::npos &&
                    error.find("rank 1") != std::string::npos,
                "the error does not name the absent rank 1: " + error);
        },
        milliseconds(120000));
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 0) << Describe(results);
    }
    ExpectNoLeftovers();
  }
};

void RegisterBackend(const std::string& backend) {
  const std::string suite = "Conformance/" + backend;
  for (const ConformanceCase& c : AllCases()) {
    ::testing::RegisterTest(
        suite.c_str(), c.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
        [=]() -> BackendTest* { return new CaseTest(backend, c); });
  }
  if (TraitsOf(backend).ranks_are_threads) {
    for (Fault f :
         {Fault::kBeforeJoin, Fault::kAfterJoin, Fault::kMidCollective}) {
      const std::string name =
          std::string(f == Fault::kBeforeJoin  ? "rank_leaves_before_joining"
                      : f == Fault::kAfterJoin ? "rank_leaves_after_joining"
                                               : "rank_leaves_between_calls") +
          "/rank2";
      ::testing::RegisterTest(
          suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
          [=]() -> BackendTest* { return new RankLeavesTest(backend, f); });
    }
  }
  for (Fault f : {Fault::kBeforeJoin, Fault::kDuringJoin, Fault::kAfterJoin,
                  Fault::kMidCollective}) {
    if (TraitsOf(backend).ranks_are_threads) break;
    for (int victim : {0, 2}) {
      const std::string name =
          std::string(FaultName(f)) + "/rank" + std::to_string(victim);
      ::testing::RegisterTest(
          suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
          [=]() -> BackendTest* { return new FaultTest(backend, f, victim); });
    }
  }
  ::testing::RegisterTest(
      suite.c_str(), "absent_rank_times_out_naming_it", nullptr, nullptr,
      __FILE__, __LINE__,
      [=]() -> BackendTest* { return new AbsentRankTest(backend); });
}

}  // namespace
}  // namespace ringlab::comm::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ringlab::comm::testing::AdoptOrphans();
  int covered = 0;
  for (const std::string& backend : ringlab::comm::RegisteredBackendNames()) {
    if (ringlab::comm::testing::TraitsOf(backend).needs_mpirun) continue;
    ringlab::comm::testing::RegisterBackend(backend);
    ++covered;
  }
  if (covered == 0) {
    std::fprintf(stderr, "conformance_test: no backend linked in\n");
    return 1;
  }
  return RUN_ALL_TESTS();
}
