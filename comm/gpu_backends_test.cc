// The GPU backends' own tests (nccl, ipc_ring): bitwise equality with the
// ring's and the one-shot's known orders, paths forced through ipc_ring's
// tuning variables (pieces, chunks), its mismatch reports, NCCL's refusal of
// two ranks on one GPU. What every backend must do — exact sums, broadcasts,
// unaligned buffers, mismatches, dead and absent ranks — is the conformance
// suite's (conformance_gpu_test). Ranks are forked processes (RunRanks); the
// parent never initialises CUDA (it asks a forked child for the device count)
// and every GPU test skips when there is no device. The host-only tests (the
// registry, the ring's partition, creation without a device) run everywhere.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/cuda_device.h"
#include "comm/ipc_ring.h"
#include "comm/ipc_ring_kernels.h"
#include "comm/store.h"
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
using testing::RankResult;
using testing::RunRanks;

// Asked once, of a forked child (see cuda_device.h).
int Devices(std::string* why = nullptr) {
  static std::string reason;
  static const int count = CudaDeviceCountInChild(&reason);
  if (why) *why = reason;
  return count;
}

#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    std::string why;                                                   \
    if (Devices(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// The caller's buffer, in device memory as memory() == kDevice asks.
std::unique_ptr<testing::RankBuffer> Device(const std::vector<float>& host) {
  return testing::MakeBuffer(MemoryKind::kDevice, host);
}

std::unique_ptr<Communicator> Make(const std::string& backend,
                                   const RankContext& c,
                                   milliseconds timeout = milliseconds(60000)) {
  CommOptions options;
  options.timeout = timeout;
  options.local_rank = c.local_rank;
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
// so it runs up to the device count; ipc_ring shares GPUs between ranks.
std::vector<int> Worlds(const std::string& backend) {
  std::vector<int> worlds;
  for (int w : {1, 2, 3, 4}) {
    if (backend != "nccl" || w <= Devices()) worlds.push_back(w);
  }
  if (backend == "nccl" && Devices() < 4) {
    std::cout << "[   INFO   ] nccl: " << Devices()
              << " GPU(s); NCCL needs one GPU per rank, so it runs at world "
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
                  const std::vector<std::pair<const char*, const char*>>& env) {
  auto results = RunRanks(
      world,
      [&](const RankContext& c) {
        for (const auto& [name, value] : env) setenv(name, value, 1);
        auto comm = Make(backend, c);
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

TEST(GpuBackendsHostTest, BothBackendsAreRegistered) {
  auto names = RegisteredCommunicators();
  EXPECT_NE(std::find(names.begin(), names.end(), "nccl"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "ipc_ring"), names.end());
}

// Every element belongs to exactly one (segment, chunk, block) slice, and
// every slice starts 16-byte aligned: the kernel's float4 loads rely on it.
TEST(GpuBackendsHostTest, RingSlicesPartitionTheBuffer) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{17},
                       size_t{1021}, size_t{65537}, size_t{1000003}}) {
    for (int world : {1, 2, 3, 4, 7, 16}) {
      for (size_t chunk_bytes : {size_t{4096}, size_t{1} << 20}) {
        const int chunks = IpcRingChunks(count, world, chunk_bytes);
        ASSERT_GE(chunks, 1);
        ASSERT_LE(chunks, 64);
        std::vector<int> seen(count, 0);
        for (int s = 0; s < world; ++s) {
          for (int k = 0; k < chunks; ++k) {
            for (int b = 0; b < kIpcRingBlocks; ++b) {
              IpcRingRange r = IpcRingSlice(count, world, chunks, s, k, b);
              ASSERT_LE(r.begin, r.end);
              ASSERT_LE(r.end, count);
              if (r.begin < r.end) {
                ASSERT_EQ(r.begin % 4, 0u);
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
// factory is what --comm=nccl|ipc_ring reaches on a CPU-only machine).
TEST(GpuBackendsHostTest, CreationWithoutDeviceFailsClearly) {
  if (Devices() > 0) GTEST_SKIP() << "a CUDA device is present";
  for (const char* backend : {"nccl", "ipc_ring"}) {
    auto results = RunRanks(
        1,
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
    EXPECT_EQ(results[0].exit_code, 0) << backend << "\n" << Describe(results);
  }
}

// ----------------------------------------------------------------------------
// On a GPU, for each backend.

class GpuBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SKIP_WITHOUT_GPU(); }
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
      auto results = RunRanks(
          world,
          [&](const RankContext& c) {
            if (backend() == "ipc_ring") {
              setenv("RINGLAB_IPC_RING_ONESHOT_BYTES",
                     ring ? "0" : "1000000000", 1);
              setenv("RINGLAB_IPC_RING_BUFFER_BYTES", "8388608", 1);
            }
            auto comm = Make(backend(), c);
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
              if (backend() != "ipc_ring") continue;
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
      if (backend() != "ipc_ring") break;  // NCCL picks its own algorithm
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuBackendTest,
                         ::testing::Values("nccl", "ipc_ring"),
                         [](const auto& info) { return info.param; });

// ----------------------------------------------------------------------------
// ipc_ring only.

class IpcRingTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_GPU(); }
};

// Everything through the ring with 4 KiB chunks (many chunks per segment:
// the pipeline's counters) and a 64 KiB registered buffer (counts above it go
// through in pieces, each its own ring).
TEST_F(IpcRingTest, ExactSumsRingOnlySmallChunksInPieces) {
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    RunExactSums("ipc_ring", world, CountsFor(world, false),
                 {{"RINGLAB_IPC_RING_ONESHOT_BYTES", "0"},
                  {"RINGLAB_IPC_RING_CHUNK_BYTES", "4096"},
                  {"RINGLAB_IPC_RING_BUFFER_BYTES", "65536"}});
  }
}

// Everything that fits through the one-shot kernel.
TEST_F(IpcRingTest, ExactSumsOneShotOnly) {
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    RunExactSums("ipc_ring", world, {0, 1, 2, 3, 5, 17, 1021, 65537, 262147},
                 {{"RINGLAB_IPC_RING_ONESHOT_BYTES", "1073741824"}});
  }
}

// A broadcast larger than the registered buffer (64 KiB here) goes through
// in pieces, each its own broadcast; every element must come from the root,
// also at the pieces' seams, with an unaligned end.
TEST_F(IpcRingTest, BroadcastLargerThanBufferGoesInPieces) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    auto results = RunRanks(
        world,
        [&](const RankContext& c) {
          setenv("RINGLAB_IPC_RING_BUFFER_BYTES", "65536", 1);
          auto comm = Make("ipc_ring", c);
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

// Ranks in different collectives fail (none hangs), and the rank that sees
// the other's call names both, as shm_ring does.
TEST_F(IpcRingTest, MismatchedCallsAreReported) {
  struct Case {
    const char* name;
    const char* oneshot_bytes;
    size_t count0, count1;
    bool broadcast0;
  };
  for (const Case& k : {Case{"one-shot counts", nullptr, 10, 11, false},
                        Case{"ring counts", "0", 100000, 100001, false},
                        Case{"kinds", nullptr, 10, 10, true}}) {
    SCOPED_TRACE(k.name);
    auto results = RunRanks(
        2,
        [&](const RankContext& c) {
          if (k.oneshot_bytes) {
            setenv("RINGLAB_IPC_RING_ONESHOT_BYTES", k.oneshot_bytes, 1);
          }
          auto comm = Make("ipc_ring", c, milliseconds(20000));
          const size_t count = c.rank == 0 ? k.count0 : k.count1;
          auto d = Device(std::vector<float>(count, 1.0f));
          if (c.rank == 0 && k.broadcast0) {
            comm->Broadcast(d->data(), count, 0);
          } else {
            comm->AllReduce(d->data(), count, ReduceOp::kSum);
          }
        },
        milliseconds(120000));
    bool named = false;
    for (const RankResult& r : results) {
      EXPECT_EQ(r.exit_code, 1) << Describe(results);
      named = named || r.output.find("mismatched") != std::string::npos;
    }
    EXPECT_TRUE(named) << Describe(results);
  }
}

// ----------------------------------------------------------------------------
// nccl only.

// On a one-GPU machine NCCL cannot run two ranks; it must say so, not hang.
TEST(NcclTest, TwoRanksOnOneGpuFailWithAClearMessage) {
  SKIP_WITHOUT_GPU();
  if (Devices() != 1) GTEST_SKIP() << "needs exactly one GPU";
  auto results = RunRanks(
      2,
      [&](const RankContext& c) {
        try {
          Make("nccl", c, milliseconds(20000));
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
