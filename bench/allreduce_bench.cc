// Allreduce sweeps over every backend linked in and able to start, reported as
// nccl-tests does: per message size the time of one op (timed after a barrier,
// the max over ranks), algbw = bytes / time and busbw = algbw * 2(N-1)/N in
// GB/s, and the number of wrong elements. Next to them, a memory-bandwidth
// floor for the same sizes (each rank, all at once, copies the buffer once and
// adds one buffer into another once) so every figure reads as a fraction of
// what the memory system allows.
//
// Without RANK in the environment the binary launches itself for --nprocs
// ranks (LaunchRanks). Rank 0 prints the Google Benchmark output and the
// tables; the other ranks run the same fixed iteration sequence silently.
// MPI only starts under mpirun; to compare shm_ring with MPI in one run:
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 mpirun -np 2 -x MASTER_ADDR
//     -x MASTER_PORT bazel-bin/bench/allreduce_bench --backends=shm_ring,mpi
// Backend variants for tuning: "shm_ring:oneshot=BYTES:chunk=BYTES";
// "mpi:check=0" is plain MPI_Allreduce, without mpi's cross-rank call check
// (one extra small allreduce per call): the anchor of the comparison.
#include <gflags/gflags.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#ifdef RINGLAB_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#include "bench/rank_output.h"
#include "comm/communicator.h"
#include "comm/launch.h"
#include "comm/rendezvous.h"

DEFINE_int32(nprocs, 2, "ranks to launch when not already a rank");
DEFINE_string(backends, "",
              "comma-separated backends (default: every one registered); "
              "shm_ring:oneshot=B:chunk=B sets shm_ring's tuning");
DEFINE_int64(min_bytes, 4, "smallest message");
DEFINE_int64(max_bytes, 256 << 20, "largest message (sizes go by powers of 4)");
DEFINE_double(timeout_s, 120, "deadline of every wait between ranks");
DEFINE_bool(floor, true, "also measure the memory-bandwidth floor");
DEFINE_bool(pin, true,
            "pin rank r to CPU r mod the CPUs allowed, so that ranks do not "
            "migrate between samples");

namespace ringlab::bench {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using Clock = std::chrono::steady_clock;

struct Result {
  double seconds = 0;  // per op, max over ranks, mean over iterations
  int64_t wrong = 0;
};

// (backend label, bytes) -> result, filled on every rank, printed by rank 0.
std::map<std::pair<std::string, int64_t>, Result>& Results() {
  static auto* r = new std::map<std::pair<std::string, int64_t>, Result>;
  return *r;
}

// Few iterations for big messages, many for small: each size costs about the
// same, and the count is fixed, so no rank can decide to run one more.
int64_t IterationsFor(int64_t bytes) {
  return std::clamp<int64_t>(
      (int64_t{256} << 20) / std::max<int64_t>(bytes, 1) / 4, 5, 2000);
}

// Small integers as nccl-tests: every sum is exact, so a result is either
// exactly right or wrong.
float Input(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 61) - 30);
}

// Times of this op on every rank -> the slowest (untimed exchange).
double MaxOverRanks(Communicator& comm, double seconds,
                    std::vector<float>& scratch) {
  std::fill(scratch.begin(), scratch.end(), 0.0f);
  scratch[comm.rank()] = static_cast<float>(seconds);
  comm.AllReduce(scratch.data(), scratch.size(), ReduceOp::kSum);
  return *std::max_element(scratch.begin(), scratch.end());
}

// The buffer a backend works on: host memory, or device memory for the GPU
// backends (only in builds with CUDA).
class Buffer {
 public:
  Buffer(comm::MemoryKind kind, size_t count) : kind_(kind), count_(count) {
    if (kind_ == comm::MemoryKind::kHost) {
      host_.resize(count);
      ptr_ = host_.data();
      return;
    }
#ifdef RINGLAB_WITH_CUDA
    if (cudaMalloc(reinterpret_cast<void**>(&ptr_),
                   std::max<size_t>(count, 1) * sizeof(float)) != cudaSuccess) {
      throw std::runtime_error("cudaMalloc failed");
    }
#else
    throw std::runtime_error("device buffers need a build with CUDA");
#endif
  }
  ~Buffer() {
#ifdef RINGLAB_WITH_CUDA
    if (kind_ == comm::MemoryKind::kDevice) cudaFree(ptr_);
#endif
  }
  float* data() { return ptr_; }
  void Upload(const std::vector<float>& v) {
    if (kind_ == comm::MemoryKind::kHost) {
      std::copy(v.begin(), v.end(), host_.begin());
      return;
    }
#ifdef RINGLAB_WITH_CUDA
    cudaMemcpy(ptr_, v.data(), count_ * sizeof(float), cudaMemcpyHostToDevice);
#endif
  }
  void Download(std::vector<float>* v) {
    if (kind_ == comm::MemoryKind::kHost) {
      *v = host_;
      return;
    }
#ifdef RINGLAB_WITH_CUDA
    cudaMemcpy(v->data(), ptr_, count_ * sizeof(float), cudaMemcpyDeviceToHost);
#endif
  }
  // The op is only done when the device is: part of its time.
  void Sync() {
#ifdef RINGLAB_WITH_CUDA
    if (kind_ == comm::MemoryKind::kDevice) cudaDeviceSynchronize();
#endif
  }

