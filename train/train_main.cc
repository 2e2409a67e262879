// ringlab's trainer CLI. Its defaults are the seed example's PyTorch DDP run's
// configuration (Net 10,5,2, SGD 0.01, 10 epochs, 100 samples, batch 64, 2
// ranks, DistributedSampler defaults without set_epoch); its synthetic data
// are not PyTorch's randn, so to reproduce PyTorch's numbers give its exported
// data and parameters (--data_dir, --init_dir; see //experiments:seed_ddp):
//   bazel run //train:train -- --out_dir=/tmp/run
// With --nprocs=N (default 2) it starts N ranks on this machine, as
// torch.multiprocessing.spawn does; under torchrun-style variables (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and RINGLAB_JOB_SECRET beyond
// loopback) it is one of them; under mpirun with --comm=mpi it takes MPI's
// ranks. With --comm=ipc_ring_threads the N ranks are threads of this one
// process on one GPU, each with its own stream
// (comm/ipc_ring/ipc_ring_threads.h): what a one-GPU machine can train with a
// multi-rank allreduce whose kernels run side by side.
#include <arpa/inet.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "comm/backend.h"
#include "comm/cluster/cluster_flags.h"
#include "comm/cluster/job_cluster.h"
#include "comm/communicator.h"
#include "comm/job/launch.h"
#include "comm/job/mpirun_on_hosts.h"
#include "comm/job/rank_threads.h"
#include "comm/job/rendezvous.h"
#include "comm/tuning_env.h"
#include "io/dir_lock.h"
#include "io/dirs.h"
#include "nn/cpu_mlp.h"
#include "nn/mlp.h"
#include "sync/synchronizer.h"
#include "train/rank_device.h"
#include "train/sync_flags.h"
#include "train/trainer.h"

DEFINE_int32(nprocs, 2,
             "ranks to start on this machine (ignored under torchrun variables "
             "or mpirun)");
DEFINE_string(model, "10,5,2", "MLP widths: input, hidden..., classes");
DEFINE_string(sync, "allreduce",
              "the synchroniser: one of those listed above (--list_syncs "
              "describes them and their options)");
DEFINE_string(list_syncs, "",
              "print the synchronisers and their options (text, or json) "
              "and exit");
DEFINE_string(comm, "shm_ring",
              "the collective backend: one of those this binary has (listed "
              "above, with their settings)");
DEFINE_string(intra, "shm_ring",
              "with --comm=hier: the backend among the ranks of one host");
DEFINE_string(inter, "gloo",
              "with --comm=hier: the backend between hosts (gloo, mpi)");
DEFINE_string(device, "cpu",
              "cpu | cuda (each rank: LOCAL_RANK modulo the GPUs) | cuda:N");
DEFINE_int64(epochs, 10, "passes over each rank's share of the data");
DEFINE_double(lr, 0.01, "SGD learning rate");
DEFINE_double(momentum, 0.0,
              "SGD momentum (torch.optim.SGD's; 0: plain SGD, as DDP's "
              "examples)");
DEFINE_int32(straggler_rank, -1,
             "a rank that computes --straggler_factor times as long (as "
             "--straggler_limit says); -1: none");
DEFINE_double(straggler_factor, 1.5,
              "how much slower --straggler_rank computes, in [1, 100]");
DEFINE_string(straggler_limit, "sleep",
              "how --straggler_rank is slowed: sleep (it waits after its "
              "forward and backward) or cpu_quota (a cgroup allows its "
              "process 1/--straggler_factor of a CPU; needs root)");
DEFINE_bool(nesterov, false, "SGD with Nesterov momentum (needs --momentum)");
DEFINE_double(weight_decay, 0.0,
              "SGD weight decay (L2, added to the gradient)");
DEFINE_int64(batch_size, 64,
             "samples per batch per rank (DataLoader batch_size)");
DEFINE_int64(
    samples, 100,
    "synthetic data set size (without --data_dir): torch.rand features, "
    "torch.randint labels, drawn after the parameters");
DEFINE_uint64(seed, 0,
              "seed of the parameters and synthetic data (torch.manual_seed)");
