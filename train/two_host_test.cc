// A job on two hosts, for real, on one machine: two network namespaces, each
// with its own hostname, joined by a veth pair with addresses of their own
// (10.77.0.1 and 10.77.0.2, which exist only inside these namespaces, so
// nothing can leave the machine). Rank 0's store listens on its host's
// address and the other host's rank reaches it over the veth; shm_ring
// refuses the job at start, naming both hosts; a Gloo job spans them, each
// rank on its own address; an MPI job spans them, with mpirun starting the
// other host's daemon through nsenter where a cluster would use ssh. Needs root
// (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2's ip; skips, saying why, without
// them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "train/cli_testing.h"

namespace {

using namespace ringlab::train::testing;  // NOLINT: the CLI test helpers

constexpr const char* kHostNames[2] = {"ringlab-host-a", "ringlab-host-b"};
constexpr const char* kAddresses[2] = {"10.77.0.1", "10.77.0.2"};

// Two namespace pairs (network, hostname), each held by a child process
// that lives until this object goes: then the namespaces, the veth pair and
// everything listening in them vanish.
class TwoHosts {
 public:
  ~TwoHosts() {
    for (int h = 0; h < 2; ++h) {
      if (hold_[h] >= 0) close(hold_[h]);  // the holder reads EOF and exits
    }
    for (int h = 0; h < 2; ++h) {
      if (pid_[h] > 0) waitpid(pid_[h], nullptr, 0);
    }
  }

  // "" when both hosts are up and linked, else why not.
  std::string Create() {
    if (geteuid() != 0) return "not root: cannot create network namespaces";
    if (std::system("command -v ip >/dev/null && command -v nsenter "
                    ">/dev/null") != 0) {
      return "iproute2's ip or util-linux's nsenter is missing";
    }
    for (int h = 0; h < 2; ++h) {
      const std::string why = StartHolder(h);
      if (!why.empty()) return why;
    }
    const std::string a = std::to_string(pid_[0]), b = std::to_string(pid_[1]);
    if (std::system(("ip link add name rl0 netns " + a +
                     " type veth peer name rl1 netns " + b)
                        .c_str()) != 0) {
      return "cannot create a veth pair between the namespaces";
    }
    for (int h = 0; h < 2; ++h) {
      const std::string dev = "rl" + std::to_string(h);
      const std::string setup = On(h) + "sh -c 'ip addr add " + kAddresses[h] +
                                "/24 dev " + dev + " && ip link set " + dev +
                                " up && ip link set lo up'";
      if (std::system(setup.c_str()) != 0) return "cannot configure " + dev;
    }
    return "";
  }

  // Prefix that runs a command on host h.
  std::string On(int h) const {
    const std::string ns = "/proc/" + std::to_string(pid_[h]) + "/ns/";
    return "nsenter --net=" + ns + "net --uts=" + ns + "uts -- ";
  }
  pid_t pid(int h) const { return pid_[h]; }
  std::vector<pid_t> holders() const { return {pid_[0], pid_[1]}; }

 private:
  std::string StartHolder(int h) {
    int ready[2], hold[2];
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(hold, O_CLOEXEC) != 0) {
      return "pipe failed";
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      close(hold[1]);
      if (h == 1) close(hold_[0]);  // host a's holder must see its EOF
      int err = 0;
      if (unshare(CLONE_NEWNET | CLONE_NEWUTS) != 0 ||
          sethostname(kHostNames[h], std::strlen(kHostNames[h])) != 0) {
        err = errno;
      }
      (void)!write(ready[1], &err, sizeof(err));
      char c;
      while (read(hold[0], &c, 1) > 0) {
      }
      _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    pid_[h] = pid;
    hold_[h] = hold[1];
    int err = -1;
    const bool got = read(ready[0], &err, sizeof(err)) == sizeof(err);
    close(ready[0]);
    if (!got || err != 0) {
      return std::string("cannot create network namespaces: ") +
             (got ? std::strerror(err) : "the holder died");
    }
    return "";
  }

