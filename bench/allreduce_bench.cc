// Allreduce sweeps over every backend linked in and able to start, measured
// as nccl-tests measures: per message size, 5 warm-up ops, then a timed loop
// of back-to-back ops (time = loop time / iterations, the max over ranks),
// algbw = bytes / time, busbw = algbw * 2(N-1)/N in GB/s; beside it the
// per-op times of ops each started after a barrier (median and p90, max over
// ranks); and #wrong, counted on every rank after the timed loop, from
// exact-sum inputs reset for one checked op. Rows `allreduce/<backend>/<bytes>`
// work on the caller's private buffer, rows
// `allreduce_registered/<backend>/<bytes>` on memory from the backend's
// Communicator::Allocate (zero-copy where the backend registers it).
//
// The floor is what the memory system allows, measured in the same run with
// the kernels shm_ring moves data with (comm/shm_kernels.h), every rank at
// once: with registered buffers each rank must read S and write S bytes (its
// segment of every rank's buffer, summed into every rank's buffer); with a
// private buffer it must in addition bring its buffer into shared memory and
// the result back, another S read and S written. `xfloor` = time / floor.
//
// Without RANK in the environment the binary launches itself for --nprocs
// ranks (LaunchRanks). Rank 0 prints the Google Benchmark output and the
// tables; the other ranks run the same fixed sequence silently. MPI only
// starts under mpirun; to compare with MPI and Gloo in one run:
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 mpirun -np 2 -x MASTER_ADDR
//     -x MASTER_PORT bazel-bin/bench/allreduce_bench
//     --backends=shm_ring,gloo,mpi:check=0
// Backend variants for tuning: "shm_ring:oneshot=B:chunk=B:stage=B:ring=B";
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

#include "bench/gpu_threads_bench.h"
#include "comm/rank_threads.h"
#endif
#include "bench/rank_output.h"
#include "comm/communicator.h"
#include "comm/launch.h"
#include "comm/rendezvous.h"
#include "comm/shm_kernels.h"

DEFINE_int32(nprocs, 2, "ranks to launch when not already a rank");
DEFINE_string(backends, "",
              "comma-separated backends (default: every one registered); "
              "shm_ring:oneshot=B:chunk=B sets shm_ring's tuning");
DEFINE_int64(min_bytes, 4, "smallest message");
DEFINE_int64(max_bytes, 256 << 20, "largest message");
DEFINE_int32(step_factor, 4, "each size is the previous one times this");
DEFINE_int32(warmup_iters, 5, "untimed ops before each timed loop");
DEFINE_int64(max_iters, 1000, "most ops in one timed loop (small sizes)");
DEFINE_int32(samples, 20, "ops timed one by one after a barrier, per row");
DEFINE_string(registered_backends, "shm_ring",
              "backends that also get allreduce_registered rows, on memory "
              "from their Communicator::Allocate");
DEFINE_double(timeout_s, 120, "deadline of every wait between ranks");
DEFINE_bool(floor, true, "also measure the memory-bandwidth floor");
DEFINE_int32(threads, 0,
             "> 0: instead of processes, this many ranks as threads of this "
             "process on one GPU (ipc_ring_threads, against a device "
             "copy-and-add floor; builds with CUDA)");
DEFINE_bool(pin, true,
            "pin rank r to CPU r mod the CPUs allowed, so that ranks do not "
            "migrate between samples");

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

// Few iterations for big messages, many for small: each size costs about the
// same, and the count is fixed, so no rank can decide to run one more.
int64_t IterationsFor(int64_t bytes) {
  return std::clamp<int64_t>(
      (int64_t{256} << 20) / std::max<int64_t>(bytes, 1) / 4, 5,
      FLAGS_max_iters);
}

// Small integers as nccl-tests: every sum is exact, so a result is either
// exactly right or wrong.
float Input(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 61) - 30);
}

