// The conformance suite's AllGather cases (conformance.h): every rank's block
// at its place on every rank, bit for bit, out of place and in place, for
// counts from 0 to 4 Mi floats; unaligned buffers with guards; bus bytes;
// argument errors; allgathers between the other collectives (buffers a
// backend reuses across calls); ranks that disagree on the count.
#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/testing/conformance.h"
#include "comm/testing/exact_sum.h"
#include "comm/testing/multi_process.h"

namespace ringlab::comm::testing {
namespace {

constexpr float kGuard = 12345.5f;
constexpr float kUnwritten = -7.25f;

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Element i of rank r's block: an integer below 2^24 (exact as a float),
// distinct across ranks, and within a block not periodic in any power of
// two, so a block or element in the wrong place shows.
float GatherInput(int rank, size_t i) {
  return static_cast<float>((static_cast<size_t>(rank) << 20) + i % 1048573);
}

std::vector<float> Block(int rank, size_t count) {
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = GatherInput(rank, i);
  return x;
}

// Throws unless got[q * count + i] is rank q's element i, bit for bit.
void CheckGathered(const float* got, size_t count, int world,
                   const std::string& what) {
  for (int q = 0; q < world; ++q) {
    for (size_t i = 0; i < count; ++i) {
      const float want = GatherInput(q, i);
      const float x = got[static_cast<size_t>(q) * count + i];
      if (std::memcmp(&x, &want, sizeof(float)) != 0) {
        throw std::runtime_error(
            what + " of " + std::to_string(count) + " floats: rank " +
            std::to_string(q) + "'s element " + std::to_string(i) + " is " +
            std::to_string(x) + ", want " + std::to_string(want));
      }
    }
  }
}

// Edge cases, primes (ragged chunks and pieces) and 16 MiB per rank.
std::vector<size_t> GatherCounts(int world) {
  return {0,
          1,
          static_cast<size_t>(world - 1),
          2,
          3,
          17,
          1021,
          4099,
          65537,
          262147,
          size_t{1} << 22};
}

void AllGatherBlocks(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size(), rank = comm.rank();
  for (size_t count : GatherCounts(world)) {
    auto send = MakeBuffer(comm.memory(), Block(rank, count));
    auto recv = MakeBuffer(comm.memory(),
                           std::vector<float>(world * count, kUnwritten));
    comm.AllGather(send->data(), recv->data(), count);
    CheckGathered(recv->Download().data(), count, world, "AllGather");
    Check(send->Download() == Block(rank, count),
          "AllGather of " + std::to_string(count) + " floats wrote its input");
  }
}

// send = recv + rank * count, as NCCL allows: the other blocks are filled in
// around this rank's own.
void AllGatherInPlace(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size(), rank = comm.rank();
  for (size_t count : GatherCounts(world)) {
    std::vector<float> host(world * count, kUnwritten);
    const std::vector<float> mine = Block(rank, count);
    std::copy(mine.begin(), mine.end(), host.begin() + rank * count);
    auto recv = MakeBuffer(comm.memory(), host);
    comm.AllGather(recv->data() + rank * count, recv->data(), count);
    CheckGathered(recv->Download().data(), count, world, "in-place AllGather");
  }
}

// One float into each allocation: pointers that are not 16-byte aligned, so
// vector paths must handle the edges; the guards around stay untouched.
void AllGatherUnaligned(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size(), rank = comm.rank();
  for (size_t count : {size_t{1}, size_t{4098}, size_t{262147}}) {
    for (bool in_place : {false, true}) {
      const std::string what =
          std::string(in_place ? "in-place " : "") + "unaligned AllGather";
      std::vector<float> host(world * count + 2, kUnwritten);
      host.front() = host.back() = kGuard;
      std::vector<float> input(count + 2, kGuard);
      const std::vector<float> mine = Block(rank, count);
      std::copy(mine.begin(), mine.end(), input.begin() + 1);
      if (in_place) {
        std::copy(mine.begin(), mine.end(), host.begin() + 1 + rank * count);
      }
      auto recv = MakeBuffer(comm.memory(), host);
      auto send = MakeBuffer(comm.memory(), input);
      comm.AllGather(
          in_place ? recv->data() + 1 + rank * count : send->data() + 1,
          recv->data() + 1, count);
      const std::vector<float> got = recv->Download();
      Check(got.front() == kGuard && got.back() == kGuard,
            what + " of " + std::to_string(count) +
                " floats wrote outside its range");
      CheckGathered(got.data() + 1, count, world, what);
    }
  }
}

void AllGatherBytesSent(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size(), rank = comm.rank();
  for (size_t count : {size_t{0}, size_t{1}, size_t{1021}, size_t{262147}}) {
    auto send = MakeBuffer(comm.memory(), Block(rank, count));
    auto recv = MakeBuffer(comm.memory(), std::vector<float>(world * count));
    const uint64_t before = comm.bytes_sent();
    comm.AllGather(send->data(), recv->data(), count);
    const uint64_t got = comm.bytes_sent() - before;
    const uint64_t want = AllGatherBusBytes(count * sizeof(float), world);
    Check(want == (world - 1) * count * sizeof(float),
          "AllGatherBusBytes is not (N-1) * count * 4");
    Check(got == want, "AllGather of " + std::to_string(count) +
                           " floats: bytes_sent grew by " +
                           std::to_string(got) + ", bus bytes are " +
                           std::to_string(want));
  }
}

// Bad arguments are refused on the calling rank before anything is sent
// (every rank makes the same bad call), and the communicator stays usable.
void AllGatherArgumentErrors(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size(), rank = comm.rank();
  auto refused = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const std::invalid_argument&) {
      return true;
    }
    return false;
  };
  const size_t count = 5;
  auto recv = MakeBuffer(comm.memory(), std::vector<float>(world * count + 1));
  float* r = recv->data();
  Check(refused([&] { comm.AllGather(nullptr, r, count); }),
        "AllGather(nullptr, recv, 5) accepted");
  Check(refused([&] { comm.AllGather(r, nullptr, count); }),
        "AllGather(send, nullptr, 5) accepted");
  // One float past this rank's block: overlapping, not in place.
  Check(refused([&] { comm.AllGather(r + rank * count + 1, r, count); }),
        "AllGather with send overlapping recv (not in place) accepted");
  auto send = MakeBuffer(comm.memory(), Block(rank, count));
  comm.AllGather(send->data(), r, count);
  CheckGathered(recv->Download().data(), count, world,
                "AllGather after refused calls");
}

