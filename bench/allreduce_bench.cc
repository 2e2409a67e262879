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
// the kernels shm_ring moves data with (comm/shm_ring/kernels.h), every rank at
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
// "mpi:check=0" is plain MPI_Allreduce, without the front's cross-rank call
// check (one extra small allreduce per call): the anchor of the comparison.
// `--help` lists the backends and every option they take.
#include <gflags/gflags.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/allreduce_rows.h"
#include "bench/backend_variants.h"
#include "bench/benchmark_flags.h"
#include "benchmark/benchmark.h"
#include "cli/usage_error.h"
#ifdef RINGLAB_WITH_CUDA
#include "bench/gpu_threads_bench.h"
#include "comm/job/rank_threads.h"
#endif
#include "comm/backend.h"
#include "comm/cluster/cluster_flags.h"
#include "comm/cluster/job_cluster.h"
#include "comm/cluster/link_probe.h"
#include "comm/communicator.h"
#include "comm/job/launch.h"
#include "comm/job/mpirun_on_hosts.h"
#include "comm/job/rendezvous.h"
#include "comm/tuning.h"
#include "comm/tuning_env.h"

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
DEFINE_bool(registered, true,
            "backends that register memory (their description says so) also "
            "get allreduce_registered rows, on memory from their "
            "Communicator::Allocate");
DEFINE_double(timeout_s, 120, "deadline of every wait between ranks");
DEFINE_bool(floor, true, "also measure the memory-bandwidth floor");
DEFINE_string(dtype, "float32",
              "element types reduced, comma-separated: float32, float16, "
              "bfloat16 (a sweep and its tables per type, in one run; "
              "backends without a type are skipped for it, saying so)");
DEFINE_int32(threads, 0,
             "> 0: instead of processes, this many ranks as threads of this "
             "process on one GPU (ipc_ring_threads, against a device "
             "copy-and-add floor; builds with CUDA)");
DEFINE_double(link_tcp_bits, 0,
              "set by the launcher with --hosts: the TCP throughput it "
              "measured between two hosts, in bits per second (the floor)");
DEFINE_bool(pin, true,
            "pin rank r to CPU r mod the CPUs allowed, so that ranks do not "
            "migrate between samples (on one host only: not with --hosts)");

