// The conformance suite's cases for the 16-bit element types (conformance.h),
// run for every type a backend's description lists besides float32: exact
// sums and averages (integers the type holds exactly, so every partial sum
// in any order is exact and the average rounds once, from float32), buffers
// two bytes off a float's alignment with guards around them, bitwise
// equality across ranks on sums that round, broadcast from every root and
// allgather in and out of place of arbitrary bit patterns, bus bytes
// counted in the type's size, and ranks that disagree on the type.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/dtype/kernels.h"
#include "comm/testing/conformance.h"
#include "comm/testing/exact_sum.h"

namespace ringlab::comm::testing {
namespace {

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::vector<DataType> SixteenBitTypes(const Communicator& comm) {
  std::vector<DataType> types;
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    if (comm.description().Supports(t)) types.push_back(t);
  }
  return types;
}

uint16_t Narrow(DataType type, float x) {
  uint16_t v;
  dtype::ScalarKernelsFor(type).narrow(&v, &x, 1);
  return v;
}

// 16-bit values in a RankBuffer (whose floats only carry the bytes), at
// `offset` elements in, with `guard` before and after.
struct Buffer16 {
  Buffer16(const Communicator& comm, const std::vector<uint16_t>& values,
           size_t offset = 0, uint16_t guard = 0x5a5a)
      : offset(offset), count(values.size()) {
    std::vector<uint16_t> padded(offset + count + 2, guard);
    std::memcpy(padded.data() + offset, values.data(), count * 2);
    std::vector<float> carrier((padded.size() + 1) / 2, 0.0f);
    std::memcpy(carrier.data(), padded.data(), padded.size() * 2);
    buffer = MakeBuffer(comm.memory(), carrier);
  }
  void* data() { return reinterpret_cast<uint16_t*>(buffer->data()) + offset; }
  // Every element, guards included.
  std::vector<uint16_t> All() const {
    const std::vector<float> carrier = buffer->Download();
    std::vector<uint16_t> v(offset + count + 2);
    std::memcpy(v.data(), carrier.data(), v.size() * 2);
    return v;
  }
  std::vector<uint16_t> Values() const {
    const std::vector<uint16_t> all = All();
    return {all.begin() + offset, all.begin() + offset + count};
  }
  size_t offset, count;
  std::unique_ptr<RankBuffer> buffer;
};

// ExactSumInput is periodic in i with period 61.
constexpr size_t kPeriod = 61;

std::vector<uint16_t> ExactInputs(DataType type, int rank, size_t count) {
  uint16_t period[kPeriod];
  for (size_t i = 0; i < kPeriod; ++i) {
    period[i] = Narrow(type, ExactSumInput(rank, i));
  }
  std::vector<uint16_t> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = period[i % kPeriod];
  return x;
}

// The sum over the ranks of ExactSumInput (exact in every order: integers of
// at most 30 * 4 in magnitude), or that divided by N in float32 and rounded
// once.
void CheckExact16(DataType type, const std::vector<uint16_t>& got, int world,
                  ReduceOp op, const std::string& what) {
  uint16_t period[kPeriod];
  for (size_t i = 0; i < kPeriod; ++i) {
    float sum = 0;
    for (int r = 0; r < world; ++r) sum += ExactSumInput(r, i);
    period[i] = Narrow(
        type, op == ReduceOp::kAvg ? sum / static_cast<float>(world) : sum);
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const uint16_t want = period[i % kPeriod];
    if (got[i] == want) continue;
    Check(false, what + " " + DataTypeName(type) + " count " +
                     std::to_string(got.size()) + " op " + ReduceOpName(op) +
                     " element " + std::to_string(i) + ": got " +
                     std::to_string(got[i]) + " want " + std::to_string(want));
  }
}

void ExactSums16(Communicator& comm, const BackendTraits& traits) {
  const int world = comm.world_size();
  // ncclAvg pre-multiplies by 1/N in the type: exact only for powers of two.
  const bool avg_exact =
      !traits.avg_premultiplies || (world & (world - 1)) == 0;
  for (DataType type : SixteenBitTypes(comm)) {
    for (size_t count :
         {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{17}, size_t{1021},
          size_t{4099}, size_t{65537}, size_t{262147}, size_t{2} << 20}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        if (op == ReduceOp::kAvg && !avg_exact) continue;
        Buffer16 b(comm, ExactInputs(type, comm.rank(), count));
        comm.AllReduce(b.data(), count, type, op);
        CheckExact16(type, b.Values(), world, op, "AllReduce");
      }
    }
  }
}

