// The GPU backends' own tests (nccl, ipc_ring with ranks as processes and as
// threads): bitwise equality with the ring's and the one-shot's known
// orders, paths forced through ipc_ring's tuning (pieces, chunks),
// its mismatch reports, NCCL's refusal of two ranks on one GPU. What every
// backend must do — exact sums, broadcasts, unaligned buffers, mismatches,
// dead and absent ranks — is the conformance suite's (conformance_gpu_test).
// Ranks are forked processes (RunRanks) or threads of one forked process
// (RunThreadRanks); the parent never initialises CUDA (it asks a forked child
// for the device count) and every GPU test skips when there is no device.
// The host-only tests (the registry, the ring's partition, the descriptors'
// words, creation without a device or across processes) run everywhere.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/dtype/kernels.h"
#include "comm/ipc_ring/ipc_ring.h"
#include "comm/ipc_ring/kernels.h"
#include "comm/store/store.h"
#include "comm/testing/conformance.h"
#include "comm/testing/exact_sum.h"
#include "comm/testing/multi_process.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;
using testing::CheckExactAllReduce;
using testing::Describe;
using testing::ExactSumInput;
using testing::MaxProcessRanks;
using testing::RankResult;
using testing::RunRanks;
using testing::RunThreadRanks;
using testing::TraitsOf;

// Whether the nccl backend is linked in: it is not where cuda_configure.bzl
// found no NCCL (the toolkit does not ship it).
#ifdef RINGLAB_WITH_NCCL
constexpr bool kNcclBuilt = true;
#else
constexpr bool kNcclBuilt = false;
#endif
constexpr char kNoNccl[] =
    "nccl is not built here: NCCL was not found when CUDA was configured "
    "(tools/cuda/cuda_configure.bzl; set NCCL_HOME)";

// Asked once, of a forked child (see cuda/device.h: DeviceCountInChild).
int Devices(std::string* why = nullptr) {
  return testing::CudaDevices(why);  // asked once, of a forked child
}

#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    std::string why;                                                   \
    if (Devices(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// The job, with the ranks as the backend has them (threads or processes).
std::vector<RankResult> RunJob(
    const std::string& backend, int world,
    const std::function<void(const RankContext&)>& body, milliseconds timeout) {
  return TraitsOf(backend).ranks_are_threads
             ? RunThreadRanks(world, body, timeout)
             : RunRanks(world, body, timeout);
}

// The caller's buffer, in device memory as memory() == kDevice asks.
std::unique_ptr<testing::RankBuffer> Device(const std::vector<float>& host) {
  return testing::MakeBuffer(MemoryKind::kDevice, host);
}

std::unique_ptr<Communicator> Make(const std::string& backend,
                                   const RankContext& c,
                                   const IpcRingTuning& tuning = {},
                                   milliseconds timeout = milliseconds(60000)) {
  CommOptions options;
  options.timeout = timeout;
  options.tuning = tuning.ToTuning();
  auto comm = CreateCommunicator(backend, c, options);
  Check(comm->memory() == MemoryKind::kDevice, "memory() is not kDevice");
  Check(comm->rank() == c.rank && comm->world_size() == c.world_size,
        "rank/world_size");
  return comm;
}

// As shm_ring_test and nccl-tests: small integers, so that every partial sum
// in any order is exact and the expected result is known to 0 ulp.
// Edge cases, primes (ragged segments and chunks), and 16 MiB (many chunks;
// with `large` false, left out where tiny buffers would make it thousands of
// launches).
std::vector<size_t> CountsFor(int world, bool large = true) {
  std::vector<size_t> counts = {0,    1,     static_cast<size_t>(world - 1),
                                2,    3,     5,
                                17,   127,   1021,
                                4099, 65537, 262147};
  if (large) counts.push_back((size_t{16} << 20) / sizeof(float));
  return counts;
}

// The world sizes a backend can run here: NCCL refuses two ranks on one GPU,
// so it runs up to the device count; ipc_ring shares GPUs between ranks (as
// processes up to RINGLAB_TEST_MAX_PROCESS_RANKS, see conformance.h).
std::vector<int> Worlds(const std::string& backend) {
  std::vector<int> worlds;
  for (int w : {1, 2, 3, 4}) {
    if (TraitsOf(backend).one_gpu_per_rank && w > Devices()) continue;
    if (!TraitsOf(backend).ranks_are_threads && w > MaxProcessRanks()) continue;
    worlds.push_back(w);
  }
  if (TraitsOf(backend).one_gpu_per_rank && Devices() < 4) {
    std::cout << "[   INFO   ] " << backend << ": " << Devices()
              << " GPU(s); it needs one GPU per rank, so it runs at world "
                 "sizes up to "
              << Devices() << " only\n";
  }
  return worlds;
}

// AllReduce (sum and avg) of every count, each element checked to 0 ulp: the
// inputs make every sum exact, and avg is that sum divided by N once, the
// same correctly rounded float division the expectation does.
void RunExactSums(const std::string& backend, int world,
                  const std::vector<size_t>& counts,
                  const IpcRingTuning& tuning) {
  auto results = RunJob(
      backend, world,
      [&](const RankContext& c) {
        auto comm = Make(backend, c, tuning);
        for (size_t count : counts) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
            std::vector<float> x(count);
            for (size_t i = 0; i < count; ++i) x[i] = ExactSumInput(c.rank, i);
            auto d = Device(x);
            comm->AllReduce(d->data(), count, op);
            x = d->Download();
            CheckExactAllReduce(x.data(), count, world, op);
          }
        }
      },
      milliseconds(300000));
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
  }
}

