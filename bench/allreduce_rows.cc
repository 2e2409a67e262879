#include "bench/allreduce_rows.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <utility>

#include "bench/op_buffer.h"
#include "bench/sweep.h"
#include "comm/dtype/kernels.h"
#include "comm/shm_ring/kernels.h"

namespace ringlab::bench {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using Clock = std::chrono::steady_clock;

struct Result {
  double loop_s = 0;            // per op in the timed loop, max over ranks
  double p50_s = 0, p90_s = 0;  // per op after a barrier, max over ranks
  int64_t wrong = 0;
};

// (row label, bytes) -> result, filled on every rank, printed by rank 0.
std::map<std::pair<std::string, int64_t>, Result>& Results() {
  static auto* r = new std::map<std::pair<std::string, int64_t>, Result>;
  return *r;
}

// Times of this op on every rank -> the slowest (untimed exchange).
double MaxOverRanks(Communicator& comm, double seconds) {
  std::vector<float> all(comm.world_size(), 0.0f);
  all[comm.rank()] = static_cast<float>(seconds);
  comm.AllReduce(all.data(), all.size(), ReduceOp::kSum);
  return *std::max_element(all.begin(), all.end());
}

// Wrong elements after one op on exact-sum inputs (integers every type
// holds, with every partial sum), summed over the ranks (through the host
// backend, in two parts that floats hold exactly). The buffer's floats carry
// `count` elements of dtype.
int64_t CountWrong(Communicator* comm, Communicator* timer, OpBuffer& buffer,
                   size_t count, comm::DataType dtype) {
  const int rank = comm->rank(), world = comm->world_size();
  const comm::dtype::ElementKernels& k = comm::dtype::KernelsFor(dtype);
  std::vector<float> values(count), carrier((count * k.size + 3) / 4);
  for (size_t i = 0; i < count; ++i) values[i] = ExactSumInput(rank, i);
  k.narrow(carrier.data(), values.data(), count);
  buffer.Upload(carrier);
  comm->AllReduce(buffer.data(), count, dtype, ReduceOp::kSum);
  buffer.Sync();
  buffer.Download(&carrier);
  k.widen(values.data(), carrier.data(), count);
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += ExactSumInput(r, i);
    wrong += values[i] != want;
  }
  float parts[2] = {static_cast<float>(wrong >> 16),
                    static_cast<float>(wrong & 0xffff)};
  timer->AllReduce(parts, 2, ReduceOp::kSum);
  return (static_cast<int64_t>(parts[0]) << 16) +
         static_cast<int64_t>(parts[1]);
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// The p50 and p90 of `samples` ops, each timed alone after a barrier (the
// slowest rank's time of each).
void TimeOneByOne(Communicator* comm, Communicator* timer, int samples,
                  const std::function<void()>& op, Result* result) {
  std::vector<double> times;
  for (int i = 0; i < samples; ++i) {
    comm->Barrier();
    const auto t0 = Clock::now();
    op();
    times.push_back(MaxOverRanks(
        *timer, std::chrono::duration<double>(Clock::now() - t0).count()));
  }
  result->p50_s = Percentile(times, 0.5);
  result->p90_s = Percentile(times, 0.9);
}

std::string FloorName(bool registered, comm::DataType dtype) {
  return (registered ? "floor_registered" : "floor_private") + RowSuffix(dtype);
}

void PrintRowTable(const std::string& row, const std::vector<int64_t>& sizes,
                   int world, comm::DataType dtype, const LinkFloor* link) {
  const size_t element_size = comm::DataTypeSize(dtype);
  auto floor_of = [&](int64_t bytes) {
    const bool registered = row.rfind("allreduce_registered/", 0) == 0;
    auto f = Results().find({FloorName(registered, dtype), bytes});
    return f == Results().end() ? 0.0 : f->second.loop_s;
  };
  std::printf("\n# %s\n%12s %12s %10s %10s %10s %8s %8s %7s %7s\n", row.c_str(),
              "size(B)", "count", "time(us)", "p50(us)", "p90(us)", "algbw",
              "busbw", "#wrong", link != nullptr ? "xlink" : "xfloor");
  for (int64_t bytes : sizes) {
    auto it = Results().find({row, bytes});
    if (it == Results().end()) continue;
    const Result& r = it->second;
    const double algbw = bytes / r.loop_s / 1e9;
    const double busbw = algbw * 2.0 * (world - 1) / world;
    const double floor_s = floor_of(bytes);
    const double last = link != nullptr
                            ? busbw * 1e9 / link->ReferenceBytesPerSecond()
                        : floor_s > 0 ? r.loop_s / floor_s
                                      : 0.0;
    std::printf("%12lld %12lld %10.2f %10.2f %10.2f %8.3f %8.3f %7lld %7.2f\n",
                static_cast<long long>(bytes),
                static_cast<long long>(bytes / element_size), r.loop_s * 1e6,
                r.p50_s * 1e6, r.p90_s * 1e6, algbw, busbw,
                static_cast<long long>(r.wrong), last);
  }
}

}  // namespace

std::string RowSuffix(comm::DataType dtype) {
  return dtype == comm::DataType::kFloat32
             ? ""
             : std::string("/") + comm::DataTypeName(dtype);
}

