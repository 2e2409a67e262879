// The //train:train binary as a user runs it: bad input gets one "error:" line
// and exit status 2 before anything is written; a run writes its outputs; a
// rank that dies makes the launcher fail naming it, and every other rank fail
// by itself.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "comm/testing/leftovers.h"
#include "nn/npy.h"

namespace {

namespace fs = std::filesystem;

constexpr char kTrain[] = "train/train";
constexpr char kReference[] = "experiments/seed_ddp/reference";

struct CommandResult {
  int status = -1;
  std::string out;
  std::string err;
};

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root ? root : "/tmp") + "/cli_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Ranks a launcher leaves running are re-parented to this process, where
// ExpectNothingLeft sees them.
const bool kAdopted = (ringlab::comm::testing::AdoptOrphans(), true);

// After a job: no rank left running, no store port left listening.
void ExpectNothingLeft(const std::string& command) {
  for (const std::string& leftover : ringlab::comm::testing::Leftovers()) {
    ADD_FAILURE() << "left behind by '" << command << "': " << leftover;
  }
}

// Runs `env_prefix kTrain args` through the shell with a deadline.
CommandResult RunTrain(const std::string& args,
                       const std::string& env_prefix = "") {
  const std::string dir = TempDir("run_capture");
  const std::string command = env_prefix + " timeout -k 5 60 " + kTrain + " " +
                              args + " >" + dir + "/out 2>" + dir + "/err";
  CommandResult run;
  const int raw = std::system(command.c_str());
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  run.out = ReadText(dir + "/out");
  run.err = ReadText(dir + "/err");
  ExpectNothingLeft(command);
  return run;
}

int Lines(const std::string& text) {
  int lines = 0;
  for (char ch : text) lines += ch == '\n';
  return lines;
}

