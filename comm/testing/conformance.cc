#include "comm/testing/conformance.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <utility>

#include "comm/testing/exact_sum.h"
#include "comm/testing/multi_process.h"

namespace ringlab::comm::testing {
namespace {

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

class HostBuffer : public RankBuffer {
 public:
  explicit HostBuffer(const std::vector<float>& host) : data_(host) {}
  float* data() override { return data_.data(); }
  std::vector<float> Download() const override { return data_; }

 private:
  std::vector<float> data_;
};

struct DeviceSupport {
  BufferMaker maker;
  std::function<int(std::string*)> devices;
};
DeviceSupport& Device() {
  static DeviceSupport support;
  return support;
}

std::vector<float> Inputs(int rank, size_t count) {
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = ExactSumInput(rank, i);
  return x;
}

// Edge cases, primes (ragged segments and chunks), and 16 MiB (many chunks).
std::vector<size_t> ExactSumCounts(int world) {
  return {0,
          1,
          static_cast<size_t>(world - 1),
          2,
          3,
          5,
          17,
          127,
          1021,
          4099,
          65537,
          262147,
          (size_t{16} << 20) / sizeof(float)};
}

void ExactSums(Communicator& comm, const BackendTraits& traits) {
  const int world = comm.world_size();
  Check(comm.rank() >= 0 && comm.rank() < world, "rank out of range");
  for (size_t count : ExactSumCounts(world)) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      auto buffer = MakeBuffer(comm.memory(), Inputs(comm.rank(), count));
      comm.AllReduce(buffer->data(), count, op);
      const std::vector<float> x = buffer->Download();
      CheckExactAllReduce(x.data(), count, world, op, traits.avg_premultiplies);
    }
  }
}

// One float into the allocation: a pointer that is not 16-byte aligned, so
// vector paths must handle the edges; the guards around it stay untouched.
void UnalignedBuffers(Communicator& comm, const BackendTraits& traits) {
  constexpr float kGuard = 12345.0f;
  const int world = comm.world_size();
  for (size_t count : {size_t{1}, size_t{4098}, size_t{262146}}) {
    auto guarded = [&](int rank) {
      std::vector<float> x(count + 2, kGuard);
      for (size_t i = 0; i < count; ++i) x[i + 1] = ExactSumInput(rank, i);
      return x;
    };
    auto guards_intact = [&](const std::vector<float>& x, const char* op) {
      Check(x.front() == kGuard && x.back() == kGuard,
            std::string(op) + " of " + std::to_string(count) +
                " floats wrote outside its range");
    };
    auto a = MakeBuffer(comm.memory(), guarded(comm.rank()));
    comm.AllReduce(a->data() + 1, count, ReduceOp::kSum);
    std::vector<float> x = a->Download();
    guards_intact(x, "AllReduce");
    CheckExactAllReduce(x.data() + 1, count, world, ReduceOp::kSum,
                        traits.avg_premultiplies);

    const int root = world - 1;
    auto b = MakeBuffer(comm.memory(), guarded(comm.rank()));
    comm.Broadcast(b->data() + 1, count, root);
    x = b->Download();
    guards_intact(x, "Broadcast");
    for (size_t i = 0; i < count; ++i) {
      Check(x[i + 1] == ExactSumInput(root, i),
            "unaligned Broadcast of " + std::to_string(count) +
                " floats: element " + std::to_string(i));
    }
  }
}

// Inputs whose sums round, so the order of additions shows: every rank must
// still hold the same bits. Each rank's result is broadcast in turn and
// compared with every other rank's.
void BitwiseIdenticalAcrossRanks(Communicator& comm, const BackendTraits&) {
  for (size_t count : {size_t{1021}, size_t{100003}}) {
    std::mt19937 rng(1234 + comm.rank());
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> x(count);
    for (float& v : x) v = u(rng) * std::ldexp(1.0f, rng() % 20);
    auto mine = MakeBuffer(comm.memory(), x);
    comm.AllReduce(mine->data(), count, ReduceOp::kAvg);
    const std::vector<float> result = mine->Download();
    for (int r = 0; r < comm.world_size(); ++r) {
      auto theirs = MakeBuffer(comm.memory(), result);
      comm.Broadcast(theirs->data(), count, r);
      const std::vector<float> got = theirs->Download();
      Check(std::memcmp(got.data(), result.data(), count * sizeof(float)) == 0,
            "count " + std::to_string(count) + ": rank " + std::to_string(r) +
                " holds other bits than rank " + std::to_string(comm.rank()));
    }
  }
}