// Max and min of the exact inputs, where the backend has them.
void MaxAndMin16(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  for (DataType type : SixteenBitTypes(comm)) {
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      if (!comm.description().Supports(op)) continue;
      for (size_t count : {size_t{1}, size_t{1021}, size_t{262147}}) {
        Buffer16 b(comm, ExactInputs(type, comm.rank(), count));
        comm.AllReduce(b.data(), count, type, op);
        const std::vector<uint16_t> got = b.Values();
        for (size_t i = 0; i < count; ++i) {
          float want = ExactSumInput(0, i);
          for (int r = 1; r < world; ++r) {
            want = op == ReduceOp::kMax ? std::max(want, ExactSumInput(r, i))
                                        : std::min(want, ExactSumInput(r, i));
          }
          Check(got[i] == Narrow(type, want),
                std::string(ReduceOpName(op)) + " of " + DataTypeName(type) +
                    " count " + std::to_string(count) + ": element " +
                    std::to_string(i));
        }
      }
    }
  }
}

// One element (two bytes) into the allocation: not a float's alignment.
void Unaligned16(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  for (DataType type : SixteenBitTypes(comm)) {
    for (size_t count : {size_t{1}, size_t{4097}, size_t{262145}}) {
      Buffer16 a(comm, ExactInputs(type, comm.rank(), count), 1);
      comm.AllReduce(a.data(), count, type, ReduceOp::kSum);
      std::vector<uint16_t> all = a.All();
      Check(all[0] == 0x5a5a && all[count + 1] == 0x5a5a &&
                all[count + 2] == 0x5a5a,
            std::string("unaligned AllReduce of ") + DataTypeName(type) +
                " wrote outside its range");
      CheckExact16(type, a.Values(), world, ReduceOp::kSum,
                   "unaligned AllReduce");
      const int root = world - 1;
      Buffer16 b(comm, ExactInputs(type, comm.rank(), count), 1);
      comm.Broadcast(b.data(), count, type, root);
      all = b.All();
      Check(all[0] == 0x5a5a && all[count + 1] == 0x5a5a,
            "unaligned Broadcast wrote outside its range");
      Check(b.Values() == ExactInputs(type, root, count),
            "unaligned Broadcast of " + std::to_string(count));
    }
  }
}

// Sums that round (random magnitudes): every rank holds the same bits.
void Bitwise16(Communicator& comm, const BackendTraits&) {
  for (DataType type : SixteenBitTypes(comm)) {
    for (size_t count : {size_t{1021}, size_t{100003}}) {
      std::mt19937 rng(99 + comm.rank());
      std::uniform_real_distribution<float> u(-1, 1);
      std::vector<uint16_t> x(count);
      for (auto& v : x) v = Narrow(type, u(rng) * std::ldexp(1.0f, rng() % 12));
      Buffer16 mine(comm, x);
      comm.AllReduce(mine.data(), count, type, ReduceOp::kAvg);
      const std::vector<uint16_t> result = mine.Values();
      for (int r = 0; r < comm.world_size(); ++r) {
        Buffer16 theirs(comm, result);
        comm.Broadcast(theirs.data(), count, type, r);
        Check(theirs.Values() == result,
              std::string(DataTypeName(type)) + " count " +
                  std::to_string(count) + ": rank " + std::to_string(r) +
                  " holds other bits than rank " + std::to_string(comm.rank()));
      }
    }
  }
}

std::vector<uint16_t> Pattern(int rank, size_t count) {
  std::vector<uint16_t> x(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] = static_cast<uint16_t>(i * 40503u + static_cast<size_t>(rank) * 977u);
  }
  return x;
}