void ExpectUsageError(const CommandResult& run, const std::string& fragment) {
  EXPECT_EQ(run.status, 2) << run.err;
  EXPECT_EQ(run.err.rfind("error: ", 0), 0u) << run.err;
  EXPECT_EQ(Lines(run.err), 1) << run.err;
  EXPECT_NE(run.err.find(fragment), std::string::npos) << run.err;
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
  ExpectUsageError(RunTrain("--batch_size=0"), "--batch_size");
  ExpectUsageError(RunTrain("--timeout=-1"), "--timeout");
  ExpectUsageError(RunTrain("--comm=mpi"), "mpirun");
  ExpectUsageError(RunTrain("--comm=ipc_ring"), "--device=cuda");
  ExpectUsageError(RunTrain("--flagfile=/nonexistent"), "not supported");
  ExpectUsageError(RunTrain("--epochs=2000000000"), "--epochs");
  ExpectUsageError(RunTrain("--resume"), "--out_dir");
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
    ringlab::nn::WriteNpyFloat32(data + "/data_rank" + r + ".npy", {n, 10},
                                 x.data());
    ringlab::nn::WriteNpyInt64(data + "/targets_rank" + r + ".npy", {n},
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
  ringlab::nn::WriteNpyFloat32(labels + "/data.npy", {3, 10}, x.data());
  ringlab::nn::WriteNpyInt64(labels + "/targets.npy", {3}, y.data());
  ExpectUsageError(RunTrain("--data_dir=" + labels + " --out_dir=" + out),
                   "label 7");
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

// A free loopback port, for a job whose rank 0 hosts the store (torchrun's
// MASTER_PORT). It is free only when this returns: another process may take
// it before rank 0 binds it, hence RunRanksByHand's retries.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

struct RankRun {
  int status = -1;  // as the shell reports it: 124 when `timeout` stopped it
  std::string err;  // the rank's own stderr, no launcher in between
};

// One attempt of RunRanksByHand on `port`.
std::vector<RankRun> RunRanksOnPort(
    const std::string& dir, int world, int port,
    const std::function<std::string(int rank)>& args) {
  const std::string env =
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
      " WORLD_SIZE=" + std::to_string(world);
  std::string command;
  for (int rank = 0; rank < world; ++rank) {
    const std::string r = std::to_string(rank);
    command += "(" + env + " RANK=" + r + " LOCAL_RANK=" + r +
               " timeout -k 5 60 " + kTrain + " " + args(rank) + " >" + dir +
               "/out" + r + " 2>" + dir + "/err" + r + "; echo $? >" + dir +
               "/status" + r + ") & ";
  }
  command += "wait";
  std::vector<RankRun> ranks(world);
  const int raw = std::system(command.c_str());
  ExpectNothingLeft(command);
  if (raw != 0) return ranks;
  for (int rank = 0; rank < world; ++rank) {
    const std::string r = std::to_string(rank);
    const std::string status = ReadText(dir + "/status" + r);
    ranks[rank].status = status.empty() ? -1 : std::atoi(status.c_str());
    ranks[rank].err = ReadText(dir + "/err" + r);
  }
  return ranks;
}

// Starts `world` ranks by hand with torchrun's variables, all at once (no
// launcher, so each rank's exit status and stderr are its own), and waits for
// all. Rank 0 hosts the store on FreePort()'s port; when another process took
// that port first (rank 0 says so), the whole job is started again on
// another one, a few times at most.
std::vector<RankRun> RunRanksByHand(
    const std::string& name, int world,
    const std::function<std::string(int rank)>& args) {
  constexpr int kAttempts = 5;
  std::vector<RankRun> ranks;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const int port = FreePort();
    if (port == 0) continue;
    ranks = RunRanksOnPort(TempDir(name), world, port, args);
    const std::string taken =
        "error: TcpStoreServer: cannot listen on 127.0.0.1:" +
        std::to_string(port) + ": Address already in use\n";
    if (ranks[0].err != taken) return ranks;
  }
  ADD_FAILURE() << "no free port for rank 0's store in " << kAttempts
                << " attempts";
  return ranks;
}

// Without a launcher to stop them, the survivors of a dead rank must fail by
// themselves, each naming the rank that died. A survivor that hangs is
// stopped by `timeout` (status 124, and no error line of its own); one that
// only notices at its deadline (--timeout) says "timed out", not "died".
TEST(TrainCliTest, EachSurvivorDetectsADeadRankByItself) {
  const auto ranks = RunRanksByHand("dead_rank", 3, [](int) {
    return "--quiet --timeout=20 --epochs=20 --fault_after_step=3 "
           "--fault_rank=1";
  });
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[1].status, 128 + SIGKILL) << ranks[1].err;
  for (int rank : {0, 2}) {
    const std::string& err = ranks[rank].err;
    EXPECT_EQ(ranks[rank].status, 1) << "rank " << rank << ": " << err;
    EXPECT_EQ(err.rfind("error: shm_ring: ", 0), 0u) << err;
    EXPECT_EQ(Lines(err), 1) << err;
    // The other survivor may have failed first and passed this on: either
    // way the line ends with the dead rank's own detection.
    EXPECT_NE(err.find("rank 1 (pid "), std::string::npos) << err;
    EXPECT_NE(err.find(") died during "), std::string::npos) << err;
  }
}

// Ranks started by hand (torchrun's variables) with different models: like
// DDP's constructor, both refuse to start.
TEST(TrainCliTest, RanksWithDifferentModelsRefuseToStart) {
  const auto ranks = RunRanksByHand("mismatch", 2, [](int rank) {
    return std::string("--quiet --timeout=10 --model=") +
           (rank == 0 ? "10,5,2" : "10,6,2");
  });
  ASSERT_EQ(ranks.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(ranks[rank].status, 2) << ranks[rank].err;
    EXPECT_NE(ranks[rank].err.find("disagrees with rank 0 on --model"),
              std::string::npos)
        << ranks[rank].err;
  }
}

}  // namespace