void BroadcastFromEveryRoot(Communicator& comm, const BackendTraits&) {
  for (size_t count :
       {size_t{0}, size_t{1}, size_t{1000}, size_t{17000}, size_t{300001}}) {
    for (int root = 0; root < comm.world_size(); ++root) {
      auto buffer = MakeBuffer(comm.memory(), Inputs(comm.rank(), count));
      comm.Broadcast(buffer->data(), count, root);
      const std::vector<float> x = buffer->Download();
      for (size_t i = 0; i < count; ++i) {
        Check(x[i] == ExactSumInput(root, i),
              "Broadcast count " + std::to_string(count) + " root " +
                  std::to_string(root) + " element " + std::to_string(i));
      }
      comm.Barrier();
    }
  }
}

// Many small calls of every kind back to back: buffers a backend reuses
// between calls (one-shot banks, mailboxes) must not mix calls up.
void MixedSmallCalls(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  auto one = MakeBuffer(comm.memory(), {0.0f});
  for (int i = 0; i < 200; ++i) {
    auto v = MakeBuffer(comm.memory(), {static_cast<float>(comm.rank() + i)});
    comm.AllReduce(v->data(), 1, ReduceOp::kSum);
    float want = 0;
    for (int r = 0; r < world; ++r) want += static_cast<float>(r + i);
    Check(v->Download()[0] == want, "AllReduce call " + std::to_string(i));
    if (i % 3 == 0) comm.Barrier();
    if (i % 5 == 0) {
      comm.Broadcast(v->data(), 1, i % world);
      Check(v->Download()[0] == want, "Broadcast call " + std::to_string(i));
    }
  }
}

// bytes_sent is nccl-tests' bus bytes on every rank, whatever the algorithm.
void BusBytes(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  auto expect_delta = [&](uint64_t before, uint64_t want, const char* what) {
    const uint64_t got = comm.bytes_sent() - before;
    Check(got == want, std::string(what) + ": bytes_sent grew by " +
                           std::to_string(got) + ", bus bytes are " +
                           std::to_string(want));
  };
  for (size_t count : {size_t{0}, size_t{1}, size_t{1021}, size_t{262147}}) {
    auto buffer = MakeBuffer(comm.memory(), Inputs(comm.rank(), count));
    uint64_t before = comm.bytes_sent();
    comm.AllReduce(buffer->data(), count, ReduceOp::kSum);
    expect_delta(before, AllReduceBusBytes(count * sizeof(float), world),
                 "AllReduce");
    before = comm.bytes_sent();
    comm.Broadcast(buffer->data(), count, world - 1);
    expect_delta(before, BroadcastBusBytes(count * sizeof(float), world),
                 "Broadcast");
    before = comm.bytes_sent();
    comm.Barrier();
    expect_delta(before, 0, "Barrier");
  }
}

// Bad arguments are refused on the calling rank before anything is sent
// (here every rank makes the same bad call), and the communicator stays
// usable.
void ArgumentErrors(Communicator& comm, const BackendTraits&) {
  auto refused = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const std::invalid_argument&) {
      return true;
    }
    return false;
  };
  Check(refused([&] { comm.AllReduce(nullptr, 5, ReduceOp::kSum); }),
        "AllReduce(nullptr, 5) accepted");
  Check(refused([&] { comm.Broadcast(nullptr, 5, 0); }),
        "Broadcast(nullptr, 5) accepted");
  auto buffer = MakeBuffer(comm.memory(), {1.0f});
  Check(refused([&] { comm.Broadcast(buffer->data(), 1, comm.world_size()); }),
        "Broadcast root " + std::to_string(comm.world_size()) + " accepted");
  Check(refused([&] { comm.Broadcast(buffer->data(), 1, -1); }),
        "Broadcast root -1 accepted");
  comm.Barrier();
  comm.AllReduce(buffer->data(), 1, ReduceOp::kSum);
  Check(buffer->Download()[0] == static_cast<float>(comm.world_size()),
        "unusable after refused calls");
}

