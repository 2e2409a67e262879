#include "train/cpu_quota.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "train/cli_testing.h"

namespace ringlab::train {
namespace {

namespace fs = std::filesystem;
using testing::ReadText;

double CpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// The cgroups this process is in, as /proc/self/cgroup names them.
std::string OwnCgroups() { return ReadText("/proc/self/cgroup"); }

// cpu.stat's nr_throttled in the cgroup `dir`; -1: none.
long Throttled(const std::string& dir) {
  const std::string stat = ReadText(dir + "/cpu.stat");
  const size_t at = stat.find("nr_throttled ");
  return at == std::string::npos ? -1 : std::stol(stat.substr(at + 13));
}

TEST(CpuQuotaTest, RefusesAShareOutsideOneCpu) {
  EXPECT_THROW(CpuQuota(0.0), std::runtime_error);
  EXPECT_THROW(CpuQuota(0.001), std::runtime_error);
  EXPECT_THROW(CpuQuota(1.5), std::runtime_error);
}

// Inside, the process is in a cgroup of its own whose quota the kernel
// enforces: spinning for 0.3 s of CPU time at half a CPU (1 ms every 2 ms)
// must be throttled at least once, whatever the machine's speed.
// Outside, it is back where it was and the cgroup is gone.
TEST(CpuQuotaTest, HoldsTheProcessToItsShareThenLetsGo) {
  const std::string why = CpuQuota::Unavailable(0.5);
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string before = OwnCgroups();
  const std::string name = "ringlab-straggler-" + std::to_string(getpid());
  {
    CpuQuota quota(0.5);
    ASSERT_NE(OwnCgroups().find(name), std::string::npos) << OwnCgroups();
    const std::string own = CpuCgroupDir();
    ASSERT_EQ(fs::path(own).filename(), name) << own;
    const double start = CpuSeconds();
    volatile double sink = 0;
    while (CpuSeconds() - start < 0.3) sink = sink + 1;
    EXPECT_GT(Throttled(own), 0);
  }
  EXPECT_EQ(OwnCgroups(), before);
  EXPECT_EQ(OwnCgroups().find(name), std::string::npos);
}

// A rank killed inside its cgroup leaves it behind; the next quota removes it
// (a process that has exited and been reaped is gone for kill(pid, 0)).
TEST(CpuQuotaTest, RemovesTheCgroupOfAKilledRank) {
  const std::string why = CpuQuota::Unavailable(0.5);
  if (!why.empty()) GTEST_SKIP() << why;
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  const std::string orphan =
      CpuCgroupDir() + "/ringlab-straggler-" + std::to_string(gone);
  ASSERT_TRUE(fs::create_directory(orphan)) << orphan;
  { CpuQuota quota(0.5); }
  EXPECT_FALSE(fs::exists(orphan)) << orphan;
}

// A straggler held to a third of a CPU computes nothing else: the final
// parameters are the run's without one, config.json names the limit, and no
// cgroup of the rank's is left behind.
TEST(CpuQuotaTest, AStragglerUnderAQuotaTrainsTheSameBits) {
  const std::string why = CpuQuota::Unavailable(1.0 / 3);
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string plain = testing::TempDir("plain");
  const std::string slow = testing::TempDir("straggler");
  const std::string job = " --quiet --epochs=3 --out_dir=";
  ASSERT_EQ(testing::RunTrain(job + plain).status, 0);
  const testing::CommandResult run = testing::RunTrain(
      job + slow +
      " --straggler_rank=1 --straggler_factor=3 --straggler_limit=cpu_quota");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(ReadText(slow + "/config.json")
                .find("\"straggler_limit\": \"cpu_quota\""),
            std::string::npos);
  for (const auto& file : fs::directory_iterator(plain + "/final")) {
    const std::string name = file.path().filename();
    EXPECT_EQ(ReadText(file.path()), ReadText(slow + "/final/" + name)) << name;
  }
  for (const auto& entry : fs::directory_iterator(CpuCgroupDir())) {
    EXPECT_EQ(entry.path().filename().string().rfind("ringlab-straggler-", 0),
              std::string::npos)
        << entry.path();
  }
}

}  // namespace
}  // namespace ringlab::train
