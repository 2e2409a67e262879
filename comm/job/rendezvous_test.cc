#include "comm/job/rendezvous.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <sstream>

#include "comm/job/job_environment.h"
#include "comm/job/launch_variables.h"
#include "comm/store/job_secret.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    using namespace launch;  // NOLINT: every variable a launcher sets
    for (const char* v :
         {kRank, kWorldSize, kLocalRank, kMasterAddr, kMasterPort, kStoreHosted,
          kStoreBind, kJobSecret, kHostId, kOmpiRank, kOmpiSize, kOmpiLocalRank,
          kSlurmProcId, kSlurmNtasks, kSlurmLocalId, kSlurmStepId,
          kSlurmNodeList, kSlurmJobId}) {
      unsetenv(v);
    }
  }
  // The message of the invalid_argument reading the environment throws, or
  // "".
  std::string Error() {
    try {
      Rendezvous::FromEnv(milliseconds(500));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  }
};

// The job of two ranks, as each would read it from torchrun's variables.
JobEnvironment Rank(int rank, const std::string& master_addr) {
  JobEnvironment job;
  job.rank = rank;
  job.world_size = 2;
  job.local_rank = rank;
  job.master_addr = master_addr;
  job.host = ThisHostIdentity();
  return job;
}

// The invalid_argument message of joining `job`, or "".
std::string JoinError(const JobEnvironment& job) {
  try {
    Rendezvous::Join(job, milliseconds(500));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Both ranks of a job, joined at once (each blocks until the other has
// reported its host). MASTER_PORT is a fixed number, as torchrun's: a port
// found free may be taken by a parallel test before rank 0 listens on it.
// Only that clash is retried, with another port, a few times.
std::pair<std::unique_ptr<Rendezvous>, std::unique_ptr<Rendezvous>> JoinBoth(
    JobEnvironment zero, JobEnvironment one, int* port = nullptr,
    milliseconds timeout = milliseconds(5000)) {
  for (int attempt = 0;; ++attempt) {
    {
      TcpStoreServer probe;
      zero.master_port = one.master_port = probe.port();
      if (port != nullptr) *port = probe.port();
    }
    auto second = std::async(std::launch::async,
                             [&] { return Rendezvous::Join(one, timeout); });
    try {
      auto first = Rendezvous::Join(zero, timeout);
      return {std::move(first), second.get()};
    } catch (const CommError& e) {
      try {
        second.get();
      } catch (const CommError&) {
      }
      const bool clash = std::string(e.what()).find("Address already in use") !=
                         std::string::npos;
      if (!clash || attempt == 4) throw;
    }
  }
}

// The address a TCP port listens on, from /proc/net/tcp ("" if none).
std::string ListeningAddress(int port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);
  while (std::getline(table, line)) {
    unsigned a = 0, p = 0, state = 0;
    if (std::sscanf(line.c_str(), " %*d: %8X:%4X %*8X:%*4X %2X", &a, &p,
                    &state) == 3 &&
        static_cast<int>(p) == port && state == 0x0A) {
      return std::to_string(a & 255) + "." + std::to_string((a >> 8) & 255) +
             "." + std::to_string((a >> 16) & 255) + "." +
             std::to_string(a >> 24);
    }
  }
  return "";
}

TEST_F(RendezvousTest, LoneProcessGetsAPrivateStore) {
  EXPECT_FALSE(InLaunchedJob());
  auto rv = Rendezvous::FromEnv(milliseconds(5000));
  const RankContext& c = rv->context();
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.job_secret.size(), kJobSecretBytes);
  ASSERT_EQ(c.peers.size(), 1u);
  EXPECT_EQ(c.peers[0].host, ThisHostIdentity());
  EXPECT_EQ(c.peers[0].pid, getpid());
  EXPECT_EQ(c.peers[0].address, "127.0.0.1");
  ASSERT_NE(c.store, nullptr);
  c.store->Set("k", "v");
  EXPECT_EQ(c.store->Get("k", milliseconds(1000)), "v");
}

// MASTER_ADDR=127.0.0.2: rank 0 listens there, where rank 1 connects (it
// used to listen on 127.0.0.1 whatever MASTER_ADDR said, and both hung).
TEST_F(RendezvousTest, RankZeroListensOnMasterAddr) {
  int port = 0;
  auto [rv0, rv1] = JoinBoth(Rank(0, "127.0.0.2"), Rank(1, "127.0.0.2"), &port);
  EXPECT_EQ(ListeningAddress(port), "127.0.0.2");
  EXPECT_EQ(rv1->context().rank, 1);
  rv0->context().store->Set("from0", "x");
  EXPECT_EQ(rv1->context().store->Get("from0", milliseconds(1000)), "x");
  ASSERT_EQ(rv0->context().peers.size(), 2u);
  ASSERT_EQ(rv1->context().peers.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(rv0->context().peers[r].Encode(),
              rv1->context().peers[r].Encode());
    EXPECT_EQ(rv0->context().peers[r].address.rfind("127.", 0), 0u);
  }
  // Without a secret given, rank 0 drew one and rank 1 read it from the
  // file rank 0 published, private to this user, removed at the end.
  EXPECT_EQ(rv0->context().job_secret.size(), kJobSecretBytes);
  EXPECT_EQ(rv0->context().job_secret, rv1->context().job_secret);
  const std::string path = LoopbackSecretPath("127.0.0.2", port);
  struct stat file {
  }, dir{};
  ASSERT_EQ(stat(path.c_str(), &file), 0);
  ASSERT_EQ(stat(path.substr(0, path.rfind('/')).c_str(), &dir), 0);
  EXPECT_EQ(file.st_mode & 0777, 0600u);
  EXPECT_EQ(dir.st_mode & 0777, 0700u);
  rv1.reset();
  rv0.reset();
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " left behind";
}

TEST_F(RendezvousTest, TheStoreListensOnEveryInterfaceWhenTold) {
  const std::string secret = GenerateJobSecret();
  JobEnvironment zero = Rank(0, "127.0.0.1"), one = Rank(1, "127.0.0.1");
  zero.secret = one.secret = secret;
  zero.store_bind = "0.0.0.0";
  auto [rv0, rv1] = JoinBoth(zero, one);
  EXPECT_EQ(rv1->context().job_secret, secret);
  rv1->context().store->Set("k", "v");
  EXPECT_EQ(rv0->context().store->Get("k", milliseconds(1000)), "v");
}

TEST_F(RendezvousTest, ABadOrMissingSecretRefusesAJobBeyondLoopback) {
  // A store on every interface, or a master elsewhere, needs the secret:
  // refused before anything listens or connects.
  JobEnvironment zero = Rank(0, "127.0.0.1");
  zero.master_port = 1;
  zero.store_bind = "0.0.0.0";
  EXPECT_NE(JoinError(zero).find("set RINGLAB_JOB_SECRET"), std::string::npos)
      << JoinError(zero);
  JobEnvironment one = Rank(1, "10.0.0.1");
  one.master_port = 1;
  EXPECT_NE(JoinError(one).find("MASTER_ADDR=10.0.0.1, beyond loopback"),
            std::string::npos)
      << JoinError(one);
  zero.store_bind = "all";
  EXPECT_NE(JoinError(zero).find("not an IPv4 address"), std::string::npos);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RINGLAB_JOB_SECRET", "12345", 1);
  EXPECT_NE(Error().find("RINGLAB_JOB_SECRET must be 32 to 128 hex digits"),
            std::string::npos)
      << Error();
}

// 192.0.2.1 (TEST-NET-1) is no address of this host: rank 0 says so instead
// of listening on loopback and waiting for peers that cannot reach it.
TEST_F(RendezvousTest, RankZeroAwayFromMasterAddrRefusesToStart) {
  JobEnvironment zero = Rank(0, "192.0.2.1");
  zero.master_port = 29500;
  zero.secret = GenerateJobSecret();
  const std::string error = JoinError(zero);
  EXPECT_NE(error.find("192.0.2.1, which is not an address of this host"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("--store_bind=0.0.0.0"), std::string::npos) << error;
}

TEST_F(RendezvousTest, RanksWithAnotherSecretAreNotAdmitted) {
  JobEnvironment zero = Rank(0, "127.0.0.1"), one = Rank(1, "127.0.0.1");
  zero.secret = GenerateJobSecret();
  one.secret = GenerateJobSecret();
  try {
    JoinBoth(zero, one, nullptr, milliseconds(1000));
    ADD_FAILURE() << "joined with different secrets";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not join"),
              std::string::npos)
        << e.what();
  }
}

// Every rank reports its host (here, as two hosts would): the front refuses
// a one-host backend from it (communicator_test), the trainer names them.
TEST_F(RendezvousTest, EveryRankLearnsEveryRanksHost) {
  JobEnvironment zero = Rank(0, "127.0.0.1"), one = Rank(1, "127.0.0.1");
  zero.host = "node-a";
  one.host = "node-b";
  auto [rv0, rv1] = JoinBoth(zero, one);
  for (const Rendezvous* rv : {rv0.get(), rv1.get()}) {
    ASSERT_EQ(rv->context().peers.size(), 2u);
    EXPECT_EQ(rv->context().peers[0].host, "node-a");
    EXPECT_EQ(rv->context().peers[1].host, "node-b");
  }
  size_t hosts = 0;
  EXPECT_EQ(DescribeHosts(rv0->context().peers, &hosts),
            "rank 0 on node-a; rank 1 on node-b");
  EXPECT_EQ(hosts, 2u);
}

TEST_F(RendezvousTest, HostIdentityNamesHostBootAndPidNamespace) {
  const std::string id = ThisHostIdentity();
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  EXPECT_EQ(id.rfind(std::string(name) + " (boot ", 0), 0u) << id;
  EXPECT_NE(id.find(", pid namespace "), std::string::npos) << id;
  setenv("RINGLAB_HOST_ID", "rack7-node3", 1);
  EXPECT_EQ(ThisHostIdentity(), "rack7-node3");
}

TEST_F(RendezvousTest, ARankThatNeverComesIsNamedAtTheDeadline) {
  const std::string secret = GenerateJobSecret();
  JobEnvironment zero = Rank(0, "127.0.0.1");
  zero.secret = secret;
  for (int attempt = 0;; ++attempt) {
    {
      TcpStoreServer probe;
      zero.master_port = probe.port();
    }
    try {
      Rendezvous::Join(zero, milliseconds(300));
      ADD_FAILURE() << "joined alone";
      return;
    } catch (const CommError& e) {
      const std::string what = e.what();
      if (what.find("Address already in use") != std::string::npos &&
          attempt < 4) {
        continue;
      }
      EXPECT_NE(what.find("rank 1 did not join the job's store within 300 ms"),
                std::string::npos)
          << what;
      return;
    }
  }
}

TEST_F(RendezvousTest, MpirunVariablesWithoutAStore) {
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  auto rv = Rendezvous::FromEnv(milliseconds(500));
  EXPECT_EQ(rv->context().rank, 1);
  EXPECT_EQ(rv->context().world_size, 4);
  EXPECT_EQ(rv->context().store, nullptr);
  EXPECT_TRUE(rv->context().peers.empty());
}

// srun's tasks: rank, size and local rank from Slurm; without MASTER_ADDR
// and MASTER_PORT, rank 0's node (the node list's first) and 15000 + the
// job id's last four digits, as Lightning has it. torchrun's variables win
// over Slurm's; a batch script outside a job step is no rank.
TEST_F(RendezvousTest, SrunTasksTakeSlurmsVariables) {
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_JOB_NODELIST", "gpu-[007-009,012],cpu1", 1);
  setenv("SLURM_JOB_ID", "4242123", 1);
  EXPECT_FALSE(InLaunchedJob());  // a batch script: no job step yet
  setenv("SLURM_STEP_ID", "0", 1);
  EXPECT_TRUE(InLaunchedJob());
  JobEnvironment job = JobEnvironment::Read();
  EXPECT_EQ(job.rank, 3);
  EXPECT_EQ(job.world_size, 8);
  EXPECT_EQ(job.local_rank, 1);
  EXPECT_EQ(job.master_addr, "gpu-007");
  EXPECT_EQ(job.master_port, 17123);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "29500", 1);
  job = JobEnvironment::Read();
  EXPECT_EQ(job.master_addr, "10.1.2.3");
  EXPECT_EQ(job.master_port, 29500);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  job = JobEnvironment::Read();
  EXPECT_EQ(job.rank, 0);
  EXPECT_EQ(job.world_size, 2);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("MASTER_ADDR");
  unsetenv("SLURM_JOB_NODELIST");
  EXPECT_NE(Error().find("SLURM_JOB_NODELIST must name rank 0's node"),
            std::string::npos)
      << Error();
}