DEFINE_uint64(sampler_seed, 0, "DistributedSampler's own seed");
DEFINE_bool(shuffle, true, "DistributedSampler shuffle");
DEFINE_bool(drop_last, false, "DistributedSampler drop_last");
DEFINE_bool(set_epoch, false,
            "call sampler.set_epoch(epoch) (the seed example does not)");
DEFINE_bool(per_rank_data, false,
            "synthetic data drawn per rank with seed + rank (the seed "
            "example's quirk)");
DEFINE_string(dataset, "",
              "synthetic | npy (--data_dir's .npy files) | fashion_mnist (IDX "
              "files, default dir /usr/share/datasets/fashion-mnist); "
              "default: npy with --data_dir, else synthetic");
DEFINE_string(
    data_dir, "",
    "npy: data.npy + targets.npy, or data_rank{r}.npy + targets_rank{r}.npy; "
    "fashion_mnist: the directory of its train-* and t10k-* IDX files");
DEFINE_int64(eval_every, 1,
             "epochs between test-set evaluations into eval.csv (0: none; "
             "data sets with a test split)");
DEFINE_string(trace, "",
              "write a Chrome trace of every rank here (open in Perfetto or "
              "chrome://tracing)");
DEFINE_string(init_dir, "",
              "initial parameters, <state_dict name>.npy per tensor");
DEFINE_string(
    out_dir, "",
    "where to write losses.csv, final/*.npy, config.json, checkpoints/");
DEFINE_int64(train_subset, 0,
             "fashion_mnist: train on the first N training images only (0: "
             "all), as pytorch_ddp.py --train_subset");
DEFINE_int64(checkpoint_every, 0,
             "write a checkpoint every N steps (0: never)");
DEFINE_bool(resume, false, "resume from the latest checkpoint in --out_dir");
DEFINE_double(timeout, 60, "seconds any wait between ranks may take");
DEFINE_bool(quiet, false, "no progress lines");
DEFINE_int64(
    fault_after_step, -1,
    "testing: rank --fault_rank kills itself (SIGKILL) after this step");
DEFINE_int32(fault_rank, 0, "testing: the rank --fault_after_step kills");
DEFINE_string(fault_point, "after_step",
              "testing: where in the step it dies: after_step | part_written "
              "| part_renamed | before_latest | before_prune | "
              "before_promote (checkpoint "
              "stages)");
DEFINE_string(store_bind, "",
              "torchrun-style rank 0: where its store listens (an IPv4 "
              "address of this host, or 0.0.0.0 for every interface); "
              "default MASTER_ADDR's address");