// ----------------------------------------------------------------------------
// Host-only: these run on machines without a GPU too.

TEST(GpuBackendsHostTest, BackendsAreRegistered) {
  auto names = RegisteredBackendNames();
  EXPECT_EQ(std::find(names.begin(), names.end(), "nccl") != names.end(),
            kNcclBuilt);
  if (!kNcclBuilt) std::cout << "[   INFO   ] " << kNoNccl << "\n";
  EXPECT_NE(std::find(names.begin(), names.end(), "ipc_ring"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "ipc_ring_threads"),
            names.end());
}

// The kernels' descriptors speak the words every backend's mismatch reports
// use (the conformance suite looks for "count=", "op=", "root="), and differ
// when the call history (the base) does.
TEST(GpuBackendsHostTest, DescriptorsNameCountOpAndRoot) {
  IpcRingLaunch launch;
  launch.kind = IpcRingKind::kOneShot;
  launch.count = 1021;
  launch.average = true;
  EXPECT_EQ(IpcRingDescriptorText(IpcRingDescribe(launch)),
            "AllReduce(count=1021, op=avg; one-shot)");
  launch.kind = IpcRingKind::kRing;
  launch.average = false;
  EXPECT_EQ(IpcRingDescriptorText(IpcRingDescribe(launch)),
            "AllReduce(count=1021, op=sum; ring)");
  launch.kind = IpcRingKind::kBroadcast;
  launch.root = 3;
  EXPECT_EQ(IpcRingDescriptorText(IpcRingDescribe(launch)),
            "Broadcast(count=1021, root=3)");
  launch.type = DataType::kBFloat16;
  EXPECT_EQ(IpcRingDescriptorText(IpcRingDescribe(launch)),
            "Broadcast(count=1021, dtype=bfloat16, root=3)");
  IpcRingLaunch float16 = launch;
  float16.type = DataType::kFloat16;
  EXPECT_NE(IpcRingDescribe(float16).word[0], IpcRingDescribe(launch).word[0]);
  launch.type = DataType::kFloat32;
  launch.kind = IpcRingKind::kBarrier;
  EXPECT_EQ(IpcRingDescriptorText(IpcRingDescribe(launch)), "Barrier");
  IpcRingLaunch later = launch;
  later.base = launch.base + IpcRingUnits(launch);
  EXPECT_NE(IpcRingDescribe(later).word[0], IpcRingDescribe(launch).word[0]);
  // Every kind publishes an entry unit before its last one: the entry check
  // of the descriptors must come before any rank's last unit.
  for (IpcRingKind kind : {IpcRingKind::kRing, IpcRingKind::kOneShot,
                           IpcRingKind::kBroadcast, IpcRingKind::kBarrier}) {
    launch.kind = kind;
    launch.world_size = 3;
    EXPECT_GE(IpcRingUnits(launch), 2u);
  }
}