// Times of this op on every rank -> the slowest (untimed exchange).
double MaxOverRanks(Communicator& comm, double seconds) {
  std::vector<float> all(comm.world_size(), 0.0f);
  all[comm.rank()] = static_cast<float>(seconds);
  comm.AllReduce(all.data(), all.size(), ReduceOp::kSum);
  return *std::max_element(all.begin(), all.end());
}

void CudaCheck(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("CUDA: ") + what + " failed");
}

// The buffer a backend works on: host memory (its own, or memory the backend
// allocated), or device memory for the GPU backends (builds with CUDA).
class Buffer {
 public:
  Buffer(comm::MemoryKind kind, size_t count, float* allocated = nullptr)
      : kind_(kind), count_(count) {
    if (allocated != nullptr) {
      ptr_ = allocated;
      return;
    }
    if (kind_ == comm::MemoryKind::kHost) {
      host_.resize(count);
      ptr_ = host_.data();
      return;
    }
#ifdef RINGLAB_WITH_CUDA
    CudaCheck(
        cudaMalloc(reinterpret_cast<void**>(&ptr_),
                   std::max<size_t>(count, 1) * sizeof(float)) == cudaSuccess,
        "cudaMalloc");
    owned_device_ = true;
#else
    throw std::runtime_error("device buffers need a build with CUDA");
#endif
  }
  ~Buffer() {
#ifdef RINGLAB_WITH_CUDA
    if (owned_device_) cudaFree(ptr_);
#endif
  }
  float* data() { return ptr_; }
  void Upload(const std::vector<float>& v) {
    if (kind_ == comm::MemoryKind::kHost) {
      std::copy(v.begin(), v.end(), ptr_);
      return;
    }
#ifdef RINGLAB_WITH_CUDA
    CudaCheck(cudaMemcpy(ptr_, v.data(), count_ * sizeof(float),
                         cudaMemcpyHostToDevice) == cudaSuccess,
              "cudaMemcpy to the device");
#endif
  }
  void Download(std::vector<float>* v) {
    if (kind_ == comm::MemoryKind::kHost) {
      v->assign(ptr_, ptr_ + count_);
      return;
    }
#ifdef RINGLAB_WITH_CUDA
    CudaCheck(cudaMemcpy(v->data(), ptr_, count_ * sizeof(float),
                         cudaMemcpyDeviceToHost) == cudaSuccess,
              "cudaMemcpy from the device");
#endif
  }
  // The op is only done when the device is: part of its time.
  void Sync() {
#ifdef RINGLAB_WITH_CUDA
    if (kind_ == comm::MemoryKind::kDevice) {
      CudaCheck(cudaDeviceSynchronize() == cudaSuccess,
                "cudaDeviceSynchronize");
    }
#endif
  }

 private:
  comm::MemoryKind kind_;
  size_t count_;
  std::vector<float> host_;
  float* ptr_ = nullptr;
  bool owned_device_ = false;
};