 private:
  comm::MemoryKind kind_;
  size_t count_;
  std::vector<float> host_;
  float* ptr_ = nullptr;
};

// comm runs the op; timer (a host-memory backend) exchanges the times.
void BM_AllReduce(benchmark::State& state, Communicator* comm,
                  Communicator* timer, std::string label, int64_t bytes) {
  const size_t count = static_cast<size_t>(bytes) / sizeof(float);
  const int rank = comm->rank(), world = comm->world_size();
  std::vector<float> host(count), scratch(world);
  Buffer buffer(comm->memory(), count);
  // One checked op first (also the warm-up): count the wrong elements.
  for (size_t i = 0; i < count; ++i) host[i] = Input(rank, i);
  buffer.Upload(host);
  comm->AllReduce(buffer.data(), count, ReduceOp::kSum);
  buffer.Sync();
  buffer.Download(&host);
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += Input(r, i);
    wrong += host[i] != want;
  }
  // Every rank's wrong elements, not rank 0's only: summed over the ranks
  // through the host backend, in two parts that floats hold exactly.
  float parts[2] = {static_cast<float>(wrong >> 16),
                    static_cast<float>(wrong & 0xffff)};
  timer->AllReduce(parts, 2, ReduceOp::kSum);
  wrong =
      (static_cast<int64_t>(parts[0]) << 16) + static_cast<int64_t>(parts[1]);
  double total = 0;
  for (auto _ : state) {
    comm->Barrier();
    auto t0 = Clock::now();
    comm->AllReduce(buffer.data(), count, ReduceOp::kSum);
    buffer.Sync();
    double local = std::chrono::duration<double>(Clock::now() - t0).count();
    double t = MaxOverRanks(*timer, local, scratch);
    state.SetIterationTime(t);
    total += t;
  }
  const double seconds = total / static_cast<double>(state.iterations());
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  state.counters["time_us"] = seconds * 1e6;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * 2.0 * (world - 1) / world;
  state.counters["wrong"] = static_cast<double>(wrong);
  state.SetBytesProcessed(bytes * state.iterations());
  Results()[{label, bytes}] = {seconds, wrong};
}

// The floor: what any allreduce must at least do per rank, once over the
// buffer each: a copy (into shared memory) and an add (the reduction). All
// ranks run it at once, as they run the allreduce, sharing memory bandwidth.
// Built for AVX2 and plain x86-64 and picked at load time, as shm_ring's.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLOOR_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FLOOR_SIMD_CLONES
#endif
FLOOR_SIMD_CLONES __attribute__((noinline)) void FloorCopy(
    float* __restrict__ dst, const float* __restrict__ src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}
FLOOR_SIMD_CLONES __attribute__((noinline)) void FloorAdd(
    float* __restrict__ acc, const float* __restrict__ in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += in[i];
}

constexpr size_t kFloorBlock = (128 << 10) / sizeof(float);

