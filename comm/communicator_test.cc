// The front (comm/communicator.h) over backends written here, so that what
// it promises every backend is checked on its own: arguments refused before
// a backend sees them, ops and types a description lacks refused as
// CommErrors, world size 1 answered without the backend, bus bytes counted
// in the type's size, a failure ending the communicator, the call agreement
// for backends that cannot tell (mismatches refused on every rank, ranks
// kept in step), and CreateCommunicator's checks of the context and the
// store each communicator gets. The conformance suite holds the real
// backends to the same through the front.
#include "comm/communicator.h"

#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/backend.h"
#include "comm/store/local_store.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

// What a backend was asked to do; AllReduce adds the peer's values (rank 0
// of two whose peer holds 1 everywhere), MaxOverRanks goes through `hub`.
class RecordingBackend : public Backend {
 public:
  void AllReduce(void* data, size_t count, DataType, ReduceOp) override {
    calls.push_back("AllReduce " + std::to_string(count));
    if (fail) throw CommError("recording: rank 1 died during AllReduce");
    auto* x = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) x[i] += 1;
  }
  void Broadcast(void*, size_t count, DataType, int root) override {
    calls.push_back("Broadcast " + std::to_string(count) + " " +
                    std::to_string(root));
  }
  void AllGather(const void*, void*, size_t count, DataType) override {
    calls.push_back("AllGather " + std::to_string(count));
  }
  void Barrier() override { calls.push_back("Barrier"); }
  void MaxOverRanks(int64_t* words, size_t count) override {
    calls.push_back("MaxOverRanks");
    if (hub) hub(words, count);
  }

  std::vector<std::string> calls;
  bool fail = false;
  std::function<void(int64_t*, size_t)> hub;
};

BackendDescription Description(bool checks_calls) {
  BackendDescription d;
  d.name = checks_calls ? "recording" : "recording_unchecked";
  d.summary = "a test's";
  d.needs_store = false;
  d.checks_calls = checks_calls;
  d.ops = {ReduceOp::kSum, ReduceOp::kAvg};
  return d;
}
const BackendDescription& Checking() {
  static const BackendDescription d = Description(true);
  return d;
}
const BackendDescription& Unchecked() {
  static const BackendDescription d = Description(false);
  return d;
}

struct Rank {
  Rank(int rank, int world, const BackendDescription& d = Checking(),
       const BackendTuning& tuning = {},
       std::function<void(int64_t*, size_t)> hub = nullptr) {
    auto owned = std::make_unique<RecordingBackend>();
    backend = owned.get();
    backend->hub = std::move(hub);
    comm = std::make_unique<Communicator>(std::move(owned), d, rank, world,
                                          tuning);
  }
  RecordingBackend* backend;
  std::unique_ptr<Communicator> comm;
};

template <typename E>
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(CommunicatorTest, BadArgumentsNeverReachTheBackend) {
  Rank r(0, 2);
  Communicator& c = *r.comm;
  float x[4] = {};
  EXPECT_NE(ErrorOf<std::invalid_argument>([&] {
              c.AllReduce(nullptr, 5, ReduceOp::kSum);
            }).find("recording: AllReduce of null data"),
            std::string::npos);
  EXPECT_NE(ErrorOf<std::invalid_argument>([&] {
              c.Broadcast(x, 1, 2);
            }).find("root 2 not in [0, 2)"),
            std::string::npos);
  EXPECT_THROW(c.Broadcast(x, 1, -1), std::invalid_argument);
  auto* odd = reinterpret_cast<float*>(reinterpret_cast<char*>(x) + 1);
  EXPECT_NE(ErrorOf<std::invalid_argument>([&] {
              c.AllReduce(odd, 1, ReduceOp::kSum);
            }).find("not aligned to 4 bytes"),
            std::string::npos);
  float gathered[8] = {};
  EXPECT_NE(ErrorOf<std::invalid_argument>([&] {
              c.AllGather(gathered + 2, gathered, 4);
            }).find("overlaps recv"),
            std::string::npos);
  EXPECT_THROW(c.AllReduce(x, SIZE_MAX / 2, ReduceOp::kSum),
               std::invalid_argument);
  EXPECT_TRUE(r.backend->calls.empty());
  c.AllGather(gathered, gathered, 4);  // in place: rank 0's block
  EXPECT_EQ(r.backend->calls, std::vector<std::string>{"AllGather 4"});
}

