// `train --hosts=H --link=RATE`: the launcher's ranks on emulated hosts of
// one machine (comm/cluster), for real. A gloo job across two hosts and two
// ranks per host ends bitwise where the same job on one host ends; shm_ring
// is refused naming the hosts; a kill -9 of the launcher mid-job leaves no
// namespace, veth or process behind; flags that cannot take effect are one
// error line. Skips where this machine may not create network namespaces
// (not root, no unprivileged user namespaces) or lacks iproute2.
#include <glob.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "comm/cluster/namespaces_in_use.h"
#include "train/cli_testing.h"

namespace {

using namespace ringlab::train::testing;  // NOLINT: the CLI test helpers
using ringlab::comm::cluster::NetworkNamespacesInUse;

// Synthetic data, 200 samples (50 per rank at 4 ranks), 3 epochs of 4
// steps; the outputs into the directory appended.
std::string JobFlags() {
  return "--quiet --timeout=30 --samples=200 --batch_size=16 --epochs=3 "
         "--out_dir=";
}

// The mpi launcher's temporary directories now on this machine: another
// job's may be there too, so a test compares the set before and after.
std::set<std::string> MpirunDirs() {
  std::set<std::string> dirs;
  glob_t found;
  if (glob("/tmp/ringlab-mpirun-*", GLOB_ONLYDIR, nullptr, &found) == 0) {
    dirs.insert(found.gl_pathv, found.gl_pathv + found.gl_pathc);
  }
  globfree(&found);
  return dirs;
}

class EmulatedHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = NetworkNamespacesInUse();
    const CommandResult probe =
        RunTrain("--hosts=2 --nprocs=2 --comm=gloo --epochs=1 --quiet");
    if (probe.err.find("--hosts needs") != std::string::npos ||
        probe.err.find("cannot create a network namespace") !=
            std::string::npos) {
      GTEST_SKIP() << "skipped: " << probe.err;
    }
    ASSERT_EQ(probe.status, 0) << probe.err;
  }
  void TearDown() override {
    if (!IsSkipped()) EXPECT_EQ(NetworkNamespacesInUse(), before_);
  }

  std::set<ino_t> before_;
};

// Over gloo, 4 ranks on 2 hosts through 1 Gbit/s links end bit for bit
// where 4 ranks on one host over gloo end: placement and links change where
// the bytes go, not the arithmetic (the same ring, the same order of sums).
TEST_F(EmulatedHostsTest, AGlooJobAcrossHostsEndsAsOnOneHost) {
  const std::string one = TempDir("one_host");
  ASSERT_EQ(RunTrain("--nprocs=4 --comm=gloo " + JobFlags() + one).status, 0);
  const std::string two = TempDir("two_hosts");
  const CommandResult run = RunTrain(
      "--nprocs=4 --hosts=2 --link=1gbit --comm=gloo " + JobFlags() + two);
  ASSERT_EQ(run.status, 0) << run.err;
  ExpectSameEnding(EndingOf(two), EndingOf(one));
  const std::string summary = ReadText(two + "/summary.json");
  EXPECT_NE(summary.find("\"ranks_bitwise_equal\": true"), std::string::npos);
  // What crossed each host's link, from its eth0's counters; none on one
  // host, where nothing crosses a link.
  for (const char* host : {"\"host\": 0,", "\"host\": 1,"}) {
    EXPECT_NE(summary.find(host), std::string::npos) << summary;
  }
  EXPECT_NE(summary.find("\"link_bytes_sent_per_step\": "), std::string::npos);
  EXPECT_EQ(ReadText(one + "/summary.json").find("links"), std::string::npos);
}

// Rank 0 names every rank's host: contiguous placement, ranks 0 and 1 on
// ringlab-host-0, 2 and 3 on ringlab-host-1.
TEST_F(EmulatedHostsTest, RanksArePlacedContiguously) {
  const CommandResult run =
      RunTrain("--nprocs=4 --hosts=2 --comm=gloo --epochs=1 --out_dir=" +
               TempDir("placement"));
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("4 ranks on 2 hosts (ranks 0,1 on ringlab-host-0 "),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("; ranks 2,3 on ringlab-host-1 ("), std::string::npos)
      << run.out;
}

// Host h's link_bytes_sent_per_step in a run's summary.json.
double LinkBytesSent(const std::string& out_dir, int host) {
  const std::string summary = ReadText(out_dir + "/summary.json");
  const size_t at = summary.find("\"host\": " + std::to_string(host) + ",");
  const std::string key = "\"link_bytes_sent_per_step\": ";
  const size_t value = summary.find(key, at);
  if (at == std::string::npos || value == std::string::npos) return -1;
  return std::stod(summary.substr(value + key.size()));
}