  pid_t pid_[2] = {-1, -1};
  int hold_[2] = {-1, -1};
};

std::string Absolute(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? resolved : path;
}

class TwoHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = hosts_.Create();
    if (!why.empty()) GTEST_SKIP() << "skipped: " << why;
  }

  // Both ranks by hand, torchrun-style, rank r on host r, rank 0's store on
  // 10.77.0.1:29500 (a port of its own namespace: nothing else is there).
  std::vector<CommandResult> RunPair(const std::string& env,
                                     const std::string& args) {
    const std::string dir = TempDir("pair");
    std::string command;
    for (int r = 0; r < 2; ++r) {
      const std::string n = std::to_string(r);
      command += hosts_.On(r) + "env RANK=" + n +
                 " WORLD_SIZE=2 LOCAL_RANK=0 "
                 "MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 " +
                 env + " timeout -k 5 60 " + Absolute(kTrain) + " " + args +
                 " >" + dir + "/out" + n + " 2>" + dir + "/err" + n + " & pid" +
                 n + "=$!; ";
    }
    command += "wait $pid0; echo $? >" + dir +
               "/status0; wait $pid1; echo $? >" + dir + "/status1";
    EXPECT_EQ(std::system(("(" + command + ") </dev/null").c_str()), 0);
    ExpectNothingLeft(command, hosts_.holders());
    std::vector<CommandResult> ranks(2);
    for (int r = 0; r < 2; ++r) {
      const std::string n = std::to_string(r);
      ranks[r].status = std::atoi(ReadText(dir + "/status" + n).c_str());
      ranks[r].out = ReadText(dir + "/out" + n);
      ranks[r].err = ReadText(dir + "/err" + n);
    }
    return ranks;
  }

  // The flags of the seed run, its outputs going to the directory appended.
  static std::string ReferenceFlags() {
    return "--timeout=30 --data_dir=" + Absolute(kReference) +
           " --init_dir=" + Absolute(kReference) + "/init --out_dir=";
  }

  // The same job on one host over shm_ring, for comparing with.
  std::string OneHostRun() {
    const std::string dir = TempDir("one_host");
    EXPECT_EQ(
        RunTrain("--quiet " + ReferenceFlags() + dir, "", 60, hosts_.holders())
            .status,
        0);
    return dir;
  }

  // A two-host run that ended bitwise where the one-host run did (with 2
  // ranks every backend averages gradients as (g0 + g1) / 2, exact whatever
  // the order), its rank 0 having named both hosts in `out`.
  static void ExpectSameAsOneHost(const std::string& dir,
                                  const std::string& one_host,
                                  const std::string& out) {
    EXPECT_NE(out.find("ringlab train: 2 ranks on 2 hosts (rank 0 on "
                       "ringlab-host-a (boot "),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("; rank 1 on ringlab-host-b (boot "), std::string::npos)
        << out;
    EXPECT_NE(
        ReadText(dir + "/summary.json").find("\"ranks_bitwise_equal\": true"),
        std::string::npos);
    EXPECT_EQ(Losses(dir), Losses(one_host));
    for (const std::string& tensor : kTensors) {
      EXPECT_EQ(ReadText(dir + "/final/" + tensor + ".npy"),
                ReadText(one_host + "/final/" + tensor + ".npy"))
          << tensor;
    }
  }

  TwoHosts hosts_;
};

const std::string kSecret =
    "RINGLAB_JOB_SECRET=0123456789abcdef0123456789abcdef";

// The store crosses the veth (each rank learns the other's host through
// it), and shm_ring refuses the job at start on both hosts, naming them;
// the same with rank 0's store on every interface (--store_bind=0.0.0.0).
TEST_F(TwoHostTest, SharedMemoryRefusesTheJobNamingBothHosts) {
  for (const std::string bind : {"", " --store_bind=0.0.0.0"}) {
    SCOPED_TRACE(bind);
    const auto ranks = RunPair(kSecret, "--quiet --timeout=20" + bind);
    for (const CommandResult& rank : ranks) {
      EXPECT_EQ(rank.status, 2) << rank.err;
      EXPECT_EQ(rank.err.rfind("error: shm_ring needs every rank on one host, "
                               "but this job spans 2 hosts (rank 0 on "
                               "ringlab-host-a (boot ",
                               0),
                0u)
          << rank.err;
      EXPECT_NE(rank.err.find("; rank 1 on ringlab-host-b (boot "),
                std::string::npos)
          << rank.err;
      EXPECT_EQ(Lines(rank.err), 1) << rank.err;
    }
  }
}

