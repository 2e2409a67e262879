// The //train:train binary as a user runs it: bad input gets one "error:" line
// and exit status 2 before anything is written; a run writes its outputs; a
// rank that dies makes the launcher fail naming it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
  ExpectUsageError(RunTrain("--model=10,0,2"), "");
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

TEST(TrainCliTest, ADeadRankFailsTheLauncherWithinTheDeadline) {
  const std::string out = TempDir("dead_rank");
  const CommandResult run = RunTrain(
      "--quiet --timeout=5 --epochs=20 --fault_after_step=3 "
      "--fault_rank=1 --out_dir=" +
      out);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.status, 124) << "timed out: the survivor hung";
  EXPECT_NE(run.err.find("rank 1"), std::string::npos) << run.err;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);
  close(fd);
  return port;
}

// Ranks started by hand (torchrun's variables) with different models: like
// DDP's constructor, both refuse to start.
TEST(TrainCliTest, RanksWithDifferentModelsRefuseToStart) {
  const std::string dir = TempDir("mismatch");
  const std::string env =
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(FreePort()) +
      " WORLD_SIZE=2";
  const std::string command =
      "(" + env + " RANK=0 LOCAL_RANK=0 timeout -k 5 60 " + kTrain +
      " --quiet --timeout=10 --model=10,5,2 2>" + dir + "/err0; echo $? >" +
      dir + "/status0) & (" + env + " RANK=1 LOCAL_RANK=1 timeout -k 5 60 " +
      kTrain + " --quiet --timeout=10 --model=10,6,2 2>" + dir +
      "/err1; echo $? >" + dir + "/status1) & wait";
  ASSERT_EQ(std::system(command.c_str()), 0);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(ReadText(dir + "/status" + r), "2\n")
        << ReadText(dir + "/err" + r);
    EXPECT_NE(
        ReadText(dir + "/err" + r).find("disagrees with rank 0 on --model"),
        std::string::npos)
        << ReadText(dir + "/err" + r);
  }
}

}  // namespace
