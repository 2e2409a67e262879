// The //train:train binary as a user runs it: bad input gets one "error:" line
// and exit status 2 before anything is written; a run writes its outputs; a
// rank that dies makes the launcher fail naming it, and every other rank fail
// by itself.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "io/npy.h"
#include "train/cli_testing.h"
#include "train/cpu_quota.h"

namespace {

namespace fs = std::filesystem;
using namespace ringlab::train::testing;  // NOLINT: the CLI test helpers
using ringlab::train::CpuQuota;

// losses.csv's rank, step and loss columns (the times differ run to run).
std::string LossColumn(const std::string& csv) {
  std::string out;
  size_t start = 0;
  for (size_t end; (end = csv.find('\n', start)) != std::string::npos;
       start = end + 1) {
    const std::string line = csv.substr(start, end - start);
    size_t c1 = line.find(','), c2 = line.find(',', c1 + 1),
           c3 = line.find(',', c2 + 1), c4 = line.find(',', c3 + 1);
    out += line.substr(0, c1) + line.substr(c2, c4 - c2) + "\n";
  }
  return out;
}

TEST(TrainCliTest, BadFlagsAreOneErrorLineAndStatusTwo) {
  ExpectUsageError(RunTrain("--no_such_flag=1"), "unknown flag --no_such_flag");
  ExpectUsageError(RunTrain("--lr=abc"), "invalid value 'abc' for --lr");
  ExpectUsageError(RunTrain("--epochs"), "needs a value");
  ExpectUsageError(RunTrain("stray"), "unexpected argument");
  ExpectUsageError(RunTrain("--model=10,0,2"), "bad width \"0\"");
  ExpectUsageError(RunTrain("--sync=ring"), "--sync=ring");
  ExpectUsageError(RunTrain("--comm=carrier_pigeon"), "carrier_pigeon");
  ExpectUsageError(RunTrain("--device=tpu"), "--device=tpu");
  ExpectUsageError(RunTrain("--device=cuda:x"), "--device=cuda:x");
  ExpectUsageError(RunTrain("--device=cuda:-1"), "--device=cuda:-1");
  ExpectUsageError(RunTrain("--batch_size=0"), "--batch_size");
  ExpectUsageError(RunTrain("--timeout=-1"), "--timeout");
  ExpectUsageError(RunTrain("--comm=mpi"), "mpirun");
  // A GPU backend without --device=cuda; a build without CUDA has none.
  const bool gpu_backends =
      RunTrain("--help").out.find("(GPU memory") != std::string::npos;
  ExpectUsageError(
      RunTrain("--comm=ipc_ring"),
      gpu_backends ? "--device=cuda" : "unknown communicator 'ipc_ring'");
  ExpectUsageError(RunTrain("--flagfile=/nonexistent"), "not supported");
  ExpectUsageError(RunTrain("--epochs=2000000000"), "--epochs");
  ExpectUsageError(RunTrain("--resume"), "--out_dir");
  // A model that cannot fit: refused before any rank allocates it.
  ExpectUsageError(RunTrain("--model=10,300000000,2"),
                   "the job needs at least 401 GB of memory");
  // A tuning value out of range: refused once, by the launcher (each rank
  // used to refuse it, one line per rank).
  ExpectUsageError(
      RunTrain("--epochs=1 --nprocs=3", "RINGLAB_SHM_CHUNK_BYTES=0"),
      "shm_ring.chunk_bytes = 0 is outside");
}

// The launcher asks a forked child about GPUs (it never creates a CUDA
// context itself): without one, --device=cuda is one error line before any
// rank starts; with one, a device index beyond the machine's is.
TEST(TrainCliTest, CudaDevicesAreCheckedBeforeAnyRankStarts) {
  const CommandResult any = RunTrain("--device=cuda --quiet --epochs=1");
  if (any.status == 0) {
    ExpectUsageError(RunTrain("--device=cuda:9999"), "cuda:9999");
    return;
  }
  if (any.err.find("built without CUDA") != std::string::npos) {
    ExpectUsageError(any, "built without CUDA");
    return;
  }
  ExpectUsageError(any, "no usable device");
  ExpectUsageError(RunTrain("--device=cuda:1"), "no usable device");
}

// Every integer flag is bounded so that no arithmetic on it can overflow;
// out of range is an error, never a silently wrong run (a batch size of
// 2^63 - 1 used to overflow samples + batch_size - 1 and train nothing).
TEST(TrainCliTest, IntegerFlagsOutOfRangeAreRefused) {
  const std::string max64 = "9223372036854775807";
  ExpectUsageError(RunTrain("--batch_size=" + max64),
                   "--batch_size must be in [1, 1000000000], not " + max64);
  ExpectUsageError(RunTrain("--samples=" + max64), "--samples must be in");
  ExpectUsageError(RunTrain("--samples=0"), "--samples must be in");
  ExpectUsageError(RunTrain("--epochs=-1"), "--epochs must be in");
  ExpectUsageError(RunTrain("--checkpoint_every=-1 --out_dir=/tmp"),
                   "--checkpoint_every must be in");
  ExpectUsageError(RunTrain("--checkpoint_every=" + max64 + " --out_dir=/tmp"),
                   "--checkpoint_every must be in");
  ExpectUsageError(RunTrain("--sync=param_avg --avg_period=0"),
                   "--avg_period must be in");
  ExpectUsageError(RunTrain("--sync=param_avg --avg_period=" + max64),
                   "--avg_period must be in");
  ExpectUsageError(RunTrain("--sync=param_avg --avg_warmup=" + max64),
                   "--avg_warmup must be in");
  ExpectUsageError(RunTrain("--avg_warmup=-1"), "--avg_warmup must be in");
  ExpectUsageError(RunTrain("--nprocs=0"), "--nprocs");
  ExpectUsageError(RunTrain("--nprocs=257"), "--nprocs");
  ExpectUsageError(RunTrain("--nprocs=3000000000"), "--nprocs");
  ExpectUsageError(RunTrain("--fault_rank=2"),
                   "--fault_rank must be in [0, 1]");
  ExpectUsageError(RunTrain("--fault_after_step=-2"), "--fault_after_step");
  ExpectUsageError(RunTrain("--fault_point=somewhere"), "--fault_point");
  ExpectUsageError(RunTrain("--seed=-1"), "--seed");
  ExpectUsageError(RunTrain("--seed=18446744073709551615 --per_rank_data"),
                   "--seed + rank must stay below 2^64");
  ExpectUsageError(
      RunTrain("--sampler_seed=18446744073709551615 --set_epoch --epochs=2"),
      "--sampler_seed + epoch must stay below 2^64");
  ExpectUsageError(RunTrain("--timeout=1e300"), "--timeout");
  // At the bounds themselves, the run goes ahead.
  EXPECT_EQ(RunTrain("--quiet --batch_size=1000000000 --epochs=1").status, 0);
  EXPECT_EQ(RunTrain("--quiet --seed=18446744073709551615 --sampler_seed="
                     "18446744073709551615 --epochs=1")
                .status,
            0);
}

TEST(TrainCliTest, ResumeRefusesAMissingOrForeignCheckpoint) {
  const std::string out = TempDir("foreign_checkpoint");
  ExpectUsageError(RunTrain("--resume --out_dir=" + out), "no checkpoint");
  const CommandResult first =
      RunTrain("--quiet --checkpoint_every=3 --out_dir=" + out);
  ASSERT_EQ(first.status, 0) << first.err;
  ExpectUsageError(RunTrain("--resume --lr=0.5 --out_dir=" + out),
                   "another job's");
  ExpectUsageError(RunTrain("--resume --nprocs=3 --out_dir=" + out),
                   "another job's");
  const CommandResult resumed =
      RunTrain("--quiet --resume --checkpoint_every=3 --out_dir=" + out);
  EXPECT_EQ(resumed.status, 0) << resumed.err;
}

TEST(TrainCliTest, PerRankDataSetsOfDifferentSizesAreRefused) {
  const std::string data = TempDir("uneven_ranks");
  for (int rank = 0; rank < 2; ++rank) {
    const int64_t n = rank == 0 ? 20 : 24;
    const std::vector<float> x(n * 10, 0.25f);
    const std::vector<int64_t> y(n, 1);
    const std::string r = std::to_string(rank);
    ringlab::io::WriteNpyFloat32(data + "/data_rank" + r + ".npy", {n, 10},
                                 x.data());
    ringlab::io::WriteNpyInt64(data + "/targets_rank" + r + ".npy", {n},
                               y.data());
  }
  ExpectUsageError(RunTrain("--data_dir=" + data), "24 samples");
  fs::remove(data + "/data_rank1.npy");
  ExpectUsageError(RunTrain("--data_dir=" + data),
                   "no " + data + "/data_rank1.npy");
}

TEST(TrainCliTest, BadFilesAreOneErrorLineAndLeaveOutputsUntouched) {
  const std::string out = TempDir("untouched");
  std::ofstream(out + "/losses.csv") << "sentinel\n";
  const std::string data = TempDir("bad_data");
  std::ofstream(data + "/data.npy") << "\x93NUMPY garbage";
  std::ofstream(data + "/targets.npy") << "x";
  ExpectUsageError(RunTrain("--data_dir=" + data + " --out_dir=" + out),
                   "data.npy");
  ExpectUsageError(RunTrain("--data_dir=/nonexistent --out_dir=" + out),
                   "/nonexistent");
  // Initial parameters of another shape.
  ExpectUsageError(RunTrain("--model=10,6,2 --init_dir=" +
                            std::string(kReference) + "/init --out_dir=" + out),
                   "fc1.weight.npy");
  // Labels outside the model's classes.
  const std::string labels = TempDir("bad_labels");
  const std::vector<float> x(3 * 10, 0.5f);
  const std::vector<int64_t> y = {0, 1, 7};
  ringlab::io::WriteNpyFloat32(labels + "/data.npy", {3, 10}, x.data());
  ringlab::io::WriteNpyInt64(labels + "/targets.npy", {3}, y.data());
  ExpectUsageError(RunTrain("--data_dir=" + labels + " --out_dir=" + out),
                   "label 7");
  // Labels that are not a file: a FIFO hung the launcher, a link to
  // /dev/zero grew it without bound.
  const std::string fifo = TempDir("fifo_labels");
  ringlab::io::WriteNpyFloat32(fifo + "/data.npy", {3, 10}, x.data());
  ASSERT_EQ(mkfifo((fifo + "/targets.npy").c_str(), 0600), 0);
  ExpectUsageError(RunTrain("--data_dir=" + fifo + " --out_dir=" + out),
                   "targets.npy: is not a regular file");
  const std::string zero = TempDir("zero_labels");
  ringlab::io::WriteNpyFloat32(zero + "/data.npy", {3, 10}, x.data());
  ASSERT_EQ(symlink("/dev/zero", (zero + "/targets.npy").c_str()), 0);
  ExpectUsageError(RunTrain("--data_dir=" + zero + " --out_dir=" + out),
                   "targets.npy: is not a regular file");
  // An empty data set (it trained 0 steps and exited 0).
  const std::string empty = TempDir("empty_npy");
  ringlab::io::WriteNpyFloat32(empty + "/data.npy", {0, 10}, x.data());
  ringlab::io::WriteNpyInt64(empty + "/targets.npy", {0}, y.data());
  ExpectUsageError(RunTrain("--data_dir=" + empty + " --out_dir=" + out),
                   "data.npy holds no samples");
  EXPECT_EQ(ReadText(out + "/losses.csv"), "sentinel\n");
}

TEST(TrainCliTest, UnwritableOutDirIsAnError) {
  const std::string dir = TempDir("unwritable");
  std::ofstream(dir + "/file") << "a file, not a directory";
  ExpectUsageError(RunTrain("--out_dir=" + dir + "/file/run"), "/file/run");
}

TEST(TrainCliTest, TheDocumentsRunWritesItsOutputs) {
  const std::string out = TempDir("run");
  const CommandResult run =
      RunTrain("--out_dir=" + out + " --data_dir=" + std::string(kReference) +
               " --init_dir=" + std::string(kReference) + "/init");
  ASSERT_EQ(run.status, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("epoch 10/10"), std::string::npos) << run.out;
  const std::string losses = ReadText(out + "/losses.csv");
  EXPECT_EQ(
      losses.rfind("rank,epoch,step,loss,step_ms,comm_ms,bytes_sent\n", 0), 0u);
  EXPECT_EQ(Lines(losses), 21);  // header + 2 ranks × 10 steps
  for (const char* name :
       {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
    EXPECT_TRUE(fs::exists(out + "/final/" + name + ".npy")) << name;
  }
  EXPECT_NE(ReadText(out + "/config.json").find("\"sync\": \"allreduce\""),
            std::string::npos);
}

// The optimiser's settings go to config.json, and a run with momentum trains
// something else than one without (the flags reach the SGD step).
TEST(TrainCliTest, MomentumNesterovAndWeightDecayReachTheStepAndConfig) {
  const std::string plain = TempDir("plain"), nesterov = TempDir("nesterov");
  const std::string job = " --quiet --epochs=3 --lr=0.1 --out_dir=";
  ASSERT_EQ(RunTrain(job + plain).status, 0);
  const CommandResult run = RunTrain(
      job + nesterov + " --momentum=0.9 --nesterov --weight_decay=0.0001");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string config = ReadText(nesterov + "/config.json");
  // Each float as the double nearest it, as "lr" is written.
  for (const char* field : {"\"momentum\": 0.899999976", "\"nesterov\": true",
                            "\"weight_decay\": 9.99999975e-05"}) {
    EXPECT_NE(config.find(field), std::string::npos) << field << config;
  }
  EXPECT_NE(ReadText(plain + "/final/fc1.weight.npy"),
            ReadText(nesterov + "/final/fc1.weight.npy"));
}

// A straggler waits, it does not compute anything else: every loss and the
// final parameters are the run's without one, and config.json names it
// (cpu_quota_test holds the other --straggler_limit to the same, outside
// Bazel's sandbox).
TEST(TrainCliTest, AStragglerTrainsTheSameBits) {
  const std::string plain = TempDir("plain"), slow = TempDir("straggler");
  const std::string job = " --quiet --epochs=3 --out_dir=";
  ASSERT_EQ(RunTrain(job + plain).status, 0);
  const CommandResult run =
      RunTrain(job + slow + " --straggler_rank=1 --straggler_factor=3");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string config = ReadText(slow + "/config.json");
  EXPECT_NE(config.find("\"straggler_rank\": 1"), std::string::npos);
  EXPECT_NE(config.find("\"straggler_limit\": \"sleep\""), std::string::npos);
  EXPECT_EQ(LossColumn(ReadText(plain + "/losses.csv")),
            LossColumn(ReadText(slow + "/losses.csv")));
  EXPECT_EQ(ReadText(plain + "/final/fc1.weight.npy"),
            ReadText(slow + "/final/fc1.weight.npy"));
}

// Where no cgroup can be made (Bazel's sandbox mounts /sys/fs/cgroup read
// only), a straggler held to a CPU quota is one error line and status 2,
// before anything is written (cpu_quota_test runs one where it can be made).
TEST(TrainCliTest, ACpuQuotaThatCannotBeHadIsOneErrorLine) {
  if (CpuQuota::Unavailable(1.0 / 3).empty()) {
    GTEST_SKIP() << "this process can make a cgroup: cpu_quota_test's case";
  }
  const std::string out = TempDir("quota") + "/out";
  const CommandResult run = RunTrain(" --quiet --epochs=1 --out_dir=" + out +
                                     " --straggler_rank=1 --straggler_factor=3"
                                     " --straggler_limit=cpu_quota");
  EXPECT_EQ(run.status, 2);
  EXPECT_EQ(run.err.rfind("error: --straggler_limit=cpu_quota: ", 0), 0u)
      << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_FALSE(fs::exists(out));
}

// On one host the host's ranks are the job's: post_local_sgd averaging the
// gradients among them after its warm-up is DDP's allreduce over the same
// backend, and averaging parameters that are already equal keeps them (four
// equal floats sum and divide by 4 exactly), so the two train bit for bit.
// With one-rank subgroups the ranks part after the warm-up.
TEST(TrainCliTest, OnOneHostHostSubgroupsTrainAsAllreduce) {
  const std::string job =
      " --nprocs=4 --samples=512 --batch_size=16 "
      "--epochs=2 --quiet --out_dir=";
  const std::string post_local =
      " --sync=post_local_sgd --avg_warmup=3 "
      "--avg_period=5 --post_local_subgroup=";
  const std::string ddp = TempDir("ddp"), host = TempDir("host"),
                    rank = TempDir("rank");
  ASSERT_EQ(RunTrain("--sync=allreduce" + job + ddp).status, 0);
  const CommandResult hosts = RunTrain(post_local + "host" + job + host);
  ASSERT_EQ(hosts.status, 0) << hosts.err;
  ASSERT_EQ(RunTrain(post_local + "rank" + job + rank).status, 0);
  EXPECT_EQ(Losses(host), Losses(ddp));
  EXPECT_NE(Losses(rank), Losses(ddp));
  EXPECT_NE(
      ReadText(host + "/config.json").find("\"post_local_subgroup\": \"host\""),
      std::string::npos);
  ExpectUsageError(RunTrain("--post_local_subgroup=host"),
                   "--post_local_subgroup is an option of post_local_sgd, "
                   "not of --sync=allreduce");
  ExpectUsageError(RunTrain("--sync=post_local_sgd --post_local_subgroup=node"),
                   "--post_local_subgroup must be rank or host");
}

// A job whose stdout nobody reads (a stopped terminal, `| less` left on its
// first page) for longer than --timeout trains to its end, bitwise as the
// same job read normally: the launcher drains its ranks whatever its own
// output does (it prints an epoch line per step here, far more than a pipe
// holds).
TEST(TrainCliTest, AStdoutNobodyReadsNeverStopsTraining) {
  const std::string flags = "--timeout=2 --epochs=4000 --out_dir=";
  const std::string read = TempDir("stdout_read");
  ASSERT_EQ(RunTrain(flags + read).status, 0);
  const std::string unread = TempDir("stdout_unread");
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    dup2(pipe_fds[1], 1);
    const std::string command = std::string("exec timeout -k 5 120 ") + kTrain +
                                " " + flags + unread + " 2>" + unread + ".err";
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fds[1]);
  EXPECT_EQ(WaitForTrain(pid), 0) << ReadText(unread + ".err");
  close(pipe_fds[0]);  // never read
  EXPECT_EQ(Losses(unread), Losses(read));
  for (const std::string& tensor : kTensors) {
    EXPECT_EQ(ReadText(unread + "/final/" + tensor + ".npy"),
              ReadText(read + "/final/" + tensor + ".npy"))
        << tensor;
  }
}

TEST(TrainCliTest, ZeroEpochsWritesTheInitialParameters) {
  const std::string out = TempDir("zero_epochs");
  const CommandResult run =
      RunTrain("--epochs=0 --quiet --out_dir=" + out +
               " --init_dir=" + std::string(kReference) + "/init");
  ASSERT_EQ(run.status, 0) << run.err;
  for (const char* name :
       {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
    EXPECT_EQ(ReadText(out + "/final/" + name + ".npy"),
              ReadText(std::string(kReference) + "/init/" + name + ".npy"))
        << name;
  }
}

// The launcher's own report: it blames the rank that died, not a survivor
// that failed after it. What the survivors do is not checked here: the
// launcher sends them SIGTERM as soon as it reaps the dead rank, so a
// survivor that hangs ends just as fast as one that fails by itself (see
// EachSurvivorDetectsADeadRankByItself).
TEST(TrainCliTest, ADeadRankFailsTheLauncherWithinTheDeadline) {
  const CommandResult run = RunTrain(
      "--quiet --timeout=20 --epochs=20 --fault_after_step=3 --fault_rank=1");
  EXPECT_EQ(run.status, 128 + SIGKILL) << run.err;
  const std::string report = "error: rank 1 killed by signal 9 (Killed)\n";
  ASSERT_GE(run.err.size(), report.size()) << run.err;
  EXPECT_EQ(run.err.substr(run.err.size() - report.size()), report) << run.err;
}

// Without a launcher to stop them, the survivors of a dead rank must fail by
// themselves, each within its deadline, naming the rank that died: whether
// they meet it in the next gradient allreduce (allreduce), in a parameter
// average or a checkpoint's barrier (param_avg), or only at the end of the
// run (none); and whether it was rank 0, which hosts the store. A survivor
// that hangs is stopped by `timeout` (status 124, and no error line of its
// own); one that only notices at its deadline (--timeout) says "timed out",
// not "died".
TEST(TrainCliTest, EachSurvivorDetectsADeadRankByItself) {
  struct Case {
    const char* flags;
    int dead;
  };
  for (const Case& c :
       {Case{"--sync=allreduce", 1}, Case{"--sync=allreduce", 0},
        Case{"--sync=param_avg --avg_period=4 --checkpoint_every=2", 1},
        Case{"--sync=param_avg --avg_period=4", 0}, Case{"--sync=none", 1},
        Case{"--sync=none --checkpoint_every=3", 0}}) {
    SCOPED_TRACE(std::string(c.flags) + ", rank " + std::to_string(c.dead) +
                 " dies");
    const std::string out = TempDir("dead_rank_out");
    ByHand job;
    job.world = 3;
    job.secret_in_env = true;  // rank 0 may die: it publishes no file
    job.args = [&](int) {
      return std::string("--quiet --timeout=20 --epochs=20 ") + c.flags +
             " --fault_after_step=5 --fault_rank=" + std::to_string(c.dead) +
             " --out_dir=" + out;
    };
    const auto start = std::chrono::steady_clock::now();
    const auto ranks = RunRanksByHand("dead_rank", job);
    // Every survivor was done well before its 20 s deadline.
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(20));
    ASSERT_EQ(ranks.size(), 3u);
    EXPECT_EQ(ranks[c.dead].status, 128 + SIGKILL) << ranks[c.dead].err;
    for (int rank = 0; rank < 3; ++rank) {
      if (rank == c.dead) continue;
      const std::string& err = ranks[rank].err;
      EXPECT_EQ(ranks[rank].status, 1) << "rank " << rank << ": " << err;
      EXPECT_EQ(err.rfind("error: shm_ring: ", 0), 0u) << err;
      EXPECT_EQ(Lines(err), 1) << err;
      // The other survivor may have failed first and passed this on: either
      // way the line ends with the dead rank's own detection.
      EXPECT_NE(err.find("rank " + std::to_string(c.dead) + " (pid "),
                std::string::npos)
          << err;
      EXPECT_NE(err.find(") died during "), std::string::npos) << err;
    }
  }
}

// Ranks started by hand (torchrun's variables) with different models: like
// DDP's constructor, both refuse to start.
TEST(TrainCliTest, RanksWithDifferentModelsRefuseToStart) {
  ByHand job;
  job.args = [](int rank) {
    return std::string("--quiet --timeout=10 --model=") +
           (rank == 0 ? "10,5,2" : "10,6,2");
  };
  const auto ranks = RunRanksByHand("mismatch", job);
  ASSERT_EQ(ranks.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(ranks[rank].status, 2) << ranks[rank].err;
    EXPECT_NE(ranks[rank].err.find("disagrees with rank 0 on --model"),
              std::string::npos)
        << ranks[rank].err;
  }
}

// The torchrun-style pair on MASTER_ADDR=127.0.0.2 (it used to hang: rank 0
// listened on 127.0.0.1 whatever MASTER_ADDR said) trains exactly what the
// launcher's job trains.
TEST(TrainCliTest, TorchrunStylePairOnAnotherLoopbackAddressFinishes) {
  const std::string flags =
      "--quiet --timeout=20 --data_dir=" + std::string(kReference) +
      " --init_dir=" + std::string(kReference) + "/init --out_dir=";
  const std::string launched = TempDir("launched");
  ASSERT_EQ(RunTrain(flags + launched).status, 0);
  const std::string out = TempDir("by_hand");
  ByHand job;
  job.master_addr = "127.0.0.2";
  job.args = [&](int) { return flags + out; };
  const auto ranks = RunRanksByHand("loopback2", job);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankRun& rank : ranks) EXPECT_EQ(rank.status, 0) << rank.err;
  EXPECT_EQ(Losses(out), Losses(launched));
  EXPECT_EQ(Losses(out).size(), 20u);
  for (const std::string& tensor : kTensors) {
    EXPECT_EQ(ReadText(out + "/final/" + tensor + ".npy"),
              ReadText(launched + "/final/" + tensor + ".npy"))
        << tensor;
  }
}