namespace ringlab::train {
namespace {

namespace fs = std::filesystem;

// The backend --comm names, or nullptr when this binary has none of that
// name (ConfigFromFlags refuses it).
const comm::BackendDescription* Backend(const std::string& name) {
  return comm::FindBackend(name);
}

bool RanksAreThreads(const std::string& name) {
  const comm::BackendDescription* backend = Backend(name);
  return backend != nullptr && backend->launch == comm::RankLaunch::kThreads;
}

// --device=cpu | cuda | cuda:N.
void ParseDevice(const std::string& text, TrainConfig* c) {
  const std::string prefix = "cuda:";
  if (text == "cpu") {
    c->device = nn::Device::kCpu;
  } else if (text == "cuda") {
    c->device = nn::Device::kCuda;
  } else if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() &&
             text.size() <= prefix.size() + 4 &&
             text.find_first_not_of("0123456789", prefix.size()) ==
                 std::string::npos) {
    c->device = nn::Device::kCuda;
    c->cuda_device = std::stoi(text.substr(prefix.size()));
  } else {
    throw std::invalid_argument("unknown --device=" + text +
                                " (expected cpu, cuda or cuda:N)");
  }
}

// The testing flags' fault, kept out of the job's configuration.
FaultInjection Faults() {
  FaultInjection faults;
  faults.after_step = FLAGS_fault_after_step;
  faults.rank = FLAGS_fault_rank;
  faults.point = FLAGS_fault_point;
  return faults;
}

// --post_local_subgroup=host: what makes a communicator among the ranks of
// this rank's host (null otherwise), over the fastest backend there:
// shm_ring for host memory, the job's own where it reduces GPU memory. The
// context and options are copied: the factory runs later, in RunRank.
HostCommFactory HostGroup(const TrainConfig& config,
                          const comm::RankContext& context,
                          const comm::CommOptions& options,
                          const comm::Communicator& job) {
  const sync::SyncDescription& described = sync::FindSync(config.sync);
  if (!described.needs_host_comm ||
      !described.needs_host_comm(config.sync_options)) {
    return nullptr;
  }
  const std::string name = job.memory() == comm::MemoryKind::kDevice
                               ? config.comm
                               : options.intra_host;
  return [name, context, options] {
    return comm::CreateGroupCommunicator(
        name, context, comm::RanksOnHostOf(context.peers, context.rank),
        options);
  };
}

// --intra and --inter choose hier's parts and nothing else: given with
// another backend they are refused rather than ignored.
void CheckHierParts(const std::string& comm_name) {
  const bool chosen = FLAGS_intra != "shm_ring" || FLAGS_inter != "gloo";
  if (comm_name != "hier") {
    if (chosen) {
      throw std::invalid_argument(
          "--intra and --inter choose the parts of --comm=hier");
    }
    return;
  }
  for (const std::string& part : {FLAGS_intra, FLAGS_inter}) {
    const comm::BackendDescription& d = comm::BackendNamed(part);
    if (d.memory != comm::MemoryKind::kHost || d.name == "hier" ||
        d.launch != comm::RankLaunch::kProcesses) {
      throw std::invalid_argument(
          "--intra/--inter=" + part +
          ": hier's parts must be host-memory backends whose ranks are this "
          "launcher's processes (shm_ring, gloo)");
    }
  }
  if (!comm::BackendNamed(FLAGS_inter).spans_hosts) {
    throw std::invalid_argument("--inter=" + FLAGS_inter +
                                " cannot span hosts; choose gloo");
  }
}

TrainConfig ConfigFromFlags() {
  TrainConfig c;
  c.model = FLAGS_model;
  c.sync_options = SyncOptionsFromFlags(FLAGS_sync);
  c.sync = FLAGS_sync;
  c.comm = FLAGS_comm;
  ParseDevice(FLAGS_device, &c);
  c.epochs = FLAGS_epochs;
  c.straggler_rank = FLAGS_straggler_rank;
  c.straggler_factor = FLAGS_straggler_factor;
  c.straggler_limit = ParseStragglerLimit(FLAGS_straggler_limit);
  c.sgd.lr = static_cast<float>(FLAGS_lr);
  c.sgd.momentum = static_cast<float>(FLAGS_momentum);
  c.sgd.nesterov = FLAGS_nesterov;
  c.sgd.weight_decay = static_cast<float>(FLAGS_weight_decay);
  c.batch_size = FLAGS_batch_size;
  c.samples = FLAGS_samples;
  c.seed = FLAGS_seed;
  c.sampler_seed = FLAGS_sampler_seed;
  c.shuffle = FLAGS_shuffle;
  c.drop_last = FLAGS_drop_last;
  c.set_epoch = FLAGS_set_epoch;
  c.per_rank_data = FLAGS_per_rank_data;
  c.dataset = FLAGS_dataset;
  c.data_dir = FLAGS_data_dir;
  c.eval_every = FLAGS_eval_every;
  c.trace_path = FLAGS_trace;
  c.init_dir = FLAGS_init_dir;
  c.out_dir = FLAGS_out_dir;
  c.train_subset = FLAGS_train_subset;
  c.checkpoint_every = FLAGS_checkpoint_every;
  c.resume = FLAGS_resume;
  c.quiet = FLAGS_quiet;
  in_addr address{};
  if (!FLAGS_store_bind.empty() &&
      inet_pton(AF_INET, FLAGS_store_bind.c_str(), &address) != 1) {
    throw std::invalid_argument("--store_bind=" + FLAGS_store_bind +
                                " is not an IPv4 address (e.g. 0.0.0.0)");
  }
  if (!(FLAGS_timeout > 0) || FLAGS_timeout > 86400) {
    throw std::invalid_argument("--timeout must be in (0, 86400] seconds");
  }
  c.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(FLAGS_timeout * 1000.0 + 0.5));
  if (FLAGS_nprocs < 1 || FLAGS_nprocs > 256) {
    throw std::invalid_argument("--nprocs must be in [1, 256]");
  }
  comm::BackendNamed(c.comm);  // "unknown communicator 'x' (... has: ...)"
  CheckHierParts(c.comm);
  if (RanksAreThreads(c.comm)) {
    if (FLAGS_fault_after_step >= 0) {
      throw std::invalid_argument(
          "--fault_after_step kills a process, and with --comm=" + c.comm +
          " every rank is a thread of this one");
    }
    if (comm::InLaunchedJob()) {
      throw std::invalid_argument(
          "--comm=" + c.comm +
          " runs all --nprocs ranks as threads of one process: start it once, "
          "without RANK/WORLD_SIZE, mpirun or srun");
    }
  }
  return c;
}

