// The conformance suite (comm/testing/conformance.h) over the mpi backend,
// whose ranks are mpirun's processes: `--list` prints the case names,
// `--case=NAME` runs one case on every rank. conformance_mpi_test.sh runs
// each case under mpirun at 2 and 3 ranks. With `--hosts=H --nprocs=N` it is
// the job's launcher instead: it makes H emulated hosts (comm/cluster) and
// runs the case as N ranks on them under mpirun (comm/job/mpirun_on_hosts.h),
// G = N / H per host, so that the ranks' MPI crosses real links
// (conformance_mpi_hosts_test). The fault cases are not here: a dead rank
// ends an MPI job (mpirun names it), there are no survivors.
#include <gflags/gflags.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "cli/flags.h"
#include "comm/cluster/cluster_flags.h"
#include "comm/cluster/emulated_cluster.h"
#include "comm/cluster/job_cluster.h"
#include "comm/cluster/namespaces_in_use.h"
#include "comm/communicator.h"
#include "comm/job/mpirun_on_hosts.h"
#include "comm/job/rendezvous.h"
#include "comm/testing/conformance.h"
#include "comm/tuning_env.h"

DEFINE_bool(list, false, "print the case names (and what each must name)");
DEFINE_string(case, "", "run this case on every rank");
DEFINE_int32(nprocs, 0,
             "with --hosts: launch the case as this many ranks on the "
             "emulated hosts, under mpirun");

namespace ringlab::comm::testing {
namespace {

int Run(const std::string& name, const BackendTuning& tuning) {
  for (const ConformanceCase& c : AllCases()) {
    if (c.name != name) continue;
    auto rendezvous = Rendezvous::FromEnv(std::chrono::seconds(30));
    CommOptions options;
    options.timeout = std::chrono::seconds(30);
    options.join_timeout = std::chrono::seconds(30);
    options.tuning = tuning;
    auto comm = CreateCommunicator("mpi", rendezvous->context(), options);
    if (const std::string why = SkipReason(c, TraitsOf("mpi")); !why.empty()) {
      std::printf("conformance_mpi: %s: %s: skipped\n", name.c_str(),
                  why.c_str());
      return 0;
    }
    if (comm->world_size() < c.min_world) {
      std::printf("conformance_mpi: %s needs %d ranks: skipped\n", name.c_str(),
                  c.min_world);
      return 0;
    }
    // Capture what the mismatch case prints: MPI checks every call on every
    // rank, so every rank's error must name both values.
    std::fflush(stdout);
    c.run(*comm, TraitsOf("mpi"));
    comm->Barrier();
    std::printf("conformance_mpi: %s rank %d of %d OK\n", name.c_str(),
                comm->rank(), comm->world_size());
    return 0;
  }
  std::fprintf(stderr, "error: no conformance case '%s'\n", name.c_str());
  return 2;
}

// What a launcher exits with when the hosts cannot be made here (not root,
// no user namespaces, no iproute2): the test skips, saying why.
constexpr int kNoHosts = 77;

// The inodes of the hosts' network namespaces.
std::set<ino_t> NamespacesOf(const cluster::EmulatedCluster& hosts) {
  std::set<ino_t> inodes;
  for (int h = 0; h < hosts.hosts(); ++h) {
    struct stat info;
    if (stat(hosts.NetworkPath(h).c_str(), &info) == 0) {
      inodes.insert(info.st_ino);
    }
  }
  return inodes;
}

// How many of `made` some process still holds, after a grace of up to 5 s
// for mpirun's daemons and ranks to be reaped.
int StillHeld(const std::set<ino_t>& made) {
  int held = 0;
  for (int i = 0; i < 100; ++i) {
    held = 0;
    for (ino_t inode : cluster::NetworkNamespacesInUse()) {
      held += static_cast<int>(made.count(inode));
    }
    if (held == 0) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return held;
}

// The launcher: the case as FLAGS_nprocs ranks on the emulated hosts, each
// rank this binary with only --case (so it runs the case, not a launcher).
// Fails, whatever mpirun said, when the job leaves a host's namespace held
// (a daemon or a rank outliving it) once the cluster is gone.
int LaunchOnHosts(const char* argv0) {
  std::unique_ptr<cluster::EmulatedCluster> hosts;
  try {
    // While this process has one thread (GainNetworkAdmin).
    hosts = cluster::CreateJobCluster(FLAGS_nprocs,
                                      cluster::ClusterRequestFromFlags());
  } catch (const std::invalid_argument& e) {
    cli::ExitWithUsageError(e.what());
  } catch (const cluster::ClusterError& e) {
    std::printf("conformance_mpi: no emulated hosts here: %s\n", e.what());
    return kNoHosts;
  }
  if (hosts == nullptr) cli::ExitWithUsageError("--nprocs needs --hosts=2+");
  const std::set<ino_t> made = NamespacesOf(*hosts);
  if (static_cast<int>(made.size()) != hosts->hosts()) {
    std::printf("conformance_mpi: FAILED: cannot see the hosts' namespaces\n");
    return 1;
  }
  const int status = LaunchMpirunOnHosts(
      FLAGS_nprocs, {argv0, "--case=" + FLAGS_case}, *hosts);
  hosts.reset();
  if (const int held = StillHeld(made)) {
    std::printf(
        "conformance_mpi: FAILED: %d network namespace(s) of the "
        "job's hosts still held after it\n",
        held);
    return 1;
  }
  return status;
}

}  // namespace
}  // namespace ringlab::comm::testing

int main(int argc, char** argv) {
  using ringlab::comm::testing::AllCases;
  ringlab::cli::ParseFlagsOrExit(
      argc, argv,
      "the communicator conformance suite over mpi, one case per run, under "
      "mpirun: --list | --case=NAME [--hosts=H --nprocs=N]",
      {"comm/"});
  if (FLAGS_list == !FLAGS_case.empty()) {
    ringlab::cli::ExitWithUsageError("give exactly one of --list and --case");
  }
  if (FLAGS_list) {
    for (const auto& c : AllCases()) {
      std::printf("%s", c.name.c_str());
      for (const std::string& s : c.must_name) std::printf(" %s", s.c_str());
      std::printf("\n");
    }
    return 0;
  }
  if (FLAGS_nprocs != 0 || ringlab::comm::cluster::ClusterRequested()) {
    try {
      return ringlab::comm::testing::LaunchOnHosts(argv[0]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  ringlab::comm::BackendTuning tuning;  // RINGLAB_MPI_CHECK_CALLS and co.
  try {
    tuning = ringlab::comm::TuningFromEnvironment();
  } catch (const std::invalid_argument& e) {
    ringlab::cli::ExitWithUsageError(e.what());
  }
  try {
    return ringlab::comm::testing::Run(FLAGS_case, tuning);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conformance_mpi: FAILED: %s\n", e.what());
    return 1;
  }
}