// Max and min of the exact inputs (integers, so every backend's order
// gives the same bits), for the backends whose description has them.
void MaxAndMin(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    if (!comm.description().Supports(op)) continue;
    for (size_t count : {size_t{1}, size_t{1021}, size_t{262147}}) {
      auto buffer = MakeBuffer(comm.memory(), Inputs(comm.rank(), count));
      comm.AllReduce(buffer->data(), count, op);
      const std::vector<float> x = buffer->Download();
      for (size_t i = 0; i < count; ++i) {
        float want = ExactSumInput(0, i);
        for (int r = 1; r < world; ++r) {
          want = op == ReduceOp::kMax ? std::max(want, ExactSumInput(r, i))
                                      : std::min(want, ExactSumInput(r, i));
        }
        Check(x[i] == want, std::string(ReduceOpName(op)) + " of " +
                                std::to_string(count) + ": element " +
                                std::to_string(i) + " is " +
                                std::to_string(x[i]));
      }
    }
  }
}

// Every op and element type the backend's description does not list is
// refused by every collective with a CommError saying so, on every rank
// alike and before anything moves: the communicator goes on working.
void UnsupportedOpsAndTypes(Communicator& comm, const BackendTraits&) {
  auto refused = [&](const std::string& what,
                     const std::function<void()>& call) {
    try {
      call();
    } catch (const CommError& e) {
      Check(std::string(e.what()).find("not supported") != std::string::npos,
            what + ": the error does not say 'not supported': " + e.what());
      return;
    }
    throw std::runtime_error(what + " was accepted");
  };
  const BackendDescription& d = comm.description();
  auto buffer = MakeBuffer(comm.memory(), std::vector<float>(64, 1.0f));
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    if (d.Supports(op)) continue;
    refused(std::string("AllReduce with op ") + ReduceOpName(op),
            [&] { comm.AllReduce(buffer->data(), 8, op); });
  }
  for (DataType type :
       {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    if (d.Supports(type)) continue;
    const std::string name = DataTypeName(type);
    refused("AllReduce of " + name,
            [&] { comm.AllReduce(buffer->data(), 8, type, ReduceOp::kSum); });
    refused("Broadcast of " + name,
            [&] { comm.Broadcast(buffer->data(), 8, type, 0); });
    refused("AllGather of " + name,
            [&] { comm.AllGather(buffer->data(), buffer->data(), 4, type); });
  }
  comm.AllReduce(buffer->data(), 1, ReduceOp::kSum);
  Check(buffer->Download()[0] == static_cast<float>(comm.world_size()),
        "unusable after refused calls");
}

// Buffers from Communicator::Allocate (zero-copy where the backend has
// registered memory): exact sums at 0 ulp at the start of the allocation and
// at an odd offset inside it, the floats around the range untouched, and
// many calls on the same memory bitwise equal across ranks.
void AllocatedBuffers(Communicator& comm, const BackendTraits& traits) {
  const int world = comm.world_size();
  const size_t capacity = 262147 + 2;
  float* memory = comm.Allocate(capacity);
  Check(memory != nullptr, "Allocate returned null");
  float* second = comm.Allocate(1021);  // a second allocation, used below
  for (size_t offset : {size_t{0}, size_t{1}}) {
    for (size_t count : {size_t{1}, size_t{17}, size_t{4099}, size_t{262147}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        std::fill(memory, memory + capacity, 12345.0f);
        for (size_t i = 0; i < count; ++i) {
          memory[offset + i] = ExactSumInput(comm.rank(), i);
        }
        comm.AllReduce(memory + offset, count, op);
        CheckExactAllReduce(memory + offset, count, world, op,
                            traits.avg_premultiplies);
        Check((offset == 0 || memory[offset - 1] == 12345.0f) &&
                  memory[offset + count] == 12345.0f,
              "AllReduce of " + std::to_string(count) +
                  " allocated floats wrote outside its range");
      }
    }
  }
  for (size_t i = 0; i < 1021; ++i) second[i] = ExactSumInput(comm.rank(), i);
  comm.AllReduce(second, 1021, ReduceOp::kSum);
  CheckExactAllReduce(second, 1021, world, ReduceOp::kSum,
                      traits.avg_premultiplies);
  // Back to back on the same memory, with sums that round: same bits.
  std::mt19937 rng(99 + comm.rank());
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t i = 0; i < 100003; ++i) memory[i] = u(rng);
  for (int k = 0; k < 20; ++k) comm.AllReduce(memory, 100003, ReduceOp::kAvg);
  std::vector<float> mine(memory, memory + 100003);
  for (int r = 0; r < world; ++r) {
    std::vector<float> theirs = mine;
    comm.Broadcast(theirs.data(), theirs.size(), r);
    Check(std::memcmp(theirs.data(), mine.data(), mine.size() * 4) == 0,
          "allocated memory: rank " + std::to_string(r) +
              " holds other bits than rank " + std::to_string(comm.rank()));
  }
}