// Wrong elements after one op on exact-sum inputs, summed over the ranks
// (through the host backend, in two parts that floats hold exactly).
int64_t CountWrong(Communicator* comm, Communicator* timer, Buffer& buffer,
                   size_t count) {
  const int rank = comm->rank(), world = comm->world_size();
  std::vector<float> host(count);
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

// comm runs the op; timer (a host-memory backend) exchanges the times.
// Timed ops reduce zeros: a sum that stays finite however many ops run back
// to back (the arithmetic costs the same for any finite value).
void BM_AllReduce(benchmark::State& state, Communicator* comm,
                  Communicator* timer, const std::string& row, int64_t bytes,
                  float* allocated) {
  const size_t count = static_cast<size_t>(bytes) / sizeof(float);
  const int world = comm->world_size();
  Buffer buffer(comm->memory(), count, allocated);
  buffer.Upload(std::vector<float>(count, 0.0f));
  auto op = [&] {
    comm->AllReduce(buffer.data(), count, ReduceOp::kSum);
    buffer.Sync();
  };
  for (int i = 0; i < FLAGS_warmup_iters; ++i) op();
  const int64_t iters = IterationsFor(bytes);
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
  std::vector<double> samples;
  for (int i = 0; i < FLAGS_samples; ++i) {
    comm->Barrier();
    const auto t0 = Clock::now();
    op();
    samples.push_back(MaxOverRanks(
        *timer, std::chrono::duration<double>(Clock::now() - t0).count()));
  }
  result.p50_s = Percentile(samples, 0.5);
  result.p90_s = Percentile(samples, 0.9);
  result.wrong = CountWrong(comm, timer, buffer, count);
  const double algbw = static_cast<double>(bytes) / result.loop_s / 1e9;
  state.counters["time_us"] = result.loop_s * 1e6;
  state.counters["p50_us"] = result.p50_s * 1e6;
  state.counters["p90_us"] = result.p90_s * 1e6;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * 2.0 * (world - 1) / world;
  state.counters["wrong"] = static_cast<double>(result.wrong);
  Results()[{row, bytes}] = result;
}

// The floor (see the top of this file), every rank at once: ReduceIntoAll
// over world_size buffers of this rank's (its segment: S read, S written),
// after, for a private buffer, one copy of S into them.
void BM_Floor(benchmark::State& state, Communicator* timer, int64_t bytes,
              bool registered) {
  const size_t count = static_cast<size_t>(bytes) / sizeof(float);
  const int world = timer->world_size(), rank = timer->rank();
  std::vector<std::vector<float>> buffers(world,
                                          std::vector<float>(count, 1.0f));
  std::vector<float> input(registered ? 0 : count, 1.0f);
  std::vector<float*> slots;
  for (auto& b : buffers) slots.push_back(b.data());
  const size_t seg = (count + world - 1) / world;
  const size_t a = std::min(count, rank * seg), b = std::min(count, a + seg);
  const int64_t iters = IterationsFor(bytes);
  auto moves = [&] {
    if (!registered) comm::shm::CopyFloats(slots[rank], input.data(), count);
    comm::shm::ReduceIntoAll(slots, a, b, 0.0f);
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
  Results()[{registered ? "floor_registered" : "floor_private", bytes}] =
      Result{per_op, per_op, per_op, 0};
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
                      : key == "stage"  ? "RINGLAB_SHM_STAGE_BYTES"
                      : key == "ring"   ? "RINGLAB_SHM_RING_BYTES"
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

void PrintTables(const std::vector<std::string>& rows, int world) {
  std::printf(
      "\n# nccl-tests style: allreduce, float, sum, %d ranks; time = timed "
      "loop / ops, p50 and p90 of ops after a barrier; all max over ranks\n",
      world);
  std::vector<int64_t> sizes;
  for (const auto& [key, r] : Results()) sizes.push_back(key.second);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  auto floor_of = [](const std::string& row, int64_t bytes) {
    const bool registered = row.rfind("allreduce_registered/", 0) == 0;
    auto f = Results().find(
        {registered ? "floor_registered" : "floor_private", bytes});
    return f == Results().end() ? 0.0 : f->second.loop_s;
  };
  for (const std::string& row : rows) {
    std::printf("\n# %s\n%12s %12s %10s %10s %10s %8s %8s %7s %7s\n",
                row.c_str(), "size(B)", "count", "time(us)", "p50(us)",
                "p90(us)", "algbw", "busbw", "#wrong", "xfloor");
    for (int64_t bytes : sizes) {
      auto it = Results().find({row, bytes});
      if (it == Results().end()) continue;
      const Result& r = it->second;
      const double algbw = bytes / r.loop_s / 1e9;
      const double floor_s = floor_of(row, bytes);
      std::printf(
          "%12lld %12lld %10.2f %10.2f %10.2f %8.3f %8.3f %7lld %7.2f\n",
          static_cast<long long>(bytes), static_cast<long long>(bytes / 4),
          r.loop_s * 1e6, r.p50_s * 1e6, r.p90_s * 1e6, algbw,
          algbw * 2.0 * (world - 1) / world, static_cast<long long>(r.wrong),
          floor_s > 0 ? r.loop_s / floor_s : 0.0);
    }
  }
  std::printf(
      "\n# floors (us): every rank at once; private = registered + "
      "one copy of the buffer\n%12s %14s %14s\n",
      "size(B)", "private", "registered");
  for (int64_t bytes : sizes) {
    auto p = Results().find({"floor_private", bytes});
    auto r = Results().find({"floor_registered", bytes});
    if (p == Results().end() || r == Results().end()) continue;
    std::printf("%12lld %14.2f %14.2f\n", static_cast<long long>(bytes),
                p->second.loop_s * 1e6, r->second.loop_s * 1e6);
  }
  std::fflush(stdout);
}

// Flags a sweep cannot run with: one `error:` line, exit status 2.
std::string BadFlags() {
  if (FLAGS_min_bytes < 4 || FLAGS_max_bytes < FLAGS_min_bytes ||
      FLAGS_max_bytes > (int64_t{16} << 30)) {
    return "need 4 <= --min_bytes <= --max_bytes <= 16 GiB";
  }
  if (FLAGS_step_factor < 2 || FLAGS_step_factor > 1024) {
    return "--step_factor must be in [2, 1024]";
  }
  if (FLAGS_warmup_iters < 0 || FLAGS_warmup_iters > 1000 ||
      FLAGS_max_iters < 5 || FLAGS_max_iters > 1000000 || FLAGS_samples < 1 ||
      FLAGS_samples > 100000) {
    return "need 0 <= --warmup_iters <= 1000, 5 <= --max_iters <= 1e6, "
           "1 <= --samples <= 1e5";
  }
  if (FLAGS_nprocs < 1 || FLAGS_nprocs > 1024 || !(FLAGS_timeout_s > 0) ||
      FLAGS_timeout_s > 86400) {
    return "need 1 <= --nprocs <= 1024 and 0 < --timeout_s <= 86400";
  }
  return "";
}

// Rank r on CPU r mod the CPUs allowed, so that ranks do not migrate.
void PinToCpu(int local_rank) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus[local_rank % cpus.size()], &one);
  sched_setaffinity(0, sizeof(one), &one);
}

struct Backend {
  std::string label;
  std::unique_ptr<Communicator> comm;
  float* allocated = nullptr;  // --max_bytes of Allocate'd memory, or null
};

std::vector<Backend> CreateBackends(const comm::RankContext& context,
                                    const comm::CommOptions& options) {
  std::vector<std::string> specs = Split(FLAGS_backends, ',');
  if (specs.empty()) specs = comm::RegisteredCommunicators();
  const std::vector<std::string> registered =
      Split(FLAGS_registered_backends, ',');
  std::vector<Backend> backends;
  for (const std::string& spec : specs) {
    try {
      Backend b{spec, CreateVariant(spec, context, options)};
      const std::string name = Split(spec, ':').at(0);
      if (std::find(registered.begin(), registered.end(), name) !=
          registered.end()) {
        b.allocated = b.comm->Allocate(static_cast<size_t>(FLAGS_max_bytes) /
                                       sizeof(float));
      }
      backends.push_back(std::move(b));
    } catch (const std::exception& e) {
      // Every rank fails alike here (no mpirun, no GPU, no store).
      if (context.rank == 0) {
        std::fprintf(stderr, "skipping backend %s: %s\n", spec.c_str(),
                     e.what());
      }
    }
  }
  return backends;
}

// The rows of the sweep, in the order they run; returns the row labels.
std::vector<std::string> RegisterRows(std::vector<Backend>& backends,
                                      Communicator* timer) {
  std::vector<std::string> rows;
  for (const Backend& b : backends) {
    rows.push_back("allreduce/" + b.label);
    if (b.allocated) rows.push_back("allreduce_registered/" + b.label);
  }
  for (int64_t bytes = FLAGS_min_bytes; bytes <= FLAGS_max_bytes;
       bytes *= FLAGS_step_factor) {
    auto add = [&](const std::string& name, auto fn) {
      benchmark::RegisterBenchmark((name + "/" + std::to_string(bytes)).c_str(),
                                   fn)
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kMicrosecond);
    };
    if (FLAGS_floor) {
      for (bool reg : {false, true}) {
        add(reg ? "floor_registered" : "floor_private",
            [=](benchmark::State& s) { BM_Floor(s, timer, bytes, reg); });
      }
    }
    for (Backend& b : backends) {
      Communicator* c = b.comm.get();
      const std::string row = "allreduce/" + b.label;
      add(row, [=](benchmark::State& s) {
        BM_AllReduce(s, c, timer, row, bytes, nullptr);
      });
      if (b.allocated == nullptr) continue;
      const std::string reg_row = "allreduce_registered/" + b.label;
      float* memory = b.allocated;
      add(reg_row, [=](benchmark::State& s) {
        BM_AllReduce(s, c, timer, reg_row, bytes, memory);
      });
    }
  }
  return rows;
}