// At 2 hosts x 2 ranks a flat ring (gloo) sends 2(N-1)/N = 1.5 buffers
// through each host's link per allreduce, hier 2(H-1)/H = 1: two thirds,
// as each host's eth0 counts them (headers add about the same share to
// both). Bytes, not time: they do not depend on the machine's load. 32
// steps, so that a transient of the links' first moments (up to 0.7 MB once
// seen on one host) does not count.
TEST_F(EmulatedHostsTest, HierSendsTwoThirdsOfAFlatRingThroughEachLink) {
  const std::string flags =
      "--nprocs=4 --hosts=2 --model=784,256,10 --samples=4096 --batch_size=32 "
      "--epochs=1 --quiet --out_dir=";
  const std::string flat = TempDir("flat"), hier = TempDir("hier");
  ASSERT_EQ(RunTrain("--comm=gloo " + flags + flat).status, 0);
  const CommandResult run = RunTrain("--comm=hier " + flags + hier);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(
      ReadText(hier + "/summary.json").find("\"ranks_bitwise_equal\": true"),
      std::string::npos);
  for (int host = 0; host < 2; ++host) {
    const double ratio = LinkBytesSent(hier, host) / LinkBytesSent(flat, host);
    EXPECT_GT(ratio, 0.6) << "host " << host;
    EXPECT_LT(ratio, 0.75) << "host " << host;
  }
}

// mpirun on host 0 starts host 1's daemon through nsenter, its "ssh": one
// rank per host ends bit for bit where 2 ranks on one host over shm_ring
// end ((g0 + g1) / 2 is exact whatever the order), and the agent's
// temporary directory is gone.
TEST_F(EmulatedHostsTest, AnMpiJobAcrossHostsEndsAsOnOneHost) {
  if (std::system("command -v mpirun >/dev/null") != 0) {
    GTEST_SKIP() << "skipped: no mpirun";
  }
  const std::string one = TempDir("mpi_one_host");
  ASSERT_EQ(RunTrain("--nprocs=2 " + JobFlags() + one).status, 0);
  const std::string two = TempDir("mpi_two_hosts");
  const std::set<std::string> dirs_before = MpirunDirs();
  const CommandResult run = RunTrain(
      "--nprocs=2 --hosts=2 --link=1gbit --comm=mpi " + JobFlags() + two);
  ASSERT_EQ(run.status, 0) << run.out << run.err;
  ExpectSameEnding(EndingOf(two), EndingOf(one));
  EXPECT_NE(ReadText(two + "/summary.json").find("\"host\": 1,"),
            std::string::npos);
  for (const std::string& dir : MpirunDirs()) {
    EXPECT_EQ(dirs_before.count(dir), 1u) << dir << " is left behind";
  }
}

TEST_F(EmulatedHostsTest, SharedMemoryIsRefusedNamingTheHosts) {
  const CommandResult run =
      RunTrain("--nprocs=2 --hosts=2 --comm=shm_ring --quiet");
  EXPECT_EQ(run.status, 2) << run.err;
  EXPECT_EQ(Lines(run.err), 1) << run.err;
  EXPECT_NE(run.err.find("shm_ring needs every rank on one host, but this "
                         "job spans 2 hosts (rank 0 on ringlab-host-0"),
            std::string::npos)
      << run.err;
}

// kill -9 of the launcher a second into a long job: its ranks die with it
// (PR_SET_PDEATHSIG), and with the last of them and the launcher's
// descriptors the namespaces go, and with them the veths, the bridge and
// the qdiscs (TearDown compares the namespaces in use with those before).
TEST_F(EmulatedHostsTest, KillingTheLauncherLeavesNothing) {
  const pid_t job = StartTrain(
      "--nprocs=4 --hosts=2 --link=100mbit --comm=gloo --epochs=100000 "
      "--quiet");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_GT(NetworkNamespacesInUse().size(), before_.size());
  // StartTrain's process is `timeout`; the launcher is its one child.
  const std::string children =
      ReadText("/proc/" + std::to_string(job) + "/task/" + std::to_string(job) +
               "/children");
  ASSERT_FALSE(children.empty());
  ASSERT_EQ(kill(std::stoi(children), SIGKILL), 0);
  WaitForTrain(job);
  // The kernel reaps the ranks that PDEATHSIG killed within moments.
  for (int i = 0; i < 100 && NetworkNamespacesInUse() != before_; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ExpectNothingLeft("train --hosts=2, its launcher killed");
}

TEST_F(EmulatedHostsTest, FlagsThatCannotTakeEffectAreOneErrorLine) {
  ExpectUsageError(RunTrain("--nprocs=2 --hosts=3"),
                   "--hosts=3 must divide the 2 ranks evenly");
  ExpectUsageError(RunTrain("--hosts=0"), "--hosts must be in [1, 64]");
  ExpectUsageError(RunTrain("--link=1gbit"), "give --hosts=2 or more");
  ExpectUsageError(RunTrain("--hosts=2 --link=fast"),
                   "--link must be unlimited or a rate");
  ExpectUsageError(RunTrain("--comm=gloo --inter=mpi"),
                   "--intra and --inter choose the parts of --comm=hier");
  ExpectUsageError(RunTrain("--comm=hier --inter=shm_ring"),
                   "--inter=shm_ring cannot span hosts");
  ExpectUsageError(
      RunTrain("--hosts=2 --comm=gloo --quiet",
               "RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1"),
      "another launcher placed");
}

}  // namespace