void BM_Floor(benchmark::State& state, Communicator* comm, int64_t bytes) {
  const size_t count = static_cast<size_t>(bytes) / sizeof(float);
  // Two buffers, as an in-place allreduce has its buffer and a staging area.
  std::vector<float> a(count, 1.0f), b(count, 0.0f),
      scratch(comm->world_size());
  double total = 0;
  for (auto _ : state) {
    comm->Barrier();
    auto t0 = Clock::now();
    // In 128 KiB blocks and with plain loops, as shm_ring moves data (glibc's
    // memcpy is erratic on this machine; see comm/shm_ring.cc).
    for (size_t at = 0; at < count; at += kFloorBlock) {
      const size_t n = std::min(kFloorBlock, count - at);
      FloorCopy(b.data() + at, a.data() + at, n);
      FloorAdd(b.data() + at, a.data() + at, n);
    }
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
    double local = std::chrono::duration<double>(Clock::now() - t0).count();
    double t = MaxOverRanks(*comm, local, scratch);
    state.SetIterationTime(t);
    total += t;
  }
  const double seconds = total / static_cast<double>(state.iterations());
  state.counters["time_us"] = seconds * 1e6;
  Results()[{"floor", bytes}] = {seconds, 0};
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "shm_ring:oneshot=0:chunk=65536" -> creates shm_ring with those settings.
std::unique_ptr<Communicator> CreateVariant(const std::string& spec,
                                            const comm::RankContext& context,
                                            const comm::CommOptions& options) {
  std::vector<std::string> parts = Split(spec, ':');
  std::vector<std::string> set;
  for (size_t i = 1; i < parts.size(); ++i) {
    auto eq = parts[i].find('=');
    std::string key = parts[i].substr(0, eq);
    std::string var = key == "oneshot"  ? "RINGLAB_SHM_ONESHOT_BYTES"
                      : key == "chunk"  ? "RINGLAB_SHM_CHUNK_BYTES"
                      : key == "stream" ? "RINGLAB_SHM_STREAM_STORES"
                      : key == "check"  ? "RINGLAB_MPI_CHECK_CALLS"
                                        : "";
    if (var.empty() || eq == std::string::npos) {
      throw std::invalid_argument("unknown backend option '" + parts[i] +
                                  "' in " + spec);
    }
    setenv(var.c_str(), parts[i].substr(eq + 1).c_str(), 1);
    set.push_back(var);
  }
  std::unique_ptr<Communicator> c;
  try {
    c = comm::CreateCommunicator(parts.at(0), context, options);
  } catch (...) {
    for (const std::string& v : set) unsetenv(v.c_str());
    throw;
  }
  for (const std::string& v : set) unsetenv(v.c_str());
  return c;
}

void PrintTables(const std::vector<std::string>& labels, int world) {
  std::printf(
      "\n# nccl-tests style: allreduce, float, sum, %d ranks; time in "
      "us is the max over ranks, mean over iterations\n",
      world);
  std::vector<int64_t> sizes;
  for (const auto& [key, r] : Results()) {
    if (std::find(sizes.begin(), sizes.end(), key.second) == sizes.end()) {
      sizes.push_back(key.second);
    }
  }
  std::sort(sizes.begin(), sizes.end());
  for (const std::string& label : labels) {
    std::printf("\n# backend %s\n", label.c_str());
    std::printf("%12s %12s %6s %6s %12s %8s %8s %7s\n", "size(B)", "count",
                "type", "redop", "time(us)", "algbw", "busbw", "#wrong");
    for (int64_t bytes : sizes) {
      auto it = Results().find({label, bytes});
      if (it == Results().end()) continue;
      double algbw = bytes / it->second.seconds / 1e9;
      std::printf("%12lld %12lld %6s %6s %12.2f %8.3f %8.3f %7lld\n",
                  static_cast<long long>(bytes),
                  static_cast<long long>(bytes / 4), "float", "sum",
                  it->second.seconds * 1e6, algbw,
                  algbw * 2.0 * (world - 1) / world,
                  static_cast<long long>(it->second.wrong));
    }
  }
  // Each backend against the floor and against the first other backend.
  std::printf(
      "\n# time(us) per backend; xfloor = time / floor time; "
      "busbw ratio = first backend's busbw / that backend's\n");
  std::printf("%12s %10s", "size(B)", "floor");
  for (const std::string& l : labels) {
    std::printf(" %14s %7s", l.c_str(), "xfloor");
  }
  if (labels.size() > 1) std::printf(" %14s", "busbw ratio");
  std::printf("\n");
  for (int64_t bytes : sizes) {
    auto f = Results().find({"floor", bytes});
    double floor_s = f == Results().end() ? 0 : f->second.seconds;
    std::printf("%12lld %10.2f", static_cast<long long>(bytes), floor_s * 1e6);
    for (const std::string& l : labels) {
      auto it = Results().find({l, bytes});
      if (it == Results().end()) {
        std::printf(" %14s %7s", "-", "-");
      } else {
        std::printf(" %14.2f %7.2f", it->second.seconds * 1e6,
                    floor_s > 0 ? it->second.seconds / floor_s : 0.0);
      }
    }
    if (labels.size() > 1) {
      auto a = Results().find({labels[0], bytes});
      auto b = Results().find({labels[1], bytes});
      if (a != Results().end() && b != Results().end()) {
        std::printf(" %14.2f", b->second.seconds / a->second.seconds);
      }
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  std::vector<std::string> original(argv, argv + argc);
  DropFileOutputUnlessRankZero(&argc, argv);
  benchmark::Initialize(&argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  if (FLAGS_min_bytes < 4 || FLAGS_max_bytes < FLAGS_min_bytes) {
    // Sizes grow by 4x from min_bytes: 0 would never reach max_bytes.
    std::fprintf(stderr,
                 "error: need 4 <= --min_bytes <= --max_bytes, got %lld and "
                 "%lld\n",
                 static_cast<long long>(FLAGS_min_bytes),
                 static_cast<long long>(FLAGS_max_bytes));
    return 2;
  }
  if (!comm::Rendezvous::InLaunchedJob() && FLAGS_nprocs > 1) {
    return comm::LaunchRanks(FLAGS_nprocs, original);
  }
  comm::CommOptions options;
  options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(FLAGS_timeout_s * 1000));
  auto rv = comm::Rendezvous::FromEnv(options.timeout);
  const comm::RankContext& context = rv->context();
  options.local_rank = context.local_rank;
  const bool rank0 = context.rank == 0;
  if (FLAGS_pin) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
      std::vector<int> cpus;
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
      }
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[context.local_rank % cpus.size()], &one);
      sched_setaffinity(0, sizeof(one), &one);
    }
  }

  std::vector<std::string> specs = Split(FLAGS_backends, ',');
  if (specs.empty()) specs = comm::RegisteredCommunicators();
  std::vector<std::string> labels;
  std::vector<std::unique_ptr<Communicator>> comms;
  for (const std::string& spec : specs) {
    try {
      comms.push_back(CreateVariant(spec, context, options));
      labels.push_back(spec);
    } catch (const std::exception& e) {
      // Every rank fails alike here (no mpirun, no GPU, no store).
      if (rank0) {
        std::fprintf(stderr, "skipping backend %s: %s\n", spec.c_str(),
                     e.what());
      }
    }
  }
  if (comms.empty()) {
    std::fprintf(stderr, "error: no backend could start\n");
    return 2;
  }
  // Times are exchanged (and the floor synchronised) over a host backend.
  Communicator* timer = nullptr;
  for (auto& c : comms) {
    if (c->memory() == comm::MemoryKind::kHost && timer == nullptr) {
      timer = c.get();
    }
  }
  if (timer == nullptr) {
    std::fprintf(stderr, "error: no host-memory backend to exchange times\n");
    return 2;
  }
  if (rank0) {
    std::fprintf(stderr,
                 "allreduce_bench: %d ranks, backends:", context.world_size);
    for (const std::string& l : labels) std::fprintf(stderr, " %s", l.c_str());
    std::fprintf(stderr, "\n");
  }
  for (int64_t bytes = FLAGS_min_bytes; bytes <= FLAGS_max_bytes; bytes *= 4) {
    if (FLAGS_floor) {
      benchmark::RegisterBenchmark(
          ("floor/" + std::to_string(bytes)).c_str(),
          [timer, bytes](benchmark::State& s) { BM_Floor(s, timer, bytes); })
          ->UseManualTime()
          ->Iterations(IterationsFor(bytes))
          ->Unit(benchmark::kMicrosecond);
    }
    for (size_t i = 0; i < comms.size(); ++i) {
      benchmark::RegisterBenchmark(
          ("allreduce/" + labels[i] + "/" + std::to_string(bytes)).c_str(),
          [c = comms[i].get(), timer, l = labels[i],
           bytes](benchmark::State& s) { BM_AllReduce(s, c, timer, l, bytes); })
          ->UseManualTime()
          ->Iterations(IterationsFor(bytes))
          ->Unit(benchmark::kMicrosecond);
    }
  }
  if (rank0) {
    benchmark::RunSpecifiedBenchmarks();
    PrintTables(labels, context.world_size);
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace ringlab::bench

int main(int argc, char** argv) {
  try {
    return ringlab::bench::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