TEST(CommunicatorTest, OpsAndTypesTheDescriptionLacksAreCommErrors) {
  Rank r(0, 2);
  float x[4] = {};
  EXPECT_EQ(
      ErrorOf<CommError>([&] { r.comm->AllReduce(x, 4, ReduceOp::kMax); }),
      "recording: AllReduce with op max is not supported (it has sum, "
      "avg)");
  EXPECT_EQ(ErrorOf<CommError>([&] {
              r.comm->AllReduce(x, 4, DataType::kBFloat16, ReduceOp::kSum);
            }),
            "recording: AllReduce of bfloat16 is not supported (it has "
            "float32)");
  EXPECT_THROW(r.comm->Broadcast(x, 4, DataType::kFloat16, 0), CommError);
  EXPECT_THROW(r.comm->AllGather(x, x, 2, DataType::kFloat16), CommError);
  EXPECT_TRUE(r.backend->calls.empty());
  r.comm->AllReduce(x, 4, ReduceOp::kSum);  // refusals end nothing
  EXPECT_EQ(x[0], 1.0f);
}

TEST(CommunicatorTest, OneRankNeverAsksTheBackend) {
  Rank r(0, 1);
  float x[3] = {1, 2, 3}, y[3] = {};
  r.comm->AllReduce(x, 3, ReduceOp::kAvg);
  r.comm->Broadcast(x, 3, 0);
  r.comm->Barrier();
  r.comm->AllGather(x, y, 3);
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{1, 2, 3}));
  EXPECT_TRUE(r.backend->calls.empty());
  EXPECT_EQ(r.comm->bytes_sent(), 0u);
}

TEST(CommunicatorTest, BusBytesInTheTypesSize) {
  Rank r(0, 4);
  float x[16] = {};
  r.comm->AllReduce(x, 16, ReduceOp::kSum);
  EXPECT_EQ(r.comm->bytes_sent(), 2u * 3 * 64 / 4);
  r.comm->Broadcast(x, 16, 1);
  EXPECT_EQ(r.comm->bytes_sent(), 96u + 64);
  float all[64] = {};
  r.comm->AllGather(x, all, 16);
  EXPECT_EQ(r.comm->bytes_sent(), 160u + 3 * 64);
  EXPECT_EQ(AllReduceBusBytes(64, 1), 0u);
  EXPECT_EQ(AllGatherBusBytes(64, 1), 0u);
}

TEST(CommunicatorTest, AFailureEndsTheCommunicator) {
  Rank r(0, 2);
  float x[4] = {};
  r.backend->fail = true;
  EXPECT_THROW(r.comm->AllReduce(x, 4, ReduceOp::kSum), CommError);
  EXPECT_EQ(r.comm->bytes_sent(), 0u);
  r.backend->fail = false;
  EXPECT_EQ(ErrorOf<CommError>([&] { r.comm->Barrier(); }),
            "recording: Barrier on a communicator unusable after an earlier "
            "error: recording: rank 1 died during AllReduce");
  EXPECT_EQ(r.backend->calls, std::vector<std::string>{"AllReduce 4"});
}

// Two ranks as threads whose MaxOverRanks meets in the middle: the front's
// call agreement, for a backend that cannot notice a mismatch itself.
class Hub {
 public:
  void MaxOverRanks(int rank, int64_t* words, size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t round = round_;
    if (parts_[0].empty() && parts_[1].empty())
      result_.assign(count, INT64_MIN);
    parts_[rank].assign(words, words + count);
    for (size_t i = 0; i < count; ++i) {
      result_[i] = std::max(result_[i], words[i]);
    }
    if (++arrived_ == 2) {
      arrived_ = 0;
      out_ = result_;
      parts_[0].clear();
      parts_[1].clear();
      ++round_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return round_ != round; });
    }
    std::memcpy(words, out_.data(), count * sizeof(int64_t));
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int64_t> parts_[2], result_, out_;
  int arrived_ = 0;
  uint64_t round_ = 0;
};

