// AllGatherStrings over the backends linked in: processes (shm_ring, gloo),
// threads (host_threads), and, where CUDA is built and a GPU exists,
// ipc_ring_threads, whose device memory the strings are staged through.
// Every byte value, lengths that are not whole floats, empty strings, byte
// patterns that are NaNs and subnormals as floats, and a string long enough
// for each backend's large-message path; every rank gets every rank's
// string exactly.
#include "comm/gather_strings.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/testing/multi_process.h"
#include "gtest/gtest.h"

#ifdef RINGLAB_WITH_CUDA
#include "cuda/device.h"
#endif

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;
using testing::Describe;
using testing::RankResult;

// What rank r contributes in round k: lengths 0 to 9 (none a multiple of 4
// for most ranks), every byte value, a quiet and a signalling NaN and a
// subnormal in float terms, and in the last round 1 MiB plus a few bytes.
std::string Mine(int rank, int round) {
  if (round == 0) return rank % 2 == 0 ? "" : "odd";
  if (round == 1) {
    std::string s;
    for (int b = 0; b < 256; ++b) s += static_cast<char>((b + rank) & 0xff);
    return s + std::string(static_cast<size_t>(rank), '\0');
  }
  if (round == 2) {
    // Little-endian float bits: 0x7fc00001 (quiet NaN with a payload),
    // 0x7f800001 (signalling NaN), 0x00000001 (the smallest subnormal).
    const std::string bits("\x01\x00\xc0\x7f\x01\x00\x80\x7f\x01\x00\x00\x00",
                           12);
    return bits + std::to_string(rank);
  }
  if (round == 3) return std::string(static_cast<size_t>(rank * 3 + 1), 'x');
  std::string big((1 << 20) + rank * 5 + 3, '\0');
  for (size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<char>((i * 131 + rank * 7) >> 3);
  }
  return big;
}
constexpr int kRounds = 5;

void Exchange(Communicator& comm) {
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<std::string> all =
        AllGatherStrings(comm, Mine(comm.rank(), round));
    if (all.size() != static_cast<size_t>(comm.world_size())) {
      throw std::runtime_error("got " + std::to_string(all.size()) +
                               " strings");
    }
    for (int r = 0; r < comm.world_size(); ++r) {
      if (all[r] != Mine(r, round)) {
        throw std::runtime_error(
            "round " + std::to_string(round) + ": rank " + std::to_string(r) +
            "'s string differs (" + std::to_string(all[r].size()) + " bytes, " +
            std::to_string(Mine(r, round).size()) + " sent)");
      }
    }
  }
}

void ExpectAllPassed(const std::vector<RankResult>& results) {
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << Describe(results);
  }
}

std::unique_ptr<Communicator> Make(const std::string& backend,
                                   const RankContext& c) {
  CommOptions options;
  options.timeout = milliseconds(30000);
  return CreateCommunicator(backend, c, options);
}

TEST(AllGatherStringsTest, RanksAsProcesses) {
  for (const char* backend : {"shm_ring", "gloo"}) {
    for (int world : {1, 2, 3}) {
      SCOPED_TRACE(std::string(backend) + " world " + std::to_string(world));
      ExpectAllPassed(testing::RunRanks(
          world, [&](const RankContext& c) { Exchange(*Make(backend, c)); },
          milliseconds(120000)));
    }
  }
}

TEST(AllGatherStringsTest, RanksAsThreads) {
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE("host_threads world " + std::to_string(world));
    ExpectAllPassed(testing::RunThreadRanks(
        world,
        [&](const RankContext& c) { Exchange(*Make("host_threads", c)); },
        milliseconds(120000)));
  }
}

// Staged through device memory: ipc_ring_threads takes device pointers only.
TEST(AllGatherStringsTest, DeviceMemory) {
#ifdef RINGLAB_WITH_CUDA
  std::string why;
  if (cuda::DeviceCountInChild(&why) < 1) {
    GTEST_SKIP() << "no CUDA device: " << why;
  }
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("ipc_ring_threads world " + std::to_string(world));
    ExpectAllPassed(testing::RunThreadRanks(
        world,
        [&](const RankContext& c) {
          auto comm = Make("ipc_ring_threads", c);
          if (comm->memory() != MemoryKind::kDevice) {
            throw std::runtime_error("ipc_ring_threads not on device memory");
          }
          Exchange(*comm);
        },
        milliseconds(120000)));
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace ringlab::comm