// Rank 1 calls something else than the other ranks.
enum class Odd { kCount, kOp, kRoot };

ConformanceCase Mismatch(Odd odd, const char* path, size_t count) {
  ConformanceCase c;
  const char* field = odd == Odd::kCount ? "count"
                      : odd == Odd::kOp  ? "op"
                                         : "root";
  c.name = std::string("mismatched_") + field + "_" + path;
  c.min_world = 2;
  switch (odd) {
    case Odd::kCount:
      c.must_name = {"count=" + std::to_string(count),
                     "count=" + std::to_string(count + 1)};
      break;
    case Odd::kOp:
      c.must_name = {"op=sum", "op=avg"};
      break;
    case Odd::kRoot:
      c.must_name = {"root=0", "root=1"};
      break;
  }
  c.run = [odd, count](Communicator& comm, const BackendTraits&) {
    const bool is_odd = comm.rank() == 1;
    auto buffer =
        MakeBuffer(comm.memory(), std::vector<float>(count + 1, 1.0f));
    ExpectMismatchError(comm, [&] {
      if (odd == Odd::kRoot) {
        comm.Broadcast(buffer->data(), count, is_odd ? 1 : 0);
      } else {
        comm.AllReduce(
            buffer->data(), odd == Odd::kCount && is_odd ? count + 1 : count,
            odd == Odd::kOp && is_odd ? ReduceOp::kAvg : ReduceOp::kSum);
      }
    });
  };
  return c;
}

}  // namespace

void ExpectMismatchError(Communicator& comm,
                         const std::function<void()>& call) {
  std::string error;
  try {
    call();
  } catch (const CommError& e) {
    error = e.what();
  }
  Check(!error.empty(),
        "the mismatch went unnoticed on rank " + std::to_string(comm.rank()));
  RankPrint("[mismatch] " + error);
  Check(error.find("mismatched") != std::string::npos,
        "the error does not say 'mismatched': " + error);
}

ConformanceCase CountMismatchCase(
    const std::string& name, size_t count,
    std::function<void(Communicator& comm, size_t mine)> call) {
  ConformanceCase c;
  c.name = name;
  c.min_world = 2;
  c.must_name = {"count=" + std::to_string(count),
                 "count=" + std::to_string(count + 1)};
  c.run = [count, call](Communicator& comm, const BackendTraits&) {
    const size_t mine = comm.rank() == 1 ? count + 1 : count;
    ExpectMismatchError(comm, [&] { call(comm, mine); });
  };
  return c;
}

bool RegisterDeviceBuffers(BufferMaker maker,
                           std::function<int(std::string* why)> devices) {
  Device() = DeviceSupport{std::move(maker), std::move(devices)};
  return true;
}

std::unique_ptr<RankBuffer> MakeBuffer(MemoryKind kind,
                                       const std::vector<float>& host) {
  if (kind == MemoryKind::kHost) return std::make_unique<HostBuffer>(host);
  if (!Device().maker) {
    throw std::logic_error(
        "a device-memory backend, but //comm/testing:device_buffers is not "
        "linked into this test");
  }
  return Device().maker(host);
}

int CudaDevices(std::string* why) {
  if (!Device().devices) {
    if (why) *why = "no device-buffer support linked";
    return -1;
  }
  return Device().devices(why);
}

BackendTraits TraitsOf(const std::string& backend) {
  const BackendDescription& d = BackendNamed(backend);
  BackendTraits t;
  t.needs_gpu = d.memory == MemoryKind::kDevice;
  t.one_gpu_per_rank = d.one_device_per_rank;
  t.needs_mpirun = d.launch == RankLaunch::kMpirun;
  t.avg_premultiplies = d.conformance.avg_premultiplies;
  t.survives_peer_death = d.conformance.survives_peer_death;
  t.join_deadlines_to_notice_death =
      d.conformance.join_deadlines_to_notice_death;
  t.op_deadlines_to_notice_death = d.conformance.op_deadlines_to_notice_death;
  t.allocates = d.registers_memory || d.memory == MemoryKind::kHost;
  t.reduce_scatter = d.reduce_scatter || d.memory == MemoryKind::kHost;
  t.ranks_are_threads = d.launch == RankLaunch::kThreads;
  t.suite_hosts = d.conformance.suite_hosts;
  t.types = d.types;
  return t;
}