// --threads: ipc_ring's kernels with the ranks as threads on one GPU, rows
// allreduce_threads/<variant>/<bytes> against a device floor measured in the
// same run (bench/gpu_threads_bench.h), and an nccl row saying why NCCL has
// none (it refuses two ranks on one GPU).
int RunThreads() {
#ifdef RINGLAB_WITH_CUDA
  ThreadsBenchOptions options;
  options.ranks = FLAGS_threads;
  const std::vector<std::string> variants = Split(FLAGS_backends, ',');
  if (!variants.empty()) options.variants = variants;
  options.min_bytes = FLAGS_min_bytes;
  options.max_bytes = FLAGS_max_bytes;
  options.max_iterations = FLAGS_max_iters;
  options.timeout_s = FLAGS_timeout_s;
  options.floor = FLAGS_floor;
  return RunThreadsBench(options);
#else
  std::fprintf(stderr, "error: --threads needs a build with CUDA\n");
  return 2;
#endif
}

int Main(int argc, char** argv) {
#ifdef RINGLAB_WITH_CUDA
  // Before anything starts CUDA: as many hardware queues as spinning ranks.
  comm::PrepareProcessForRankThreads();
#endif
  std::vector<std::string> original(argv, argv + argc);
  DropFileOutputUnlessRankZero(&argc, argv);
  benchmark::Initialize(&argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  if (const std::string bad = BadFlags(); !bad.empty()) {
    std::fprintf(stderr, "error: %s\n", bad.c_str());
    return 2;
  }
  if (FLAGS_threads < 0 || FLAGS_threads > 64) {
    std::fprintf(stderr, "error: --threads must be in [0, 64]\n");
    return 2;
  }
  if (FLAGS_threads > 0) return RunThreads();
  if (!comm::Rendezvous::InLaunchedJob() && FLAGS_nprocs > 1) {
    return comm::LaunchRanks(FLAGS_nprocs, original);
  }
  comm::CommOptions options;
  options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(FLAGS_timeout_s * 1000));
  options.join_timeout = options.timeout;
  auto rv = comm::Rendezvous::FromEnv(options.timeout);
  const comm::RankContext& context = rv->context();
  options.local_rank = context.local_rank;
  if (FLAGS_pin) PinToCpu(context.local_rank);
  std::vector<Backend> backends = CreateBackends(context, options);
  // Times are exchanged (and the floor synchronised) over a host backend.
  Communicator* timer = nullptr;
  for (const Backend& b : backends) {
    if (b.comm->memory() == comm::MemoryKind::kHost && timer == nullptr) {
      timer = b.comm.get();
    }
  }
  if (timer == nullptr) {
    std::fprintf(stderr, "error: no host-memory backend could start\n");
    return 2;
  }
  const std::vector<std::string> rows = RegisterRows(backends, timer);
  if (context.rank == 0) {
    std::fprintf(stderr,
                 "allreduce_bench: %d ranks, rows:", context.world_size);
    for (const std::string& r : rows) std::fprintf(stderr, " %s", r.c_str());
    std::fprintf(stderr, "\n");
    benchmark::RunSpecifiedBenchmarks();
    PrintTables(rows, context.world_size);
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