// Runs body(rank) on two threads, each with its communicator.
void OnTwoRanks(const std::function<void(Rank&)>& body,
                const BackendTuning tunings[2]) {
  Hub hub;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Rank rank(r, 2, Unchecked(), tunings[r],
                [&hub, r](int64_t* w, size_t n) { hub.MaxOverRanks(r, w, n); });
      body(rank);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CommunicatorTest, MismatchedCallsAreRefusedOnEveryRankInStep) {
  const BackendTuning tunings[2];
  std::string errors[2];
  std::vector<std::string> calls[2];
  OnTwoRanks(
      [&](Rank& rank) {
        const int r = rank.comm->rank();
        float x[9] = {};
        errors[r] = ErrorOf<CommError>(
            [&] { rank.comm->AllReduce(x, r == 0 ? 8 : 9, ReduceOp::kSum); });
        rank.comm->AllReduce(x, 0, ReduceOp::kSum);  // agreed, moves nothing
        rank.comm->AllReduce(x, 8, ReduceOp::kAvg);  // still usable, in step
        calls[r] = rank.backend->calls;
      },
      tunings);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("recording_unchecked: mismatched collectives: "
                             "rank " +
                             std::to_string(r)),
              std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("count=8 on some ranks, count=9 on others"),
              std::string::npos)
        << errors[r];
    // Creation's check of comm.check_calls, then one agreement per call.
    EXPECT_EQ(calls[r], (std::vector<std::string>{
                            "MaxOverRanks", "MaxOverRanks", "MaxOverRanks",
                            "MaxOverRanks", "AllReduce 8"}));
  }
}

TEST(CommunicatorTest, EveryRankChecksCallsWhenAnyRankAsks) {
  for (int asking : {-1, 0, 1}) {
    BackendTuning tunings[2];
    for (int r = 0; r < 2; ++r) {
      tunings[r].Set(CheckCallsSetting().name, r == asking ? 1 : 0);
    }
    std::vector<std::string> calls[2];
    OnTwoRanks(
        [&](Rank& rank) {
          float x[2] = {};
          rank.comm->AllReduce(x, 2, ReduceOp::kSum);
          calls[rank.comm->rank()] = rank.backend->calls;
        },
        tunings);
    const std::vector<std::string> want =
        asking < 0 ? std::vector<std::string>{"MaxOverRanks", "AllReduce 2"}
                   : std::vector<std::string>{"MaxOverRanks", "MaxOverRanks",
                                              "AllReduce 2"};
    EXPECT_EQ(calls[0], want) << "asking " << asking;
    EXPECT_EQ(calls[1], want) << "asking " << asking;
  }
}

// ---------------------------------------------------------------------------
// CreateCommunicator

// A registered backend that records the context it was created with.
BackendDescription Registered(const std::string& name, bool spans_hosts) {
  BackendDescription d = Description(true);
  d.name = name;
  d.needs_store = true;
  d.spans_hosts = spans_hosts;
  d.create = [](const RankContext& context, const CommOptions&) {
    context.store->Set("mine", "1");
    return std::make_unique<RecordingBackend>();
  };
  return d;
}
const bool kRegistered =
    RegisterBackend(Registered("front_test_one_host", false)) &&
    RegisterBackend(Registered("front_test_spanning", true));

RankContext Context(LocalStore* store, std::vector<std::string> hosts) {
  RankContext c;
  c.world_size = static_cast<int>(hosts.size());
  c.store = store;
  for (const std::string& host : hosts) {
    PeerInfo p;
    p.host = host;
    p.pid = 1;
    p.address = "127.0.0.1";
    c.peers.push_back(p);
  }
  return c;
}

TEST(CreateCommunicatorTest, EachCommunicatorHasKeysOfItsOwn) {
  ASSERT_TRUE(kRegistered);
  LocalStore store;
  const RankContext c = Context(&store, {"a", "a"});
  auto first = CreateCommunicator("front_test_one_host", c, CommOptions{});
  auto second = CreateCommunicator("front_test_spanning", c, CommOptions{});
  EXPECT_TRUE(store.Check({"comm/0/mine", "comm/1/mine"}));
  EXPECT_EQ(std::string(second->backend()), "front_test_spanning");
  EXPECT_EQ(second->memory(), MemoryKind::kHost);
}