std::string SkipReason(const ConformanceCase& c, const BackendTraits& traits) {
  if (c.needs_allocate && !traits.allocates) {
    return "the backend does not implement Allocate yet";
  }
  if (c.needs_reduce_scatter && !traits.reduce_scatter) {
    return "the backend works on device memory and has no ReduceScatter of "
           "its own (the front's goes through host memory)";
  }
  if (std::find(traits.types.begin(), traits.types.end(), c.needs_type) ==
      traits.types.end()) {
    return std::string("the backend has no ") + DataTypeName(c.needs_type);
  }
  return "";
}

std::string MustNameMissing(const ConformanceCase& c,
                            const std::vector<RankResult>& results) {
  if (c.must_name.empty()) return "";
  for (const RankResult& r : results) {
    bool all = true;
    for (const std::string& s : c.must_name) {
      all = all && r.output.find(s) != std::string::npos;
    }
    if (all) return "";
  }
  std::string names;
  for (const std::string& s : c.must_name) {
    names += (names.empty() ? "'" : " and '") + s + "'";
  }
  return "no rank's error names " + names + "\n" + Describe(results);
}

std::unique_ptr<Communicator> MakeRankCommunicator(
    const std::string& backend, const RankContext& c,
    std::chrono::milliseconds timeout, std::chrono::milliseconds join_timeout) {
  CommOptions options;
  options.timeout = timeout;
  options.join_timeout = join_timeout;
  auto comm = CreateCommunicator(backend, c, options);
  Check(comm->rank() == c.rank && comm->world_size() == c.world_size,
        "rank/world_size differ from the context's");
  return comm;
}

int MaxProcessRanks() {
  const char* text = std::getenv("RINGLAB_TEST_MAX_PROCESS_RANKS");
  if (text == nullptr || *text == '\0') return 4;
  const int value = std::atoi(text);
  return value >= 1 ? value : 4;
}

std::vector<ConformanceCase> CollectiveCases() {
  std::vector<ConformanceCase> cases = {
      {"exact_sums", 1, ExactSums, {}},
      {"max_and_min", 1, MaxAndMin, {}},
      {"unsupported_ops_and_types", 1, UnsupportedOpsAndTypes, {}},
      {"unaligned_buffers", 1, UnalignedBuffers, {}},
      {"bitwise_identical_across_ranks", 2, BitwiseIdenticalAcrossRanks, {}},
      {"broadcast_from_every_root", 1, BroadcastFromEveryRoot, {}},
      {"mixed_small_calls", 1, MixedSmallCalls, {}},
      {"bus_bytes", 1, BusBytes, {}},
      {"argument_errors", 1, ArgumentErrors, {}},
      {"allocated_buffers", 1, AllocatedBuffers, {}, true},
  };
  for (ConformanceCase& c : AllGatherCases()) cases.push_back(std::move(c));
  for (ConformanceCase& c : ReduceScatterCases()) cases.push_back(std::move(c));
  for (ConformanceCase& c : DataTypeCases()) cases.push_back(std::move(c));
  for (ConformanceCase& c : AnnouncedCases()) cases.push_back(std::move(c));
  return cases;
}

std::vector<ConformanceCase> MismatchCases() {
  // Sizes that take each backend's paths at their default thresholds: an
  // inline call (8 floats), a one-shot (16 KiB), the ring (4 MiB).
  const std::pair<const char*, size_t> paths[] = {
      {"inline", 8}, {"one_shot", 4096}, {"ring", size_t{1} << 20}};
  std::vector<ConformanceCase> cases;
  for (Odd odd : {Odd::kCount, Odd::kOp, Odd::kRoot}) {
    for (const auto& [path, count] : paths) {
      cases.push_back(Mismatch(odd, path, count));
    }
  }
  for (ConformanceCase& c : ReduceScatterMismatchCases()) {
    cases.push_back(std::move(c));
  }
  for (ConformanceCase& c : AllGatherMismatchCases()) {
    cases.push_back(std::move(c));
  }
  for (ConformanceCase& c : DataTypeMismatchCases()) {
    cases.push_back(std::move(c));
  }
  for (ConformanceCase& c : AnnouncedMismatchCases()) {
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<ConformanceCase> AllCases() {
  std::vector<ConformanceCase> cases = CollectiveCases();
  for (ConformanceCase& c : MismatchCases()) cases.push_back(std::move(c));
  return cases;
}

}  // namespace ringlab::comm::testing
