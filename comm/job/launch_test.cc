#include "comm/job/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

// With RINGLAB_LAUNCH_TEST_SLOW_DEATH=<file>, this binary is a rank that takes
// a second to die, as a large killed process may: its main thread creates
// <file> and exits (the kernel marks the process exiting); another thread
// SIGKILLs the process a second later. Runs before main(), so before gtest.
const bool kSlowDeathRank = [] {
  const char* marker = std::getenv("RINGLAB_LAUNCH_TEST_SLOW_DEATH");
  if (marker == nullptr) return false;
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    raise(SIGKILL);
  }).detach();
  close(open(marker, O_CREAT | O_WRONLY, 0644));
  syscall(SYS_exit, 0);  // this thread only, without unwinding
  return true;
}();

struct Launched {
  int status;  // LaunchRanks's return value
  std::string output;
  double seconds;
};

// Runs LaunchRanks in a child process with stdout/stderr sent to a file, so
// the test sees exactly what a user would.
Launched Launch(int nprocs, const std::string& script,
                std::chrono::milliseconds grace = std::chrono::seconds(5)) {
  std::string path = ::testing::TempDir() + "/launch_out_XXXXXX";
  int fd = mkstemp(path.data());
  EXPECT_GE(fd, 0);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    LaunchOptions options;
    options.exec_self = false;
    options.grace = grace;
    options.env = {"LAUNCH_TEST=yes"};
    int rc = LaunchRanks(nprocs, {"/bin/sh", "-c", script}, options);
    _exit(rc);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path.c_str());
  return {
      WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count()};
}

TEST(LaunchTest, GivesEachRankItsVariablesAndPrefixesOutput) {
  Launched l =
      Launch(3,
             "echo \"vars $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
             "$MASTER_ADDR $RINGLAB_STORE_HOSTED $LAUNCH_TEST\"; "
             "test -n \"$MASTER_PORT\" && echo port-set; printf 'no newline'; "
             "echo to-stderr >&2");
  EXPECT_EQ(l.status, 0) << l.output;
  for (int r = 0; r < 3; ++r) {
    std::string p = "[rank " + std::to_string(r) + "] ";
    EXPECT_NE(l.output.find(p + "vars " + std::to_string(r) + " 3 " +
                            std::to_string(r) + " 3 127.0.0.1 1 yes\n"),
              std::string::npos)
        << l.output;
    EXPECT_NE(l.output.find(p + "port-set\n"), std::string::npos) << l.output;
    EXPECT_NE(l.output.find(p + "no newline\n"), std::string::npos) << l.output;
    EXPECT_NE(l.output.find(p + "to-stderr\n"), std::string::npos) << l.output;
  }
}

// The secret every rank of a job presents to its store: 128 fresh random
// bits per job, the same for all of its ranks, never one inherited from the
// launcher's own environment.
TEST(LaunchTest, EachJobGetsAFreshSecretAllItsRanksShare) {
  setenv("RINGLAB_JOB_SECRET", std::string(32, '0').c_str(), 1);
  std::vector<std::string> jobs;
  for (int job = 0; job < 2; ++job) {
    // Exactly one definition: with two, getenv() and the shell may not even
    // agree on which is the secret.
    Launched l = Launch(2,
                        "echo \"secret=$RINGLAB_JOB_SECRET\"; echo \"defined "
                        "$(tr '\\0' '\\n' </proc/$$/environ | grep -c "
                        "^RINGLAB_JOB_SECRET=)\"");
    EXPECT_EQ(l.status, 0) << l.output;
    EXPECT_EQ(l.output.find("defined 1") != std::string::npos &&
                  l.output.find("defined 2") == std::string::npos,
              true)
        << l.output;
    std::vector<std::string> secrets;
    for (int r = 0; r < 2; ++r) {
      const std::string p = "[rank " + std::to_string(r) + "] secret=";
      const size_t at = l.output.find(p);
      ASSERT_NE(at, std::string::npos) << l.output;
      secrets.push_back(l.output.substr(at + p.size(), 32));
      EXPECT_EQ(l.output[at + p.size() + 32], '\n') << l.output;
      EXPECT_EQ(secrets.back().find_first_not_of("0123456789abcdef"),
                std::string::npos)
          << secrets.back();
    }
    EXPECT_EQ(secrets[0], secrets[1]);
    EXPECT_NE(secrets[0], std::string(32, '0'));
    jobs.push_back(secrets[0]);
  }
  EXPECT_NE(jobs[0], jobs[1]);
  unsetenv("RINGLAB_JOB_SECRET");
}