// ipc_ring_threads launched one process per rank is refused at once, naming
// the processes, before any CUDA call (so also here, without a GPU).
TEST(GpuBackendsHostTest, ThreadsModeRefusesRanksInSeparateProcesses) {
  auto results = RunRanks(
      2,
      [&](const RankContext& c) {
        CommOptions options;
        options.join_timeout = milliseconds(30000);
        try {
          CreateCommunicator("ipc_ring_threads", c, options);
        } catch (const CommError& e) {
          Check(std::string(e.what()).find("different processes") !=
                    std::string::npos,
                std::string("unexpected message: ") + e.what());
          return;
        }
        throw std::runtime_error("created across processes");
      },
      milliseconds(60000));
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
  }
}

// Every element belongs to exactly one (segment, chunk, block) slice, and
// every slice starts 16-byte aligned: the kernel's 16-byte packs rely on it.
TEST(GpuBackendsHostTest, RingSlicesPartitionTheBuffer) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{17},
                       size_t{1021}, size_t{65537}, size_t{1000003}}) {
    for (int world : {1, 2, 3, 4, 7, 16}) {
      for (auto [chunk_bytes, size] : {std::pair<size_t, size_t>{4096, 4},
                                       {size_t{1} << 20, 4},
                                       {4096, 2},
                                       {size_t{1} << 20, 2}}) {
        SCOPED_TRACE("element bytes " + std::to_string(size));
        const int chunks = IpcRingChunks(count, world, chunk_bytes, size);
        ASSERT_GE(chunks, 1);
        ASSERT_LE(chunks, 64);
        std::vector<int> seen(count, 0);
        for (int s = 0; s < world; ++s) {
          for (int k = 0; k < chunks; ++k) {
            for (int b = 0; b < kIpcRingBlocks; ++b) {
              IpcRingRange r =
                  IpcRingSlice(count, world, chunks, s, k, b, size);
              ASSERT_LE(r.begin, r.end);
              ASSERT_LE(r.end, count);
              if (r.begin < r.end) {
                ASSERT_EQ(r.begin * size % 16, 0u);
              }
              for (size_t i = r.begin; i < r.end; ++i) ++seen[i];
            }
          }
        }
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(seen[i], 1)
              << "count " << count << " world " << world << " element " << i;
        }
      }
    }
  }
}

// Without a device, creation fails with a CommError that says so (the
// factory is what --comm=nccl|ipc_ring|ipc_ring_threads reaches on a
// CPU-only machine); for the threads mode on every rank of two.
TEST(GpuBackendsHostTest, CreationWithoutDeviceFailsClearly) {
  if (Devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  for (const char* backend : {"nccl", "ipc_ring", "ipc_ring_threads"}) {
    if (FindBackend(backend) == nullptr) continue;  // nccl: not built
    const int world = TraitsOf(backend).ranks_are_threads ? 2 : 1;
    auto results = RunJob(
        backend, world,
        [&](const RankContext& c) {
          try {
            Make(backend, c);
          } catch (const CommError& e) {
            Check(std::string(e.what()).find("no CUDA device") !=
                      std::string::npos,
                  std::string("unexpected message: ") + e.what());
            return;
          }
          throw std::runtime_error("created without a device");
        },
        milliseconds(60000));
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 0) << backend << "\n" << Describe(results);
    }
  }
}

// ----------------------------------------------------------------------------
// On a GPU, for each backend.

class GpuBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (FindBackend(backend()) == nullptr) GTEST_SKIP() << kNoNccl;
    SKIP_WITHOUT_GPU();
  }
  const std::string& backend() const { return GetParam(); }
};