TEST_F(RendezvousTest, FirstSlurmHostOfANodeList) {
  EXPECT_EQ(FirstSlurmHost("node1"), "node1");
  EXPECT_EQ(FirstSlurmHost("node1,node2"), "node1");
  EXPECT_EQ(FirstSlurmHost("gpu[003-005,009],cpu1"), "gpu003");
  EXPECT_EQ(FirstSlurmHost("gpu[9,3]"), "gpu9");
  EXPECT_EQ(FirstSlurmHost("rack[1-2]-n"), "rack1-n");
  EXPECT_EQ(FirstSlurmHost(""), "");
}

TEST_F(RendezvousTest, MalformedVariablesAreNamed) {
  setenv("RANK", "0", 1);
  EXPECT_NE(Error().find("RANK and WORLD_SIZE"), std::string::npos);
  setenv("WORLD_SIZE", "two", 1);
  EXPECT_NE(Error().find("WORLD_SIZE='two'"), std::string::npos);
  setenv("WORLD_SIZE", "0", 1);
  EXPECT_NE(Error().find("WORLD_SIZE='0'"), std::string::npos);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "2", 1);
  EXPECT_NE(Error().find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  setenv("RANK", "-1", 1);
  EXPECT_NE(Error().find("RANK='-1'"), std::string::npos);
  setenv("RANK", "1", 1);
  setenv("MASTER_PORT", "99999", 1);
  EXPECT_NE(Error().find("MASTER_PORT='99999'"), std::string::npos);
  setenv("MASTER_PORT", "12x", 1);
  EXPECT_NE(Error().find("MASTER_PORT='12x'"), std::string::npos);
  // A label of 64 characters is no DNS name: the resolver refuses it
  // without asking any server.
  const std::string bad_name(64, 'x');
  setenv("MASTER_PORT", "29500", 1);
  setenv("MASTER_ADDR", bad_name.c_str(), 1);
  EXPECT_NE(Error().find("MASTER_ADDR=" + bad_name + ": cannot resolve"),
            std::string::npos)
      << Error();
}