TEST(CreateCommunicatorTest, AContextTheBackendCannotUseIsRefused) {
  LocalStore store;
  RankContext c = Context(&store, {"a", "a"});
  c.store = nullptr;
  EXPECT_NE(ErrorOf<std::invalid_argument>([&] {
              CreateCommunicator("front_test_one_host", c, CommOptions{});
            }).find("needs a rendezvous store"),
            std::string::npos);
  c = Context(&store, {"a", "a"});
  c.peers.pop_back();
  EXPECT_NE(ErrorOf<std::invalid_argument>([&] {
              CreateCommunicator("front_test_one_host", c, CommOptions{});
            }).find("no peer information"),
            std::string::npos);
  c = Context(&store, {"node-a", "node-b"});
  const std::string spanning = ErrorOf<std::invalid_argument>(
      [&] { CreateCommunicator("front_test_one_host", c, CommOptions{}); });
  EXPECT_NE(spanning.find("front_test_one_host needs every rank on one host, "
                          "but this job spans 2 hosts (rank 0 on node-a; rank "
                          "1 on node-b); use a backend that spans hosts: "),
            std::string::npos)
      << spanning;
  EXPECT_NE(spanning.find("front_test_spanning"), std::string::npos);
  CreateCommunicator("front_test_spanning", c, CommOptions{});
  c.rank = 2;
  EXPECT_THROW(CreateCommunicator("front_test_spanning", c, CommOptions{}),
               std::invalid_argument);
  EXPECT_NE(
      ErrorOf<std::invalid_argument>([&] {
        CreateCommunicator("no_such", c, CommOptions{});
      }).find("unknown communicator 'no_such' (linked into this binary: "),
      std::string::npos);
  EXPECT_NE(DescribeBackends().find("front_test_one_host: a test's (host "
                                    "memory, one host)"),
            std::string::npos)
      << DescribeBackends();
}

TEST(CreateGroupCommunicatorTest, AGroupIsItsMembersAndMeetsOnlyThem) {
  LocalStore store;
  RankContext c = Context(&store, {"a", "a", "b", "b"});
  c.rank = 3;
  c.local_rank = 1;
  EXPECT_EQ(RanksOnHostOf(c.peers, 3), (std::vector<int>{2, 3}));
  EXPECT_EQ(RanksOnHostOf(c.peers, 0), (std::vector<int>{0, 1}));
  // On one host: a one-host backend takes it, this rank is group rank 1.
  auto host = CreateGroupCommunicator("front_test_one_host", c, {2, 3}, {});
  EXPECT_EQ(host->rank(), 1);
  EXPECT_EQ(host->world_size(), 2);
  // Across hosts, in the members' order; another group of other members
  // has keys of its own.
  auto cross = CreateGroupCommunicator("front_test_spanning", c, {3, 1}, {});
  EXPECT_EQ(cross->rank(), 0);
  EXPECT_TRUE(store.Check({"group/2,3/comm/0/mine", "group/3,1/comm/0/mine"}));
  const RankContext group = GroupContext(c, {3, 1}, &store);
  EXPECT_EQ(group.peers[1].host, "a");
  EXPECT_EQ(group.local_rank, 1);  // the job's
  c.local_rank = 5;
  EXPECT_EQ(GroupContext(c, {2, 3}, &store).local_rank, 5);
  for (const std::vector<int>& bad :
       {std::vector<int>{0, 1}, {3, 3}, {3, 4}, {-1, 3}}) {
    EXPECT_THROW(CreateGroupCommunicator("front_test_spanning", c, bad, {}),
                 std::invalid_argument);
  }
  EXPECT_NE(ErrorOf<std::invalid_argument>([&] {
              CreateGroupCommunicator("front_test_one_host", c, {0, 3}, {});
            }).find("needs every rank on one host"),
            std::string::npos);
}

}  // namespace
}  // namespace ringlab::comm