// The job's --out_dir, locked for as long as the job runs: a second job
// given it is refused here, before it touches anything (its first run's
// checkpoints included). Nothing to lock without an --out_dir. The
// directories it had to make are removed again, while empty, unless Keep()
// said the job was accepted: bad input leaves nothing behind.
class OutDirHold {
 public:
  explicit OutDirHold(const TrainConfig& config) {
    if (config.out_dir.empty()) return;
    for (fs::path p = fs::absolute(config.out_dir); !p.empty();
         p = p.parent_path()) {
      std::error_code error;
      if (fs::exists(p, error) || p == p.parent_path()) break;
      made_.push_back(p);
    }
    io::MakeDirs(config.out_dir);
    try {
      lock_.emplace(config.out_dir);
    } catch (const io::DirectoryInUse& e) {
      throw std::invalid_argument("--out_dir " + std::string(e.what()) +
                                  "; wait for it to end or choose another "
                                  "--out_dir");
    }
  }
  ~OutDirHold() {
    lock_.reset();  // its file goes with it
    if (kept_) return;
    for (const fs::path& dir : made_) {
      std::error_code error;
      fs::remove(dir, error);  // only while empty
    }
  }
  OutDirHold(const OutDirHold&) = delete;
  OutDirHold& operator=(const OutDirHold&) = delete;

  void Keep() { kept_ = true; }

 private:
  std::optional<io::DirectoryLock> lock_;
  std::vector<fs::path> made_;  // deepest first
  bool kept_ = false;
};

int RunThisRank(const TrainConfig& config) {
  // One BLAS thread per rank under any launcher (ours, mpirun, torchrun-style)
  // unless the user says otherwise: under mpirun a rank used to start a BLAS
  // thread per core and compute other bits than under ours (nn/cpu_mlp.h).
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) nn::SetBlasThreads(1);
  comm::CommOptions options;
  options.timeout = config.timeout;
  options.join_timeout = config.timeout;
  options.tuning = comm::TuningFromEnvironment();  // RINGLAB_* variables
  options.intra_host = FLAGS_intra;
  options.inter_host = FLAGS_inter;
  comm::JobEnvironment job = comm::JobEnvironment::Read();
  if (!FLAGS_store_bind.empty()) job.store_bind = FLAGS_store_bind;

  // Under our launcher, the launcher holds the lock; under another, rank 0.
  std::optional<OutDirHold> hold;
  if (job.rank == 0 && !job.store_hosted) hold.emplace(config);
  const auto rendezvous = comm::Rendezvous::Join(job, config.timeout);
  const comm::RankContext& context = rendezvous->context();
  // Under a foreign launcher (torchrun-style, mpirun) nothing was checked
  // yet; under ours this repeats the launcher's checks of the settings. The
  // rank checks its inputs as it reads them, once (RunRank); a different
  // data-set size on another rank is caught by the agreement check.
  ValidateConfig(config, context.world_size, ValidationScope::kRank);
  ValidateFaultInjection(Faults(), context.world_size);
  if (hold) hold->Keep();
  size_t hosts = 0;
  const std::string where = comm::DescribeHosts(context.peers, &hosts);
  if (hosts > 1 && context.rank == 0 && !config.quiet) {
    std::printf("ringlab train: %d ranks on %zu hosts (%s)\n",
                context.world_size, hosts, where.c_str());
    std::fflush(stdout);
  }
  // This rank's GPU, before its communicator and model exist, for both.
  if (config.device == nn::Device::kCuda) {
    options.cuda_device =
        SelectRankDevice(config.cuda_device, context.local_rank);
  }
  auto communicator = comm::CreateCommunicator(config.comm, context, options);
  const HostCommFactory host_comm =
      HostGroup(config, context, options, *communicator);
  TrainConfig placed = config;
  placed.emulated_host = job.emulated_host;
  RunRank(placed, *communicator, Faults(), host_comm);
  return 0;
}