// NCCL and Open MPI open data sockets of their own: confined to the job's
// interface (loopback for a job on 127.0.0.1), unless the user chose one.
TEST(JobEnvironmentTest, LibrariesDataSocketsStayOnTheJobsInterface) {
  EXPECT_EQ(InterfaceWithAddress("127.0.0.1"), "lo");
  EXPECT_EQ(InterfaceWithAddress("192.0.2.1"), "");  // TEST-NET-1: not ours
  EXPECT_EQ(InterfaceWithAddress("not an address"), "");
  unsetenv(launch::kNcclSocketIfname);
  EXPECT_EQ(KeepDataSocketsOnJobInterface("127.0.0.1",
                                          launch::kNcclSocketIfname, "="),
            "=lo");
  EXPECT_STREQ(std::getenv(launch::kNcclSocketIfname), "=lo");
  setenv(launch::kNcclSocketIfname, "ib0", 1);  // the user's choice stands
  EXPECT_EQ(KeepDataSocketsOnJobInterface("127.0.0.1",
                                          launch::kNcclSocketIfname, "="),
            "ib0");
  EXPECT_STREQ(std::getenv(launch::kNcclSocketIfname), "ib0");
  unsetenv(launch::kOmpiBtlTcpIfInclude);
  EXPECT_EQ(
      KeepDataSocketsOnJobInterface("192.0.2.1", launch::kOmpiBtlTcpIfInclude),
      "");
  EXPECT_EQ(std::getenv(launch::kOmpiBtlTcpIfInclude), nullptr);
  unsetenv(launch::kNcclSocketIfname);
}

}  // namespace
}  // namespace ringlab::comm