// A launcher whose output nobody reads (a stopped terminal, `| less`, a
// full pipe) keeps draining its ranks: 20 MB of output does not stop a job
// that ends by itself, and the launcher exits soon after, its status the
// job's, having said how many lines it dropped where that could be seen.
TEST(LaunchTest, OutputNobodyReadsNeverStopsTheJob) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    LaunchOptions options;
    options.exec_self = false;
    options.output_flush = std::chrono::milliseconds(500);
    _exit(LaunchRanks(
        2, {"/bin/sh", "-c", "yes ringlab | head -c 10000000; exit 7"},
        options));
  }
  close(pipe_fds[1]);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  EXPECT_EQ(done, pid) << "the launcher blocked on its unread output";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << status;
  close(pipe_fds[0]);
}

// Lines a stdout nobody reads had to drop are counted at the end, on
// stderr, when stdout could not say so itself.
TEST(LaunchTest, LinesDroppedOnAnUnreadStdoutAreCountedOnStderr) {
  int out_fds[2], err_fds[2];
  ASSERT_EQ(pipe(out_fds), 0);
  ASSERT_EQ(pipe(err_fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(out_fds[0]);
    close(err_fds[0]);
    dup2(out_fds[1], 1);
    dup2(err_fds[1], 2);
    LaunchOptions options;
    options.exec_self = false;
    options.output_flush = std::chrono::milliseconds(300);
    _exit(LaunchRanks(1, {"/bin/sh", "-c", "yes ringlab | head -c 10000000"},
                      options));
  }
  close(out_fds[1]);
  close(err_fds[1]);
  std::string err;
  char buffer[4096];
  for (ssize_t n; (n = read(err_fds[0], buffer, sizeof(buffer))) > 0;) {
    err.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(out_fds[0]);
  close(err_fds[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(err.find(" line(s) of the ranks' standard output dropped: it was "
                     "not read"),
            std::string::npos)
      << err;
}

TEST(LaunchTest, FailingRankStopsTheOthersAndItsStatusPropagates) {
  Launched l =
      Launch(3, "if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; exec sleep 60");
  EXPECT_EQ(l.status, 3) << l.output;
  EXPECT_NE(l.output.find("error: rank 1 exited with status 3"),
            std::string::npos)
      << l.output;
  EXPECT_LT(l.seconds, 30) << "the sleeping ranks were not stopped";
}

TEST(LaunchTest, KilledRankIsReportedWithItsSignal) {
  Launched l =
      Launch(2, "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 60");
  EXPECT_EQ(l.status, 128 + 9) << l.output;
  EXPECT_NE(l.output.find("error: rank 0 killed by signal 9"),
            std::string::npos)
      << l.output;
  EXPECT_LT(l.seconds, 30);
}

TEST(LaunchTest, RankIgnoringSigtermIsKilledAfterTheGrace) {
  Launched l = Launch(2,
                      "if [ $RANK = 1 ]; then exit 2; fi; trap '' TERM; "
                      "while true; do sleep 0.1; done",
                      std::chrono::milliseconds(500));
  EXPECT_EQ(l.status, 2) << l.output;
  EXPECT_LT(l.seconds, 20);
}

// Rank 0 is SIGKILLed; rank 1 exits 1 only once rank 0 is gone (reaped by
// the launcher, so `kill -0` fails). The launcher must blame the first
// failure, rank 0's signal, not the later exit (the old launcher blamed the
// last failing rank by index). Ordered by the ranks themselves, so the test
// holds on a loaded machine too.
TEST(LaunchTest, TheFirstFailureIsBlamed) {
  std::string dir = ::testing::TempDir() + "/blame_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  Launched l = Launch(
      2, "if [ $RANK = 0 ]; then echo $$ >" + dir + "/pid.tmp; mv " + dir +
             "/pid.tmp " + dir + "/pid; kill -9 $$; fi; while [ ! -e " + dir +
             "/pid ]; do sleep 0.01; done; while kill -0 $(cat " + dir +
             "/pid) 2>/dev/null; do sleep 0.01; done; exit 1");
  EXPECT_EQ(l.status, 128 + 9) << l.output;
  EXPECT_NE(l.output.find("error: rank 0 killed by signal 9"),
            std::string::npos)
      << l.output;
}

// Every rank finds the same bad input: the user reads it once, as the
// launcher's last line, with the count of the others (before, one line per
// rank and then "rank 0 exited with status 2").
TEST(LaunchTest, AnErrorEveryRankReportsIsOneLine) {
  Launched l = Launch(3, "echo 'error: data.bin: truncated body' >&2; exit 2");
  EXPECT_EQ(l.status, 2) << l.output;
  EXPECT_EQ(l.output.find("error: "), l.output.rfind("error: ")) << l.output;
  EXPECT_NE(l.output.find(": data.bin: truncated body (and 2 ranks reported "
                          "the same)\n"),
            std::string::npos)
      << l.output;
  EXPECT_EQ(l.output.rfind("error: rank ", 0), 0u) << l.output;
}

// Rank 1 stops itself (as SIGSTOP or Ctrl-Z would); rank 0 gives up waiting
// for it and fails. The last line names rank 1, with what rank 0 said, and
// the stopped rank is ended at once, not at the grace's end (before: "rank 0
// exited with status 1", and a stopped rank waited for its SIGKILL).
TEST(LaunchTest, AStoppedRankIsNamedNotTheSurvivorThatGaveUpOnIt) {
  std::string dir = ::testing::TempDir() + "/stopped_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  Launched l = Launch(
      2,
      "if [ $RANK = 1 ]; then touch " + dir +
          "/stopping; kill -STOP $$; "
          "exit 0; fi; while [ ! -e " +
          dir +
          "/stopping ]; do sleep 0.01; done; "
          "sleep 0.3; echo 'error: timed out waiting for rank 1' >&2; exit 1",
      std::chrono::seconds(20));
  EXPECT_EQ(l.status, 1) << l.output;
  EXPECT_NE(l.output.find("error: rank 1 is stopped (SIGSTOP or Ctrl-Z), and "
                          "its peers gave up on it: rank 0: timed out waiting "
                          "for rank 1\n"),
            std::string::npos)
      << l.output;
  EXPECT_LT(l.seconds, 15) << "the stopped rank waited for the SIGKILL";
}

// Rank 0 is exiting but not yet waitable for a second (slow to die, like a
// killed rank unmapping a large data set); rank 1 exits 1 as soon as rank 0
// has started exiting. The launcher must wait for rank 0's end, beyond its
// usual 500 ms, and blame its signal (before, it blamed rank 1).
TEST(LaunchTest, ARankAlreadyExitingIsWaitedForBeforeBlaming) {
  (void)kSlowDeathRank;
  std::string dir = ::testing::TempDir() + "/slow_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  const std::string marker = dir + "/exiting";
  Launched l = Launch(
      2, "if [ $RANK = 0 ]; then RINGLAB_LAUNCH_TEST_SLOW_DEATH=" + marker +
             " exec " + self + "; fi; while [ ! -e " + marker +
             " ]; do sleep 0.01; done; exit 1");
  EXPECT_EQ(l.status, 128 + 9) << l.output;
  EXPECT_NE(l.output.find("error: rank 0 killed by signal 9"),
            std::string::npos)
      << l.output;
}

// A rank that writes without newlines is forwarded in prefixed 64 KiB pieces
// rather than held in the launcher's memory until it ends.
TEST(LaunchTest, LongLinesAreForwardedInPieces) {
  Launched l = Launch(1, "head -c 200000 /dev/zero | tr '\\0' x");
  EXPECT_EQ(l.status, 0);
  size_t pieces = 0;
  for (size_t at = l.output.find("[rank 0] x"); at != std::string::npos;
       at = l.output.find("[rank 0] x", at + 1)) {
    ++pieces;
  }
  EXPECT_EQ(pieces, 4u) << l.output.size();
  EXPECT_EQ(std::count(l.output.begin(), l.output.end(), 'x'), 200000);
}

// Starting the ranks fails part-way (descriptors run out for the pipes): the
// ranks already started are stopped and reaped, the signal handlers restored
// and the error thrown. The old launcher threw leaving them running.
TEST(LaunchTest, FailureWhileStartingReapsStartedRanks) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int open_fds = 0;
    for (int fd = 0; fd < 4096; ++fd) {
      if (fcntl(fd, F_GETFD) != -1) open_fds = fd + 1;
    }
    rlimit lim{static_cast<rlim_t>(open_fds + 24),
               static_cast<rlim_t>(open_fds + 24)};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(10);
    int code = 0;
    try {
      LaunchOptions options;
      options.exec_self = false;
      LaunchRanks(40, {"/bin/sh", "-c", "exec sleep 60"}, options);
      code = 11;  // should have thrown
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).find("pipe") == std::string::npos) code = 12;
    }
    // No child left, running or unreaped.
    if (!(waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD)) code = 13;
    struct sigaction now {};
    sigaction(SIGTERM, nullptr, &now);
    if (now.sa_handler != SIG_DFL) code = 14;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10 setrlimit, 11 no throw, 12 wrong error, 13 ranks left, 14 "
         "handler not restored";
}

TEST(LaunchTest, AllSucceed) {
  Launched l = Launch(4, "exit 0");
  EXPECT_EQ(l.status, 0) << l.output;
  EXPECT_EQ(l.output.find("error"), std::string::npos) << l.output;
}

TEST(LaunchTest, BadArguments) {
  EXPECT_THROW(LaunchRanks(0, {"/bin/true"}), std::invalid_argument);
  EXPECT_THROW(LaunchRanks(2, {}), std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::comm
