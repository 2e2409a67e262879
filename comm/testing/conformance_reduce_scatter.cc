// The conformance suite's ReduceScatter cases (conformance.h): for every
// element type and op the backend lists, each rank's block of the reduction
// bit for bit as the same communicator's AllReduce of the same inputs leaves
// it (nccl-tests' exact-sum integers, so float32 sums are also checked
// against the exact value), out of place and in place, for counts from 0 to
// 256 Ki; bus bytes; argument errors; ranks that disagree on the count.
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/dtype/kernels.h"
#include "comm/testing/conformance.h"
#include "comm/testing/exact_sum.h"

namespace ringlab::comm::testing {
namespace {

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// `count` elements of `type` in a RankBuffer of floats (which only carry the
// bytes): element i is ExactSumInput(rank, i) in the type.
std::unique_ptr<RankBuffer> Inputs(const Communicator& comm, DataType type,
                                   size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = ExactSumInput(comm.rank(), i);
  const size_t bytes = count * DataTypeSize(type);
  std::vector<float> carrier((bytes + 3) / 4 + 1, 0.0f);
  if (type == DataType::kFloat32) {
    std::memcpy(carrier.data(), values.data(), bytes);
  } else {
    dtype::ScalarKernelsFor(type).narrow(carrier.data(), values.data(), count);
  }
  return MakeBuffer(comm.memory(), carrier);
}

std::string Bytes(const RankBuffer& buffer, size_t offset, size_t bytes) {
  const std::vector<float> all = buffer.Download();
  return std::string(reinterpret_cast<const char*>(all.data()) + offset, bytes);
}

void ReduceScatterMatchesAllReduce(Communicator& comm,
                                   const BackendTraits& traits) {
  const int world = comm.world_size(), rank = comm.rank();
  for (DataType type : traits.types) {
    const size_t size = DataTypeSize(type);
    for (ReduceOp op : comm.description().ops) {
      for (size_t count :
           {size_t{0}, size_t{1}, size_t{7}, size_t{1021}, size_t{262147}}) {
        const std::string what = std::string("ReduceScatter ") +
                                 DataTypeName(type) + " " + ReduceOpName(op) +
                                 " of " + std::to_string(count) + " per rank";
        auto reference = Inputs(comm, type, world * count);
        comm.AllReduce(reference->data(), world * count, type, op);
        const std::string want =
            Bytes(*reference, rank * count * size, count * size);
        if (type == DataType::kFloat32 && op != ReduceOp::kMax &&
            op != ReduceOp::kMin) {
          const std::vector<float> got = reference->Download();
          CheckExactAllReduce(got.data(), world * count, world, op,
                              traits.avg_premultiplies);
        }
        for (bool in_place : {false, true}) {
          auto send = Inputs(comm, type, world * count);
          auto recv = Inputs(comm, type, count + 1);
          char* own =
              reinterpret_cast<char*>(send->data()) + rank * count * size;
          void* into = in_place ? static_cast<void*>(own) : recv->data();
          comm.ReduceScatter(send->data(), into, count, type, op);
          const std::string got =
              in_place ? Bytes(*send, rank * count * size, count * size)
                       : Bytes(*recv, 0, count * size);
          Check(got == want, std::string(in_place ? "in-place " : "") + what +
                                 ": rank " + std::to_string(rank) +
                                 "'s block differs from AllReduce's");
        }
      }
    }
  }
}

void ReduceScatterBytesSent(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  for (size_t count : {size_t{1}, size_t{1021}}) {
    auto send = Inputs(comm, DataType::kFloat32, world * count);
    auto recv = Inputs(comm, DataType::kFloat32, count);
    const uint64_t before = comm.bytes_sent();
    comm.ReduceScatter(send->data(), recv->data(), count, DataType::kFloat32,
                       ReduceOp::kSum);
    const uint64_t got = comm.bytes_sent() - before;
    // A backend without a reduce-scatter of its own moves an allreduce's.
    const uint64_t want =
        comm.description().reduce_scatter
            ? ReduceScatterBusBytes(count * sizeof(float), world)
            : AllReduceBusBytes(world * count * sizeof(float), world);
    Check(got == want, "ReduceScatter of " + std::to_string(count) +
                           " floats per rank: bytes_sent grew by " +
                           std::to_string(got) + ", not " +
                           std::to_string(want));
  }
}

// Refused on the calling rank before anything moves (every rank makes the
// same bad call); the communicator stays usable.
void ReduceScatterArgumentErrors(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size();
  const size_t count = 5;
  auto send = Inputs(comm, DataType::kFloat32, world * count + 1);
  auto recv = Inputs(comm, DataType::kFloat32, count);
  float* blocks = send->data();
  bool refused = false;
  try {  // recv overlapping send other than as this rank's block
    comm.ReduceScatter(blocks, blocks + 1 + comm.rank() * count, count,
                       DataType::kFloat32, ReduceOp::kSum);
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  Check(refused, "an overlapping ReduceScatter was not refused");
  refused = false;
  try {
    comm.ReduceScatter(nullptr, recv->data(), count, DataType::kFloat32,
                       ReduceOp::kSum);
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  Check(refused, "a ReduceScatter from null was not refused");
  comm.ReduceScatter(blocks, recv->data(), count, DataType::kFloat32,
                     ReduceOp::kSum);
}

}  // namespace

std::vector<ConformanceCase> ReduceScatterCases() {
  std::vector<ConformanceCase> cases = {
      {"reduce_scatter_every_type_and_op", 1, ReduceScatterMatchesAllReduce},
      {"reduce_scatter_bus_bytes", 1, ReduceScatterBytesSent},
      {"reduce_scatter_argument_errors", 1, ReduceScatterArgumentErrors},
  };
  for (ConformanceCase& c : cases) c.needs_reduce_scatter = true;
  return cases;
}

std::vector<ConformanceCase> ReduceScatterMismatchCases() {
  ConformanceCase c = CountMismatchCase(
      "mismatched_count_reduce_scatter", 300,
      [](Communicator& comm, size_t mine) {
        std::vector<float> send(comm.world_size() * mine, 1.0f);
        std::vector<float> recv(mine);
        auto s = MakeBuffer(comm.memory(), send);
        auto r = MakeBuffer(comm.memory(), recv);
        comm.ReduceScatter(s->data(), r->data(), mine, DataType::kFloat32,
                           ReduceOp::kSum);
      });
  // Through AllReduce (BackendDescription::reduce_scatter) the counts named
  // are the whole buffers': "mismatched" is what every backend must say.
  c.must_name.clear();
  c.needs_reduce_scatter = true;
  return {c};
}

}  // namespace ringlab::comm::testing