// Every rank reports its host: over shm_ring, ranks on two hosts each
// refuse at start with the same line naming both (RINGLAB_HOST_ID stands
// for two machines here; train/two_host_test runs real ones).
TEST(TrainCliTest, SharedMemoryRanksOnTwoHostsRefuseNamingThem) {
  ByHand job;
  job.env = [](int rank) {
    return "RINGLAB_HOST_ID=node-" + std::string(rank == 0 ? "a" : "b");
  };
  job.args = [](int) { return std::string("--quiet --timeout=10"); };
  const auto ranks = RunRanksByHand("two_hosts", job);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankRun& rank : ranks) {
    // (nccl among them where the build has it)
    EXPECT_EQ(rank.err.rfind(
                  "error: shm_ring needs every rank on one host, but this job "
                  "spans 2 hosts (rank 0 on node-a; rank 1 on node-b); use a "
                  "backend that spans hosts: gloo, hier, mpi",
                  0),
              0u)
        << rank.err;
    EXPECT_EQ(Lines(rank.err), 1) << rank.err;
    EXPECT_EQ(rank.status, 2);
  }
}

// Beyond loopback a job needs its secret on every rank: without it, or with
// a malformed one, a rank refuses before it listens or connects anywhere.
TEST(TrainCliTest, AJobBeyondLoopbackWithoutItsSecretRefusesToStart) {
  const std::string rank1 =
      "RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500";
  ExpectUsageError(RunTrain("--quiet", rank1),
                   "MASTER_ADDR=10.0.0.1, beyond loopback: set "
                   "RINGLAB_JOB_SECRET");
  const std::string rank0 =
      "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500";
  ExpectUsageError(RunTrain("--quiet --store_bind=0.0.0.0", rank0),
                   "the store would listen on 0.0.0.0, beyond loopback");
  const CommandResult bad =
      RunTrain("--quiet", rank1 + " RINGLAB_JOB_SECRET=notsosecret");
  ExpectUsageError(bad, "RINGLAB_JOB_SECRET must be 32 to 128 hex digits");
  EXPECT_EQ(bad.err.find("notsosecret"), std::string::npos) << bad.err;
  ExpectUsageError(RunTrain("--store_bind=everywhere"),
                   "--store_bind=everywhere is not an IPv4 address");
}

}  // namespace
