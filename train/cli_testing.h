// Running //train:train as a user does, for the CLI tests: through the shell
// with a deadline, capturing what it prints, then checking that the job left
// nothing behind (no rank running, no store port listening); and jobs whose
// ranks are started by hand with torchrun's variables, no launcher in
// between, so that each rank's exit status and stderr are its own.
#ifndef RINGLAB_TRAIN_CLI_TESTING_H_
#define RINGLAB_TRAIN_CLI_TESTING_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace ringlab::train::testing {

inline constexpr char kTrain[] = "train/train";
inline constexpr char kReference[] = "testdata/seed_ddp/reference";
inline const std::vector<std::string> kTensors = {"fc1.weight", "fc1.bias",
                                                  "fc2.weight", "fc2.bias"};

struct CommandResult {
  int status = -1;
  std::string out;
  std::string err;
};

// A fresh, empty directory under TEST_TMPDIR.
std::string TempDir(const std::string& name);
std::string ReadText(const std::string& path);
// Replaces path's bytes (in place: a test's damage, not an atomic write).
void WriteText(const std::string& path, const std::string& bytes);
int Lines(const std::string& text);

// After a job: no rank left running, no store port left listening; each
// leftover is a test failure naming `command`. The test's own helper
// processes (`expected`) are left alone.
void ExpectNothingLeft(const std::string& command,
                       const std::vector<pid_t>& expected = {});

// Runs `env_prefix kTrain args` through the shell, stopped after
// `deadline_s` seconds; then ExpectNothingLeft(..., expected).
CommandResult RunTrain(const std::string& args,
                       const std::string& env_prefix = "", int deadline_s = 60,
                       const std::vector<pid_t>& expected = {});

// One "error: ..." line naming `fragment`, and exit status 2.
// Starts train with `args` in the background (its output discarded, under
// `timeout`); returns the pid of the process started, a child of this one.
pid_t StartTrain(const std::string& args, int deadline_s = 120);
// Waits for a StartTrain'd job; its exit status (-1 when killed).
int WaitForTrain(pid_t pid);

void ExpectUsageError(const CommandResult& run, const std::string& fragment);

struct RankRun {
  int status = -1;  // as the shell reports it: 124 when `timeout` stopped it
  std::string out;
  std::string err;
};

struct ByHand {
  int world = 2;
  std::string master_addr = "127.0.0.1";
  // Each rank's flags, and extra variables ("NAME=value ...") before them.
  std::function<std::string(int rank)> args;
  std::function<std::string(int rank)> env;
  // Shell run once every rank has started, with $pid0, $pid1, ... the pids
  // of the ranks' `timeout` wrappers (e.g. to kill a rank from outside).
  std::string after_start;
  // Told the store's port before the ranks start (again on each retry).
  std::function<void(int port)> on_port;
  // Give every rank a fresh RINGLAB_JOB_SECRET rather than have rank 0
  // publish one in /tmp/ringlab-<uid>/: for jobs whose rank 0 is killed,
  // which would leave its file there.
  bool secret_in_env = false;
};

// Starts job.world ranks at once, with torchrun's variables, and waits for
// all. Rank 0 hosts the store on a port found free; when another process
// took it first (rank 0 says so), the whole job is started again on another
// one, a few times at most.
std::vector<RankRun> RunRanksByHand(const std::string& name, const ByHand& job);

// The loss column of losses.csv, keyed by "rank,step".
std::vector<std::pair<std::string, std::string>> Losses(
    const std::string& out_dir);

// What a run ends with: every rank's losses, rank 0's final parameters and,
// where the ranks differ, rank 1's; and the test that two runs ended alike,
// bit for bit.
struct Ending {
  std::vector<std::pair<std::string, std::string>> losses;
  std::vector<std::string> final0, final1;
};
Ending EndingOf(const std::string& out_dir);
void ExpectSameEnding(const Ending& got, const Ending& want);

}  // namespace ringlab::train::testing

#endif  // RINGLAB_TRAIN_CLI_TESTING_H_