// Timed ops reduce zeros: a sum that stays finite however many ops run back
// to back (the arithmetic costs the same for any finite value).
void AllReduceRow(benchmark::State& state, Communicator* comm,
                  Communicator* timer, const std::string& row, int64_t bytes,
                  float* allocated, const RowOptions& options) {
  // The buffer holds bytes / 4 floats, which carry count elements.
  const size_t count =
      static_cast<size_t>(bytes) / comm::DataTypeSize(options.dtype);
  const int world = comm->world_size();
  OpBuffer buffer(comm->memory(), static_cast<size_t>(bytes) / sizeof(float),
                  allocated);
  buffer.Upload(std::vector<float>(bytes / sizeof(float), 0.0f));
  auto op = [&] {
    comm->AllReduce(buffer.data(), count, options.dtype, ReduceOp::kSum);
    buffer.Sync();
  };
  for (int i = 0; i < options.warmup_iters; ++i) op();
  const int64_t iters = IterationsFor(bytes, options.max_iters);
  Result result;
  for (auto _ : state) {
    comm->Barrier();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < iters; ++i) op();
    const double loop =
        std::chrono::duration<double>(Clock::now() - t0).count();
    result.loop_s = MaxOverRanks(*timer, loop / static_cast<double>(iters));
    state.SetIterationTime(result.loop_s);
  }
  TimeOneByOne(comm, timer, options.samples, op, &result);
  result.wrong = CountWrong(comm, timer, buffer, count, options.dtype);
  const double algbw = static_cast<double>(bytes) / result.loop_s / 1e9;
  state.counters["time_us"] = result.loop_s * 1e6;
  state.counters["p50_us"] = result.p50_s * 1e6;
  state.counters["p90_us"] = result.p90_s * 1e6;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * 2.0 * (world - 1) / world;
  state.counters["wrong"] = static_cast<double>(result.wrong);
  Results()[{row, bytes}] = result;
}

// The registered allreduce's reduction (comm/dtype's sum_into of the type)
// over world_size buffers of this rank's (its segment: S read, S written),
// after, for a private buffer, one copy of S into them.
void FloorRow(benchmark::State& state, Communicator* timer, int64_t bytes,
              bool registered, const RowOptions& options) {
  const comm::dtype::ElementKernels& k = comm::dtype::KernelsFor(options.dtype);
  const size_t count = static_cast<size_t>(bytes) / k.size;
  const int world = timer->world_size(), rank = timer->rank();
  // Zeros: finite however many sums run, in every type.
  std::vector<std::vector<char>> buffers(world, std::vector<char>(bytes, 0));
  std::vector<char> input(registered ? 0 : bytes, 0);
  std::vector<const void*> sources;
  std::vector<void*> targets;
  const size_t seg = (count + world - 1) / world;
  const size_t a = std::min(count, rank * seg), b = std::min(count, a + seg);
  for (auto& buffer : buffers) {
    targets.push_back(buffer.data() + a * k.size);
    sources.push_back(targets.back());
  }
  const int64_t iters = IterationsFor(bytes, options.max_iters);
  auto moves = [&] {
    if (!registered) {
      comm::shm::CopyBytes(buffers[rank].data(), input.data(), input.size());
    }
    k.sum_into(sources.data(), sources.size(), targets.data(), targets.size(),
               b - a, 0.0f);
  };
  moves();
  double per_op = 0;
  for (auto _ : state) {
    timer->Barrier();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < iters; ++i) moves();
    benchmark::ClobberMemory();
    const double loop =
        std::chrono::duration<double>(Clock::now() - t0).count();
    per_op = MaxOverRanks(*timer, loop / static_cast<double>(iters));
    state.SetIterationTime(per_op);
  }
  state.counters["time_us"] = per_op * 1e6;
  Results()[{FloorName(registered, options.dtype), bytes}] =
      Result{per_op, per_op, per_op, 0};
}

void PrintTables(const std::vector<std::string>& rows, int world,
                 comm::DataType dtype, const LinkFloor* link) {
  std::printf(
      "\n# nccl-tests style: allreduce, %s, sum, %d ranks; time = timed "
      "loop / ops, p50 and p90 of ops after a barrier; all max over ranks\n",
      comm::DataTypeName(dtype), world);
  std::vector<int64_t> sizes;
  for (const auto& [key, r] : Results()) sizes.push_back(key.second);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (const std::string& row : rows) {
    PrintRowTable(row, sizes, world, dtype, link);
  }
  if (link != nullptr) {
    std::printf(
        "\n# link floor: one TCP stream between two hosts carried %.3f GB/s "
        "(%.3f Gbit/s) through links of %s; xlink = busbw / %.3f GB/s\n",
        link->tcp_bits / 8e9, link->tcp_bits / 1e9,
        link->rate_bits > 0
            ? (std::to_string(link->rate_bits / 1e9).substr(0, 5) + " Gbit/s")
                  .c_str()
            : "unlimited rate",
        link->ReferenceBytesPerSecond() / 1e9);
  }
  if (link != nullptr) {  // across hosts the link is the floor
    std::fflush(stdout);
    return;
  }
  std::printf(
      "\n# floors (us): every rank at once; private = registered + "
      "one copy of the buffer\n%12s %14s %14s\n",
      "size(B)", "private", "registered");
  for (int64_t bytes : sizes) {
    auto p = Results().find({FloorName(false, dtype), bytes});
    auto r = Results().find({FloorName(true, dtype), bytes});
    if (p == Results().end() || r == Results().end()) continue;
    std::printf("%12lld %14.2f %14.2f\n", static_cast<long long>(bytes),
                p->second.loop_s * 1e6, r->second.loop_s * 1e6);
  }
  std::fflush(stdout);
}

}  // namespace ringlab::bench