// Allgathers of every size class between allreduces, broadcasts and
// barriers: buffers a backend reuses across calls (banks, mailboxes,
// staging areas) must not mix calls up.
void AllGatherBetweenOtherCalls(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size(), rank = comm.rank();
  const size_t sizes[] = {1, 1021, 70001};
  for (int i = 0; i < 12; ++i) {
    const size_t count = sizes[i % 3];
    auto reduced = MakeBuffer(comm.memory(), Block(rank, count));
    comm.AllReduce(reduced->data(), count, ReduceOp::kSum);
    auto send = MakeBuffer(comm.memory(), Block(rank, count));
    auto recv = MakeBuffer(comm.memory(),
                           std::vector<float>(world * count, kUnwritten));
    comm.AllGather(send->data(), recv->data(), count);
    const std::vector<float> gathered = recv->Download();
    CheckGathered(gathered.data(), count, world,
                  "AllGather call " + std::to_string(i));
    // The allreduce's result, from the gathered blocks, in rank order.
    const std::vector<float> sums = reduced->Download();
    for (size_t k = 0; k < count; ++k) {
      float want = 0;
      for (int q = 0; q < world; ++q) want += gathered[q * count + k];
      Check(sums[k] == want, "AllReduce call " + std::to_string(i) +
                                 " element " + std::to_string(k));
    }
    if (i % 2 == 0) comm.Barrier();
    comm.Broadcast(recv->data(), world * count, i % world);
    CheckGathered(recv->Download().data(), count, world,
                  "Broadcast after AllGather call " + std::to_string(i));
  }
}

// Rank 1 gathers one float more than the others: every rank's call throws a
// CommError saying "mismatched", and some rank's names both counts.
ConformanceCase Mismatch(const char* size, size_t count) {
  return CountMismatchCase(
      std::string("mismatched_allgather_count_") + size, count,
      [count](Communicator& comm, size_t mine) {
        auto send = MakeBuffer(comm.memory(), std::vector<float>(mine, 1.0f));
        auto recv = MakeBuffer(
            comm.memory(), std::vector<float>(comm.world_size() * (count + 1)));
        comm.AllGather(send->data(), recv->data(), mine);
      });
}

}  // namespace

std::vector<ConformanceCase> AllGatherCases() {
  return {
      {"allgather_blocks", 1, AllGatherBlocks, {}},
      {"allgather_in_place", 1, AllGatherInPlace, {}},
      {"allgather_unaligned", 1, AllGatherUnaligned, {}},
      {"allgather_bus_bytes", 1, AllGatherBytesSent, {}},
      {"allgather_argument_errors", 1, AllGatherArgumentErrors, {}},
      {"allgather_between_other_calls", 1, AllGatherBetweenOtherCalls, {}},
  };
}

std::vector<ConformanceCase> AllGatherMismatchCases() {
  // A block that takes each backend's small path (8 floats), one past the
  // one-shot sizes (16 KiB), and a large one (4 MiB).
  return {Mismatch("small", 8), Mismatch("medium", 4096),
          Mismatch("large", size_t{1} << 20)};
}

}  // namespace ringlab::comm::testing