// Broadcast and allgather move bits, whatever they mean (NaNs included).
void Moves16(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  for (DataType type : SixteenBitTypes(comm)) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{300001}}) {
      for (int root = 0; root < world; ++root) {
        Buffer16 b(comm, Pattern(comm.rank(), count));
        comm.Broadcast(b.data(), count, type, root);
        Check(b.Values() == Pattern(root, count),
              std::string("Broadcast of ") + DataTypeName(type) + " count " +
                  std::to_string(count) + " root " + std::to_string(root));
      }
      for (bool in_place : {false, true}) {
        std::vector<uint16_t> recv(count * world, 0);
        if (in_place) {
          const std::vector<uint16_t> own = Pattern(comm.rank(), count);
          std::copy(own.begin(), own.end(), recv.begin() + comm.rank() * count);
        }
        Buffer16 r(comm, recv);
        Buffer16 s(comm, Pattern(comm.rank(), count));
        uint16_t* base = static_cast<uint16_t*>(r.data());
        comm.AllGather(in_place ? base + comm.rank() * count : s.data(), base,
                       count, type);
        const std::vector<uint16_t> got = r.Values();
        for (int q = 0; q < world; ++q) {
          Check(std::vector<uint16_t>(got.begin() + q * count,
                                      got.begin() + (q + 1) * count) ==
                    Pattern(q, count),
                std::string("AllGather of ") + DataTypeName(type) + " count " +
                    std::to_string(count) + ": rank " + std::to_string(q) +
                    "'s block" + (in_place ? " (in place)" : ""));
        }
      }
    }
  }
}

void BusBytes16(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  for (DataType type : SixteenBitTypes(comm)) {
    const size_t count = 1021;
    Buffer16 b(comm, ExactInputs(type, comm.rank(), count));
    Buffer16 gathered(comm, std::vector<uint16_t>(count * world, 0));
    uint64_t before = comm.bytes_sent();
    comm.AllReduce(b.data(), count, type, ReduceOp::kSum);
    comm.Broadcast(b.data(), count, type, 0);
    comm.AllGather(b.data(), gathered.data(), count, type);
    const uint64_t want = AllReduceBusBytes(count * 2, world) +
                          BroadcastBusBytes(count * 2, world) +
                          AllGatherBusBytes(count * 2, world);
    Check(comm.bytes_sent() - before == want,
          std::string(DataTypeName(type)) + ": bytes_sent grew by " +
              std::to_string(comm.bytes_sent() - before) + ", bus bytes are " +
              std::to_string(want));
  }
}

}  // namespace

std::vector<ConformanceCase> DataTypeCases() {
  std::vector<ConformanceCase> cases = {
      {"dtype_exact_sums", 1, ExactSums16, {}},
      {"dtype_max_and_min", 1, MaxAndMin16, {}},
      {"dtype_unaligned_buffers", 1, Unaligned16, {}},
      {"dtype_bitwise_identical_across_ranks", 2, Bitwise16, {}},
      {"dtype_broadcast_and_allgather", 1, Moves16, {}},
      {"dtype_bus_bytes", 1, BusBytes16, {}},
  };
  // Every backend with 16-bit types has float16 (bfloat16 is run where it
  // is listed too).
  for (ConformanceCase& c : cases) c.needs_type = DataType::kFloat16;
  return cases;
}

std::vector<ConformanceCase> DataTypeMismatchCases() {
  std::vector<ConformanceCase> cases;
  for (const auto& [path, count] : {std::pair<const char*, size_t>{"inline", 4},
                                    {"one_shot", 4096},
                                    {"ring", size_t{1} << 20}}) {
    ConformanceCase c;
    c.name = std::string("mismatched_dtype_") + path;
    c.min_world = 2;
    c.must_name = {"float16"};
    c.needs_type = DataType::kFloat16;
    // Rank 1 reduces the same bytes as 2 * count float16 values.
    c.run = [count = count](Communicator& comm, const BackendTraits&) {
      const bool odd = comm.rank() == 1;
      auto buffer =
          MakeBuffer(comm.memory(), std::vector<float>(count + 1, 1.0f));
      ExpectMismatchError(comm, [&] {
        comm.AllReduce(buffer->data(), odd ? 2 * count : count,
                       odd ? DataType::kFloat16 : DataType::kFloat32,
                       ReduceOp::kSum);
      });
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace ringlab::comm::testing