namespace ringlab::bench {
namespace {

using comm::Communicator;

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// --dtype's types, in order; empty when a name is not a type.
std::vector<comm::DataType> TypesFromFlags() {
  std::vector<comm::DataType> types;
  for (const std::string& name : SplitList(FLAGS_dtype, ',')) {
    comm::DataType t;
    if (!comm::DataTypeNamed(name.c_str(), &t)) return {};
    types.push_back(t);
  }
  return types;
}

RowOptions OptionsFromFlags() {
  RowOptions o;
  o.warmup_iters = FLAGS_warmup_iters;
  o.max_iters = FLAGS_max_iters;
  o.samples = FLAGS_samples;
  return o;
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
  if (FLAGS_threads < 0 || FLAGS_threads > 64) {
    return "--threads must be in [0, 64]";
  }
  const std::vector<comm::DataType> types = TypesFromFlags();
  if (types.empty()) {
    return "--dtype takes float32, float16 and bfloat16, not " + FLAGS_dtype;
  }
  if (FLAGS_threads > 0 &&
      (types.size() > 1 || types[0] != comm::DataType::kFloat32)) {
    return "--threads measures float32 only";
  }
  return "";
}

// --backends against the backends linked in, before any rank or host
// starts: an unknown name, one that cannot span the emulated hosts asked
// for, or a list without a host-memory backend (the sweep times its rows over
// one) is bad input. None named: every backend, each skipped where it cannot
// start. (--threads names ipc_ring's variants, checked by its bench.)
std::string BadBackends() {
  if (FLAGS_threads > 0) return "";
  const std::vector<std::string> specs = SplitList(FLAGS_backends, ',');
  if (specs.empty()) return "";
  bool host_memory = false;
  for (const std::string& spec : specs) {
    const std::vector<std::string> parts = SplitList(spec, ':');
    const std::string name = parts.empty() ? "" : parts.front();
    const comm::BackendDescription* backend = comm::FindBackend(name);
    if (backend == nullptr) {
      std::string linked;
      for (const std::string& n : comm::RegisteredBackendNames()) {
        linked += (linked.empty() ? "" : ", ") + n;
      }
      return "--backends: unknown backend '" + name +
             "' (linked into this binary: " + linked + ")";
    }
    if (FLAGS_hosts > 1 && !backend->spans_hosts) {
      return "--backends: " + name + " cannot span emulated hosts (--hosts=" +
             std::to_string(FLAGS_hosts) +
             "): its ranks must share one host's memory";
    }
    host_memory = host_memory || backend->memory == comm::MemoryKind::kHost;
  }
  if (!host_memory) {
    return "--backends=" + FLAGS_backends +
           " names no host-memory backend, which the sweep times its rows "
           "over (add shm_ring or gloo)";
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
  std::vector<std::string> specs = SplitList(FLAGS_backends, ',');
  if (specs.empty()) specs = comm::RegisteredBackendNames();
  std::vector<Backend> backends;
  for (const std::string& spec : specs) {
    try {
      Backend b{spec, CreateVariant(spec, context, options)};
      if (FLAGS_registered && b.comm->description().registers_memory) {
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

// The rows of the sweep of options.dtype, in the order they run (of the
// backends that have the type); returns the row labels (with the type's
// RowSuffix).
std::vector<std::string> RegisterRows(std::vector<Backend>& all,
                                      Communicator* timer,
                                      const RowOptions& options) {
  const std::string suffix = RowSuffix(options.dtype);
  std::vector<Backend*> backends;
  for (Backend& b : all) {
    if (b.comm->description().Supports(options.dtype)) {
      backends.push_back(&b);
    } else if (timer->rank() == 0) {
      std::fprintf(stderr, "skipping backend %s for %s: it has no %s\n",
                   b.label.c_str(), comm::DataTypeName(options.dtype),
                   comm::DataTypeName(options.dtype));
    }
  }
  std::vector<std::string> rows;
  for (const Backend* b : backends) {
    rows.push_back("allreduce/" + b->label + suffix);
    if (b->allocated) {
      rows.push_back("allreduce_registered/" + b->label + suffix);
    }
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
    // Across hosts the floor is the link's (LinkFloor), not the memory's.
    if (FLAGS_floor && FLAGS_hosts == 1) {
      for (bool reg : {false, true}) {
        add((reg ? "floor_registered" : "floor_private") + suffix,
            [=](benchmark::State& s) {
              FloorRow(s, timer, bytes, reg, options);
            });
      }
    }
    for (Backend* b : backends) {
      Communicator* c = b->comm.get();
      const std::string row = "allreduce/" + b->label + suffix;
      add(row, [=](benchmark::State& s) {
        AllReduceRow(s, c, timer, row, bytes, nullptr, options);
      });
      if (b->allocated == nullptr) continue;
      const std::string reg_row = "allreduce_registered/" + b->label + suffix;
      float* memory = b->allocated;
      add(reg_row, [=](benchmark::State& s) {
        AllReduceRow(s, c, timer, reg_row, bytes, memory, options);
      });
    }
  }
  return rows;
}

// --threads: ipc_ring's kernels with the ranks as threads on one GPU, rows
// allreduce_threads/<variant>/<bytes> against a device floor measured in the
// same run (bench/gpu_threads_bench.h), and an nccl row saying why NCCL has
// none (it refuses two ranks on one GPU).
int RunThreads(const comm::BackendTuning& tuning) {
#ifdef RINGLAB_WITH_CUDA
  ThreadsBenchOptions options;
  options.tuning = tuning;
  options.ranks = FLAGS_threads;
  const std::vector<std::string> variants = SplitList(FLAGS_backends, ',');
  if (!variants.empty()) options.variants = variants;
  options.min_bytes = FLAGS_min_bytes;
  options.max_bytes = FLAGS_max_bytes;
  options.max_iterations = FLAGS_max_iters;
  options.timeout_s = FLAGS_timeout_s;
  options.floor = FLAGS_floor;
  return RunThreadsBench(options);
#else
  (void)tuning;
  cli::ExitWithUsageError("--threads needs a build with CUDA");
#endif
}

// This rank's sweep: every backend that starts, the rows, rank 0's report.
// tuning: the RINGLAB_* variables' (each backend spec's options over it).
int RunRank(const comm::BackendTuning& tuning) {
  comm::CommOptions options;
  options.tuning = tuning;
  options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(FLAGS_timeout_s * 1000));
  options.join_timeout = options.timeout;
  auto rv = comm::Rendezvous::FromEnv(options.timeout);
  const comm::RankContext& context = rv->context();
  // Not on emulated hosts: there the kernel's network processing needs the
  // cores too (pinned, a 64-byte gloo allreduce between 2 hosts took 8 ms a
  // call, unpinned 0.85 ms).
  if (FLAGS_pin && FLAGS_hosts == 1) PinToCpu(context.local_rank);
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
  // Every type's rows, in --dtype's order, in one sweep.
  std::vector<std::pair<comm::DataType, std::vector<std::string>>> rows;
  for (comm::DataType type : TypesFromFlags()) {
    RowOptions row_options = OptionsFromFlags();
    row_options.dtype = type;
    rows.emplace_back(type, RegisterRows(backends, timer, row_options));
  }
  if (context.rank == 0) {
    std::fprintf(stderr,
                 "allreduce_bench: %d ranks, rows:", context.world_size);
    for (const auto& [type, labels] : rows) {
      for (const std::string& r : labels)
        std::fprintf(stderr, " %s", r.c_str());
    }
    std::fprintf(stderr, "\n");
    benchmark::RunSpecifiedBenchmarks();
    LinkFloor link;
    link.rate_bits = static_cast<double>(
        comm::cluster::ParseLink(FLAGS_link, FLAGS_link_latency)
            .bits_per_second);
    link.tcp_bits = FLAGS_link_tcp_bits;
    for (const auto& [type, labels] : rows) {
      PrintTables(labels, context.world_size, type,
                  FLAGS_hosts > 1 && link.tcp_bits > 0 ? &link : nullptr);
    }
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}

// Whether a backend of --backends takes its ranks from mpirun (mpi).
bool WantsMpirun() {
  std::vector<std::string> specs = SplitList(FLAGS_backends, ',');
  // None named: every backend, as CreateBackends takes it.
  if (specs.empty()) specs = comm::RegisteredBackendNames();
  for (const std::string& spec : specs) {
    const comm::BackendDescription* description =
        comm::FindBackend(SplitList(spec, ':').front());
    if (description != nullptr &&
        description->launch == comm::RankLaunch::kMpirun) {
      return true;
    }
  }
  return false;
}

// The ranks, on emulated hosts with --hosts (under mpirun when a backend
// needs it): then the link's floor is
// measured first (one TCP stream from host 0 to host 1 for a second) and
// handed to the ranks.
int Launch(std::vector<std::string> argv) {
  std::unique_ptr<comm::cluster::EmulatedCluster> cluster;
  try {
    cluster = comm::cluster::CreateJobCluster(
        FLAGS_nprocs, comm::cluster::ClusterRequestFromFlags());
  } catch (const std::invalid_argument& e) {
    cli::ExitWithUsageError(e.what());
  }
  comm::LaunchOptions options;
  if (cluster != nullptr) {
    const double bits = comm::cluster::MeasureTcpThroughput(
        *cluster, 0, 1, std::chrono::seconds(1));
    std::fprintf(stderr,
                 "allreduce_bench: %d ranks on %d emulated hosts, links %s; "
                 "one TCP stream between two hosts: %.3f Gbit/s\n",
                 FLAGS_nprocs, cluster->hosts(), cluster->link().Text().c_str(),
                 bits / 1e9);
    argv.push_back("--link_tcp_bits=" + std::to_string(bits));
    options.cluster = cluster.get();
    // mpi's ranks must be mpirun's; the other backends' ranks join its too.
    if (WantsMpirun()) {
      return comm::LaunchMpirunOnHosts(FLAGS_nprocs, argv, *cluster);
    }
  }
  return comm::LaunchRanks(FLAGS_nprocs, argv, options);
}

int Main(int argc, char** argv) {
#ifdef RINGLAB_WITH_CUDA
  // Before anything starts CUDA: as many hardware queues as spinning ranks.
  comm::PrepareProcessForRankThreads();
#endif
  const std::vector<std::string> original(argv, argv + argc);
  ParseBenchmarkFlagsOrExit(
      argc, argv,
      "allreduce sweeps over every backend linked in, measured as nccl-tests "
      "does (bench/allreduce_bench.cc says how)");
  for (const std::string& bad : {BadFlags(), BadBackends()}) {
    if (!bad.empty()) cli::ExitWithUsageError(bad);
  }
  comm::BackendTuning tuning;
  try {
    tuning = comm::TuningFromEnvironment();  // RINGLAB_* variables
    // A spec that cannot apply is bad input, not a backend to skip.
    if (FLAGS_threads == 0) {
      for (const std::string& spec : SplitList(FLAGS_backends, ',')) {
        VariantTuning(spec, tuning);
      }
    }
  } catch (const std::invalid_argument& e) {
    cli::ExitWithUsageError(e.what());
  }
  if (FLAGS_threads > 0) return RunThreads(tuning);
  if (!comm::InLaunchedJob() && FLAGS_nprocs > 1) return Launch(original);
  return RunRank(tuning);
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
