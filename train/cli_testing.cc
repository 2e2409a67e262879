#include "train/cli_testing.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "comm/testing/leftovers.h"
#include "io/test_dirs.h"

namespace ringlab::train::testing {
namespace {

namespace fs = std::filesystem;

// Ranks a launcher leaves running are re-parented to this process, where
// ExpectNothingLeft sees them.
const bool kAdopted = (ringlab::comm::testing::AdoptOrphans(), true);

// A free loopback port, for a job whose rank 0 hosts the store (torchrun's
// MASTER_PORT). It is free only when this returns: another process may take
// it before rank 0 binds it, hence RunRanksByHand's retries.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

// One attempt of RunRanksByHand on `port`.
std::vector<RankRun> RunRanksOnPort(const std::string& dir, const ByHand& job,
                                    int port) {
  std::string env = "MASTER_ADDR=" + job.master_addr +
                    " MASTER_PORT=" + std::to_string(port) +
                    " WORLD_SIZE=" + std::to_string(job.world);
  if (job.secret_in_env) {
    std::mt19937_64 rng(std::random_device{}());
    char secret[40];
    std::snprintf(secret, sizeof(secret), "%016llx%016llx",
                  static_cast<unsigned long long>(rng()),
                  static_cast<unsigned long long>(rng()));
    env += std::string(" RINGLAB_JOB_SECRET=") + secret;
  }
  std::string command;
  for (int rank = 0; rank < job.world; ++rank) {
    const std::string r = std::to_string(rank);
    command += env + " RANK=" + r + " LOCAL_RANK=" + r + " " +
               (job.env ? job.env(rank) : "") + " timeout -k 5 60 " + kTrain +
               " " + job.args(rank) + " >" + dir + "/out" + r + " 2>" + dir +
               "/err" + r + " & pid" + r + "=$!; ";
  }
  command += (job.after_start.empty() ? ":" : job.after_start) + "; ";
  for (int rank = 0; rank < job.world; ++rank) {
    const std::string r = std::to_string(rank);
    command += "wait $pid" + r + "; echo $? >" + dir + "/status" + r + "; ";
  }
  std::vector<RankRun> ranks(job.world);
  const int raw = std::system(("(" + command + ") </dev/null").c_str());
  ExpectNothingLeft(command);
  if (raw != 0) return ranks;
  for (int rank = 0; rank < job.world; ++rank) {
    const std::string r = std::to_string(rank);
    const std::string status = ReadText(dir + "/status" + r);
    ranks[rank].status = status.empty() ? -1 : std::atoi(status.c_str());
    ranks[rank].out = ReadText(dir + "/out" + r);
    ranks[rank].err = ReadText(dir + "/err" + r);
  }
  return ranks;
}

}  // namespace

std::string TempDir(const std::string& name) {
  return io::FreshTestDir("cli_" + name);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteText(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

int Lines(const std::string& text) {
  int lines = 0;
  for (char ch : text) lines += ch == '\n';
  return lines;
}

void ExpectNothingLeft(const std::string& command,
                       const std::vector<pid_t>& expected) {
  (void)kAdopted;
  for (const std::string& leftover :
       ringlab::comm::testing::Leftovers(2000, expected)) {
    ADD_FAILURE() << "left behind by '" << command << "': " << leftover;
  }
}

CommandResult RunTrain(const std::string& args, const std::string& env_prefix,
                       int deadline_s, const std::vector<pid_t>& expected) {
  const std::string dir = TempDir("run_capture");
  const std::string command =
      env_prefix + " timeout -k 5 " + std::to_string(deadline_s) + " " +
      kTrain + " " + args + " >" + dir + "/out 2>" + dir + "/err </dev/null";
  CommandResult run;
  const int raw = std::system(command.c_str());
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  run.out = ReadText(dir + "/out");
  run.err = ReadText(dir + "/err");
  ExpectNothingLeft(command, expected);
  return run;
}

pid_t StartTrain(const std::string& args, int deadline_s) {
  const std::string command = "exec timeout -k 5 " +
                              std::to_string(deadline_s) + " " + kTrain + " " +
                              args + " >/dev/null 2>&1 </dev/null";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int WaitForTrain(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void ExpectUsageError(const CommandResult& run, const std::string& fragment) {
  EXPECT_EQ(run.status, 2) << run.err;
  EXPECT_EQ(run.err.rfind("error: ", 0), 0u) << run.err;
  EXPECT_EQ(Lines(run.err), 1) << run.err;
  EXPECT_NE(run.err.find(fragment), std::string::npos) << run.err;
}

std::vector<RankRun> RunRanksByHand(const std::string& name,
                                    const ByHand& job) {
  constexpr int kAttempts = 5;
  std::vector<RankRun> ranks;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const int port = FreePort();
    if (port == 0) continue;
    if (job.on_port) job.on_port(port);
    ranks = RunRanksOnPort(TempDir(name), job, port);
    const std::string taken = "error: TcpStoreServer: cannot listen on " +
                              job.master_addr + ":" + std::to_string(port) +
                              ": Address already in use\n";
    if (ranks[0].err != taken) return ranks;
  }
  ADD_FAILURE() << "no free port for rank 0's store in " << kAttempts
                << " attempts";
  return ranks;
}

std::vector<std::pair<std::string, std::string>> Losses(
    const std::string& out_dir) {
  std::vector<std::pair<std::string, std::string>> losses;
  std::istringstream lines(ReadText(out_dir + "/losses.csv"));
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    std::stringstream columns(line);
    for (std::string field; std::getline(columns, field, ',');) {
      fields.push_back(field);
    }
    if (fields.size() < 4) continue;
    losses.push_back({fields[0] + "," + fields[2], fields[3]});
  }
  return losses;
}

Ending EndingOf(const std::string& out_dir) {
  Ending e;
  e.losses = Losses(out_dir);
  for (const std::string& tensor : kTensors) {
    e.final0.push_back(ReadText(out_dir + "/final/" + tensor + ".npy"));
    e.final1.push_back(ReadText(out_dir + "/final_rank1/" + tensor + ".npy"));
  }
  return e;
}

void ExpectSameEnding(const Ending& got, const Ending& want) {
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.final0, want.final0) << "rank 0's final parameters differ";
  EXPECT_EQ(got.final1, want.final1) << "rank 1's final parameters differ";
}

}  // namespace ringlab::train::testing