// A backend whose ranks are threads (ipc_ring_threads): the ranks as
// threads of this process, sharing an in-process store. Once a rank fails, the
// others fail by their own deadlines; one that has not within twice the timeout
// is reported stuck and the process ends without waiting for it.
int RunRanksAsThreads(const TrainConfig& config, int nprocs) {
  OutDirHold hold(config);
  ValidateConfig(config, nprocs);  // before any rank starts
  // The ranks are threads of this process: it may create the context they
  // share, and refuse before any starts when there is no device.
  try {
    nn::CreateMlp(config.device, nn::MlpLayout::Parse(config.model));
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  hold.Keep();
  comm::CommOptions options;
  options.timeout = config.timeout;
  options.join_timeout = config.timeout;
  options.tuning = comm::TuningFromEnvironment();  // RINGLAB_* variables
  const comm::RankThreadsResult result = comm::RunRankThreads(
      nprocs,
      [&](const comm::RankContext& context) {
        comm::CommOptions mine = options;
        // Every rank thread on the one device, current on its own thread.
        mine.cuda_device = SelectRankDevice(std::max(config.cuda_device, 0), 0);
        auto communicator =
            comm::CreateCommunicator(config.comm, context, mine);
        RunRank(config, *communicator, {},
                HostGroup(config, context, mine, *communicator));
      },
      2 * config.timeout + std::chrono::seconds(10));
  if (result.ok()) return 0;
  std::istringstream lines(result.Describe());
  for (std::string line; std::getline(lines, line);) {
    std::fprintf(stderr, "error: %s\n", line.c_str());
  }
  if (!result.stuck.empty()) {
    std::fflush(nullptr);
    std::_Exit(1);  // stuck rank threads still use what they were given
  }
  return 1;
}

// Emulated hosts are this launcher's: for ranks it does not start, --hosts
// and --link cannot take effect, and are refused rather than ignored.
void RefuseEmulatedHosts(const std::string& why) {
  if (comm::cluster::ClusterRequested()) {
    throw std::invalid_argument(
        "--hosts, --link and --link_latency place the ranks this launcher "
        "starts, but " +
        why);
  }
}

// What --help lists of the synchronisers: a line each.
std::string DescribeSyncs() {
  std::string text;
  for (const sync::SyncDescription* d : sync::AllSyncs()) {
    text += "  " + d->name + ": " + d->summary + "\n";
  }
  return text;
}

// The command line with a bare --list_syncs as --list_syncs=text (a string
// flag would take the next argument as its value).
std::vector<char*> WithBareListSyncs(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  static char list_text[] = "--list_syncs=text";
  for (char*& arg : args) {
    if (std::strcmp(arg, "--list_syncs") == 0) arg = list_text;
  }
  return args;
}

int PrintSyncList() {
  try {
    std::fputs(ListSyncs(FLAGS_list_syncs).c_str(), stdout);
    return 0;
  } catch (const std::invalid_argument& e) {
    cli::ExitWithUsageError(e.what());
  }
}

int Main(int argc, char** argv) {
  RegisterSyncFlags();
  std::vector<char*> args = WithBareListSyncs(argc, argv);
  cli::ParseFlagsOrExit(
      argc, args.data(),
      "trains an MLP data-parallel; the defaults are the configuration of the "
      "seed example's PyTorch DDP run (experiments/seed_ddp)\n\nbackends in "
      "this binary (--comm):\n" +
          comm::DescribeBackends() +
          "\nsynchronisers in this binary (--sync):\n" + DescribeSyncs(),
      {"train/", "comm/cluster/", "sync/"});
  if (!FLAGS_list_syncs.empty()) return PrintSyncList();
  // Before anything starts CUDA (CreateMlp below): as many hardware queues
  // as ranks whose kernels spin waiting for each other.
  if (RanksAreThreads(FLAGS_comm)) comm::PrepareProcessForRankThreads();
  TrainConfig config;
  try {
    config = ConfigFromFlags();
    // Whether this binary has the backend, without touching a device: the
    // launcher never creates a CUDA context; each rank finds its own GPU.
    if (!nn::HasMlpBackend(config.device)) {
      throw std::invalid_argument(std::string("--device=") +
                                  nn::DeviceName(config.device) +
                                  ": this binary was built without CUDA");
    }
  } catch (const std::exception& e) {
    cli::ExitWithUsageError(e.what());
  }
  const bool is_rank = comm::InLaunchedJob();
  const comm::RankLaunch launch = Backend(config.comm)->launch;
  try {
    if (!is_rank) {
      // On one host mpirun starts the ranks; on emulated hosts this does.
      if (launch == comm::RankLaunch::kMpirun &&
          !comm::cluster::ClusterRequested()) {
        throw std::invalid_argument("--comm=" + config.comm +
                                    " takes its ranks from mpirun: mpirun -np "
                                    "2 " +
                                    std::string(argv[0]) +
                                    " --comm=" + config.comm + " ...");
      }
      if (launch == comm::RankLaunch::kThreads) {
        RefuseEmulatedHosts("--comm=" + config.comm +
                            " runs its ranks as threads of one process");
        return RunRanksAsThreads(config, FLAGS_nprocs);
      }
      OutDirHold hold(config);
      ValidateConfig(config, FLAGS_nprocs);  // before any rank starts
      // Bad RINGLAB_* tuning is refused here, once, not by every rank.
      comm::TuningFromEnvironment();
      if (config.device == nn::Device::kCuda) {
        CheckDevicesFromLauncher(config.cuda_device);
      }
      ValidateFaultInjection(Faults(), FLAGS_nprocs);
      // Last, with this process still single-threaded (GainNetworkAdmin).
      const std::unique_ptr<comm::cluster::EmulatedCluster> cluster =
          comm::cluster::CreateJobCluster(
              FLAGS_nprocs, comm::cluster::ClusterRequestFromFlags());
      hold.Keep();
      if (launch == comm::RankLaunch::kMpirun) {
        return comm::LaunchMpirunOnHosts(
            FLAGS_nprocs, std::vector<std::string>(argv, argv + argc),
            *cluster);
      }
      comm::LaunchOptions options;
      options.cluster = cluster.get();
      return comm::LaunchRanks(
          FLAGS_nprocs, std::vector<std::string>(argv, argv + argc), options);
    }
    // Our launcher's ranks run with its flags; another's cannot be moved.
    if (!comm::JobEnvironment::Read().store_hosted) {
      RefuseEmulatedHosts(
          "this process is one rank of a job another "
          "launcher placed");
    }
    return RunThisRank(config);
  } catch (const std::invalid_argument& e) {
    cli::ExitWithUsageError(e.what());
  } catch (const std::bad_alloc&) {
    // What the launcher's estimate cannot see (another process took the
    // memory meanwhile, a limit it could not read) ends the same way.
    cli::ExitWithUsageError(
        "out of memory: this job needs more than the machine gave it "
        "(a smaller --model, --batch_size or --nprocs needs less)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace
}  // namespace ringlab::train

int main(int argc, char** argv) { return ringlab::train::Main(argc, argv); }