// Beyond loopback, neither rank starts without the job's secret.
TEST_F(TwoHostTest, WithoutTheSecretNeitherRankStarts) {
  const auto ranks = RunPair("", "--quiet --timeout=20");
  EXPECT_EQ(ranks[0].status, 2);
  EXPECT_NE(ranks[0].err.find("the store would listen on 10.77.0.1, beyond "
                              "loopback: set RINGLAB_JOB_SECRET"),
            std::string::npos)
      << ranks[0].err;
  EXPECT_EQ(ranks[1].status, 2);
  EXPECT_NE(ranks[1].err.find("MASTER_ADDR=10.77.0.1, beyond loopback"),
            std::string::npos)
      << ranks[1].err;
}

// A real two-host job over Gloo, ranks started by hand as torchrun would:
// each rank's Gloo pairs listen on the address it reached rank 0's store
// from (10.77.0.1 and 10.77.0.2), the ranks connect across the veth and
// train, ending bitwise where the same job on one host over shm_ring ends.
TEST_F(TwoHostTest, AGlooJobSpansBothHosts) {
  const std::string one_host = OneHostRun();
  const std::string dir = TempDir("gloo_two_hosts");
  const auto ranks = RunPair(kSecret, "--comm=gloo " + ReferenceFlags() + dir);
  for (const CommandResult& rank : ranks) {
    ASSERT_EQ(rank.status, 0) << rank.out << rank.err;
  }
  ExpectSameAsOneHost(dir, one_host, ranks[0].out);
}

// A real two-host job: mpirun on host a starts rank 1's daemon on host b
// through nsenter (its "ssh"); the ranks meet in rank 0's store over the
// veth and train over MPI's TCP transport, ending bitwise where the same
// job on one host over shm_ring ends (with 2 ranks both average gradients
// as (g0 + g1) / 2, exact whatever the order).
TEST_F(TwoHostTest, AnMpiJobSpansBothHosts) {
  if (std::system("command -v mpirun >/dev/null") != 0) {
    GTEST_SKIP() << "skipped: no mpirun";
  }
  const std::string flags = ReferenceFlags();
  const std::string one_host = OneHostRun();
  const std::string dir = TempDir("mpi_two_hosts");
  const std::string agent = dir + "/nsenter_rsh";
  std::ofstream(agent) << "#!/bin/sh\n# mpirun's \"ssh\": HOST COMMAND...\n"
                          "host=$1; shift\n"
                          "case $host in 10.77.0.2) ns=/proc/"
                       << hosts_.pid(1) << "/ns ;; *) ns=/proc/"
                       << hosts_.pid(0)
                       << "/ns ;; esac\n"
                          "exec nsenter --net=$ns/net --uts=$ns/uts -- sh -c "
                          "\"$*\"\n";
  ASSERT_EQ(std::system(("chmod +x " + agent).c_str()), 0);
  const std::string out = dir + "/run";
  // Under --config=asan: OpenMPI's own allocations are reported as leaks at
  // exit (as in train_mpi_test.sh); everything else of ASan stays on.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string asan_options = std::string(asan != nullptr ? asan : "") +
                                   (asan ? ":" : "") + "detect_leaks=0";
  const std::string command =
      hosts_.On(0) + "env ASAN_OPTIONS=" + asan_options +
      " MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 " + kSecret + " TMPDIR=" + dir +
      " OMPI_MCA_btl_vader_backing_directory=" + dir +
      " timeout -k 5 120 mpirun --allow-run-as-root -np 2 --host "
      "10.77.0.1:1,10.77.0.2:1 --mca plm_rsh_agent " +
      agent +
      " --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca "
      "oob_tcp_if_include 10.77.0.0/24 -x ASAN_OPTIONS -x MASTER_ADDR -x "
      "MASTER_PORT -x RINGLAB_JOB_SECRET " +
      Absolute(kTrain) + " --comm=mpi " + flags + out + " >" + dir +
      "/stdout 2>" + dir + "/stderr </dev/null";
  const int status = std::system(command.c_str());
  ExpectNothingLeft(command, hosts_.holders());
  const std::string stdout_text = ReadText(dir + "/stdout");
  ASSERT_EQ(status, 0) << stdout_text << ReadText(dir + "/stderr");
  std::printf("%s", stdout_text.c_str());
  ExpectSameAsOneHost(out, one_host, stdout_text);
}

}  // namespace