// Inputs whose sums round: the order matters, and every rank must still hold
// the same bits (hashes compared through the store). For ipc_ring the order
// is known, so the result must also equal, to 0 ulp, a host reduction in the
// ring's order (element of segment j: x_j + x_{j+1} + ... in ring order) or
// the one-shot's (x_0 + x_1 + ... in rank order).
TEST_P(GpuBackendTest, BitwiseIdenticalAcrossRanks) {
  const std::vector<size_t> counts = {1, 5, 1021, 65537, 1000003};
  for (int world : Worlds(backend())) {
    if (world == 1) continue;
    for (bool ring : {true, false}) {
      SCOPED_TRACE("world " + std::to_string(world) +
                   (ring ? " ring" : " one-shot"));
      // ipc_ring's kernels (either mode): their settings say so.
      const bool ipc =
          BackendNamed(backend()).tuning.size() == IpcRingSettings().size() &&
          BackendNamed(backend()).tuning.front().name ==
              IpcRingSettings().front().name;
      IpcRingTuning tuning;  // (nccl has none)
      tuning.oneshot_bytes = ring ? 0 : 1000000000;
      tuning.buffer_bytes = 8388608;
      auto results = RunJob(
          backend(), world,
          [&](const RankContext& c) {
            auto comm = Make(backend(), c, tuning);
            for (size_t count : counts) {
              std::vector<std::vector<float>> in(world,
                                                 std::vector<float>(count));
              for (int r = 0; r < world; ++r) {
                std::mt19937 gen(1000 * r + 7);
                std::uniform_real_distribution<float> u(-1.0f, 1.0f);
                for (float& v : in[r]) v = u(gen);
              }
              auto d = Device(in[c.rank]);
              comm->AllReduce(d->data(), count, ReduceOp::kSum);
              std::vector<float> got = d->Download();
              uint64_t hash = 1469598103934665603ull;  // FNV-1a
              for (float v : got) {
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                hash = (hash ^ bits) * 1099511628211ull;
              }
              const std::string key = "hash/" + std::to_string(count) + "/";
              c.store->Set(key + std::to_string(c.rank), std::to_string(hash));
              for (int r = 0; r < world; ++r) {
                Check(c.store->Get(key + std::to_string(r),
                                   milliseconds(60000)) == std::to_string(hash),
                      "count " + std::to_string(count) + ": rank " +
                          std::to_string(r) + " holds different bits");
              }
              if (!ipc) continue;
              // Pieces of at most 8 MiB / 4 floats, each its own ring.
              const size_t cap = 8388608 / sizeof(float);
              for (size_t off = 0; off < count; off += cap) {
                const size_t n = std::min(cap, count - off);
                for (size_t i = 0; i < n; ++i) {
                  // Segments are ceil(n/N) rounded up to 4 floats long.
                  const size_t seg = ((n + world - 1) / world + 3) & ~size_t{3};
                  const int first = ring ? static_cast<int>(i / seg) : 0;
                  float want = in[first][off + i];
                  for (int k = 1; k < world; ++k) {
                    want += in[(first + k) % world][off + i];
                  }
                  if (std::memcmp(&want, &got[off + i], 4) != 0) {
                    throw std::runtime_error(
                        "count " + std::to_string(count) + " element " +
                        std::to_string(off + i) + " differs from the " +
                        (ring ? "ring" : "one-shot") + " order");
                  }
                }
              }
            }
          },
          milliseconds(300000));
      for (const RankResult& r : results) {
        EXPECT_EQ(r.exit_code, 0) << Describe(results);
      }
      if (!ipc) break;  // NCCL picks its own algorithm
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuBackendTest,
                         ::testing::Values("nccl", "ipc_ring",
                                           "ipc_ring_threads"),
                         [](const auto& info) { return info.param; });

// ----------------------------------------------------------------------------
// ipc_ring only, with the ranks as processes and as threads.

class IpcRingTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SKIP_WITHOUT_GPU(); }
  const std::string& backend() const { return GetParam(); }
  // 2..4, as far as the mode allows here.
  std::vector<int> Worlds2To4() const {
    std::vector<int> worlds;
    for (int w : Worlds(backend())) {
      if (w >= 2) worlds.push_back(w);
    }
    return worlds;
  }
};

