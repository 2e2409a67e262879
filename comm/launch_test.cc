#include "comm/launch.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

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