// Everything through the ring with 4 KiB chunks (many chunks per segment:
// the pipeline's counters) and a 64 KiB registered buffer (counts above it go
// through in pieces, each its own ring).
TEST_P(IpcRingTest, ExactSumsRingOnlySmallChunksInPieces) {
  for (int world : Worlds2To4()) {
    SCOPED_TRACE("world " + std::to_string(world));
    IpcRingTuning tuning;
    tuning.oneshot_bytes = 0;
    tuning.chunk_bytes = 4096;
    tuning.buffer_bytes = 65536;
    RunExactSums(backend(), world, CountsFor(world, false), tuning);
  }
}

// Everything that fits through the one-shot kernel.
TEST_P(IpcRingTest, ExactSumsOneShotOnly) {
  for (int world : Worlds2To4()) {
    SCOPED_TRACE("world " + std::to_string(world));
    IpcRingTuning tuning;
    tuning.oneshot_bytes = size_t{1} << 30;
    RunExactSums(backend(), world, {0, 1, 2, 3, 5, 17, 1021, 65537, 262147},
                 tuning);
  }
}

// A broadcast larger than the registered buffer (64 KiB here) goes through
// in pieces, each its own broadcast; every element must come from the root,
// also at the pieces' seams, with an unaligned end.
TEST_P(IpcRingTest, BroadcastLargerThanBufferGoesInPieces) {
  for (int world : Worlds2To4()) {
    if (world > 3) break;
    SCOPED_TRACE("world " + std::to_string(world));
    IpcRingTuning tuning;
    tuning.buffer_bytes = 65536;
    auto results = RunJob(
        backend(), world,
        [&](const RankContext& c) {
          auto comm = Make(backend(), c, tuning);
          const size_t count = 5 * (65536 / sizeof(float)) + 3;
          for (int root = 0; root < world; ++root) {
            std::vector<float> x(count);
            for (size_t i = 0; i < count; ++i) x[i] = ExactSumInput(c.rank, i);
            auto d = Device(x);
            comm->Broadcast(d->data(), count, root);
            x = d->Download();
            for (size_t i = 0; i < count; ++i) {
              Check(x[i] == ExactSumInput(root, i),
                    "root " + std::to_string(root) + " element " +
                        std::to_string(i));
            }
          }
        },
        milliseconds(120000));
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 0) << Describe(results);
    }
  }
}

// The 16-bit kernels round where kernels.h says: the ring after every
// partial sum, in the ring's order (comm/dtype's `add` on the host, the same
// widen-add-round), the one-shot once after a float32 sum in rank order
// (`sum_into`). Inputs whose sums round, so that another order or another
// rounding shows; 0 ulp demanded, as both sides do the same float32
// additions and round to nearest even.
TEST_P(IpcRingTest, SixteenBitSumsRoundAsTheHostKernels) {
  const size_t count = 65537;
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    for (int world : Worlds2To4()) {
      for (bool ring : {true, false}) {
        SCOPED_TRACE(std::string(DataTypeName(type)) + " world " +
                     std::to_string(world) + (ring ? " ring" : " one-shot"));
        IpcRingTuning tuning;
        tuning.oneshot_bytes = ring ? 0 : size_t{1} << 30;
        auto results = RunJob(
            backend(), world,
            [&](const RankContext& c) {
              const dtype::ElementKernels& k = dtype::ScalarKernelsFor(type);
              std::vector<std::vector<uint16_t>> in(
                  world, std::vector<uint16_t>(count));
              for (int r = 0; r < world; ++r) {
                std::mt19937 gen(1000 * r + 7);
                std::uniform_real_distribution<float> u(-1.0f, 1.0f);
                for (uint16_t& v : in[r]) {
                  const float x = u(gen);
                  k.narrow(&v, &x, 1);
                }
              }
              std::vector<float> carrier((count + 1) / 2);
              std::memcpy(carrier.data(), in[c.rank].data(), count * 2);
              auto d = Device(carrier);
              auto comm = Make(backend(), c, tuning);
              comm->AllReduce(d->data(), count, type, ReduceOp::kSum);
              carrier = d->Download();
              std::vector<uint16_t> got(count);
              std::memcpy(got.data(), carrier.data(), count * 2);
              // Segments are ceil(n/N) rounded up to 8 elements (16 bytes).
              const size_t seg = ((count + world - 1) / world + 7) & ~size_t{7};
              for (size_t i = 0; i < count; ++i) {
                uint16_t want = 0;
                if (ring) {
                  const int first = static_cast<int>(i / seg);
                  want = in[first][i];
                  for (int q = 1; q < world; ++q) {
                    k.add(&want, &in[(first + q) % world][i], &want, 1);
                  }
                } else {
                  std::vector<const void*> srcs;
                  for (int q = 0; q < world; ++q) srcs.push_back(&in[q][i]);
                  void* dst = &want;
                  k.sum_into(srcs.data(), srcs.size(), &dst, 1, 1, 0.0f);
                }
                Check(got[i] == want, "element " + std::to_string(i) +
                                          " has bits " +
                                          std::to_string(got[i]) + ", not " +
                                          std::to_string(want));
              }
            },
            milliseconds(120000));
        for (const RankResult& r : results) {
          EXPECT_EQ(r.exit_code, 0) << Describe(results);
        }
      }
    }
  }
}

// Ranks in different collectives fail (none hangs), and each, having checked
// every peer's descriptor on entry, says "mismatched".
TEST_P(IpcRingTest, MismatchedCallsAreReported) {
  struct Case {
    const char* name;
    size_t oneshot_bytes;
    size_t count0, count1;
    bool broadcast0;
  };
  constexpr size_t kDefault = IpcRingTuning::kDefaultOneShotBytes;
  for (const Case& k : {Case{"one-shot counts", kDefault, 10, 11, false},
                        Case{"ring counts", 0, 100000, 100001, false},
                        Case{"kinds", kDefault, 10, 10, true}}) {
    SCOPED_TRACE(k.name);
    IpcRingTuning tuning;
    tuning.oneshot_bytes = k.oneshot_bytes;
    auto results = RunJob(
        backend(), 2,
        [&](const RankContext& c) {
          auto comm = Make(backend(), c, tuning, milliseconds(20000));
          const size_t count = c.rank == 0 ? k.count0 : k.count1;
          auto d = Device(std::vector<float>(count, 1.0f));
          if (c.rank == 0 && k.broadcast0) {
            comm->Broadcast(d->data(), count, 0);
          } else {
            comm->AllReduce(d->data(), count, ReduceOp::kSum);
          }
        },
        milliseconds(120000));
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 1) << Describe(results);
      EXPECT_NE(r.output.find("mismatched"), std::string::npos)
          << Describe(results);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, IpcRingTest,
                         ::testing::Values("ipc_ring", "ipc_ring_threads"),
                         [](const auto& info) { return info.param; });

// ----------------------------------------------------------------------------
// nccl only.

// On a one-GPU machine NCCL cannot run two ranks; it must say so, not hang.
TEST(NcclTest, TwoRanksOnOneGpuFailWithAClearMessage) {
  if (!kNcclBuilt) GTEST_SKIP() << kNoNccl;
  SKIP_WITHOUT_GPU();
  if (Devices() != 1) GTEST_SKIP() << "needs exactly one GPU";
  auto results = RunRanks(
      2,
      [&](const RankContext& c) {
        try {
          Make("nccl", c, {}, milliseconds(20000));
        } catch (const CommError& e) {
          Check(std::string(e.what()).find("one GPU per rank") !=
                    std::string::npos,
                std::string("unexpected message: ") + e.what());
          return;
        }
        throw std::runtime_error("nccl accepted two ranks on one GPU");
      },
      milliseconds(60000));
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
  }
}

}  // namespace
}  // namespace ringlab::comm
