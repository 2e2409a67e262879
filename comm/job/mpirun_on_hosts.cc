#include "comm/job/mpirun_on_hosts.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/cluster/job_cluster.h"
#include "comm/job/launch.h"
#include "comm/job/launch_variables.h"
#include "comm/store/job_secret.h"
#include "comm/store/tcp_store.h"

namespace ringlab::comm {
namespace {

using cluster::EmulatedCluster;

// The cores this process may run on: every emulated host shares them.
int UsableCores() {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) return 1;
  return std::max(1, CPU_COUNT(&cpus));
}

// Whether the user chose Open MPI's collective algorithms: then ringlab's
// rules stay out of the way.
bool UserTunesCollectives() {
  for (const char* name : {launch::kOmpiCollTunedUseDynamicRules,
                           launch::kOmpiCollTunedDynamicRulesFilename,
                           launch::kOmpiCollTunedAllreduceAlgorithm}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

// mpirun's "ssh": `agent HOST COMMAND...` runs COMMAND on the emulated host
// whose address is HOST, inside its namespaces, with its index for the
// ranks there.
std::string AgentScript(const EmulatedCluster& hosts) {
  std::string script =
      "#!/bin/sh\n# mpirun's rsh agent for ringlab's emulated hosts\n"
      "host=$1; shift\ncase $host in\n";
  for (int h = 0; h < hosts.hosts(); ++h) {
    script += "  " + EmulatedCluster::Address(h) +
              ") net=" + hosts.NetworkPath(h) + " uts=" + hosts.UtsPath(h) +
              " index=" + std::to_string(h) + " ;;\n";
  }
  script +=
      "  *) echo \"unknown emulated host $host\" >&2; exit 1 ;;\nesac\n"
      "export " +
      std::string(launch::kEmulatedHost) +
      "=$index\n"
      "exec nsenter --net=$net --uts=$uts -- sh -c \"$*\"\n";
  return script;
}

std::string ThisBinary() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(path, static_cast<size_t>(n));
}

// mpirun's command line: by slot, G per host, unbound, TCP and the out-of-band
// channel on the hosts' subnet, Open MPI tuned for the hosts (allreduce rules
// at `rules`), the store's variables passed on.
std::vector<std::string> MpirunArgv(int nprocs, const std::string& agent,
                                    const std::string& rules,
                                    const std::vector<std::string>& argv,
                                    int hosts) {
  std::string slots;
  for (int h = 0; h < hosts; ++h) {
    slots += (h ? "," : "") + EmulatedCluster::Address(h) + ":" +
             std::to_string(nprocs / hosts);
  }
  std::vector<std::string> out = {
      "mpirun", "--allow-run-as-root", "-np", std::to_string(nprocs), "--host",
      slots, "--map-by", "slot",
      // Unbound: the kernel's network processing
      // needs the cores too (bound, a 64-byte
      // allreduce between 2 hosts took 8 ms).
      "--bind-to", "none", "--mca", "plm_rsh_agent", agent, "--mca", "btl",
      "self,vader,tcp", "--mca", "btl_tcp_if_include",
      EmulatedCluster::Subnet(), "--mca", "oob_tcp_if_include",
      EmulatedCluster::Subnet()};
  const std::vector<std::string> tuning =
      OpenMpiTuning(nprocs, UsableCores(), rules);
  out.insert(out.end(), tuning.begin(), tuning.end());
  for (const char* name : {launch::kMasterAddr, launch::kMasterPort,
                           launch::kJobSecret, launch::kStoreHosted}) {
    out.insert(out.end(), {"-x", name});
  }
  out.push_back(ThisBinary());
  out.insert(out.end(), argv.begin() + 1, argv.end());
  return out;
}

// Starts mpirun on host 0 with `env` added; waits for it.
int RunOnHostZero(const EmulatedCluster& hosts, std::vector<std::string> args,
                  const std::vector<std::string>& env) {
  std::vector<char*> pointers;
  for (std::string& a : args) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent || !hosts.Enter(0)) _exit(127);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    execvp(pointers[0], pointers.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Removes mpirun's private directory. A remote host's orted may still be
// deleting its session files in it when mpirun returns, so a walk can meet
// a file that vanished; it retries until the tree is gone, for a bounded
// time, and never throws.
void RemoveTemporaryTree(const std::string& dir) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::error_code error;
    std::filesystem::remove_all(dir, error);
    if (!std::filesystem::exists(dir, error)) return;
    usleep(10000);
  }
}

}  // namespace

// Two ranks take recursive doubling at every size: one exchange of the whole
// buffer, no step waiting on another. Across a 1 Gbit/s link Open MPI 4.1's
// own choice reached 0.63-0.86 of the link at 4 and 16 MiB, recursive
// doubling 0.88-0.92 (bench/results/links/2026-12-03-*). From 3 ranks,
// algorithm 0 leaves the choice to Open MPI.
std::string OpenMpiAllreduceRules() {
  return "1\n"               // one collective:
         "2\n"               // allreduce,
         "2\n"               // with rules for two communicator sizes:
         "2\n1\n0 3 0 0\n"   // from 2 ranks, one message size: 3 from 0 B;
         "3\n1\n0 0 0 0\n";  // from 3 ranks: 0 (Open MPI's choice) from 0 B
}

std::vector<std::string> OpenMpiTuning(int nprocs, int cores,
                                       const std::string& rules) {
  std::vector<std::string> out;
  if (nprocs > cores) {
    out.insert(out.end(), {"--mca", "mpi_yield_when_idle", "1"});
  }
  if (!UserTunesCollectives()) {
    out.insert(out.end(),
               {"--mca", "coll_tuned_use_dynamic_rules", "1", "--mca",
                "coll_tuned_dynamic_rules_filename", rules});
  }
  return out;
}

int LaunchMpirunOnHosts(int nprocs, const std::vector<std::string>& argv,
                        const EmulatedCluster& hosts) {
  for (const char* tool : {"mpirun", "nsenter"}) {
    if (std::system(
            ("command -v " + std::string(tool) + " >/dev/null").c_str()) != 0) {
      throw std::runtime_error(std::string("--hosts needs ") + tool +
                               " for mpi's ranks, and it is not installed");
    }
  }
  const std::unique_ptr<TcpStoreServer> server = StartLauncherStore(&hosts);
  char dir_template[] = "/tmp/ringlab-mpirun-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    throw std::runtime_error("cannot make a temporary directory");
  }
  const std::string dir = dir_template, agent = dir + "/rsh_agent",
                    rules = dir + "/allreduce_rules.conf";
  int status = 1;
  try {
    std::ofstream(agent) << AgentScript(hosts);
    chmod(agent.c_str(), 0700);
    std::ofstream(rules) << OpenMpiAllreduceRules();
    // Host 0's ranks are mpirun's own children: its index, and its shared
    // memory files in the private directory.
    status = RunOnHostZero(
        hosts, MpirunArgv(nprocs, agent, rules, argv, hosts.hosts()),
        {std::string(launch::kMasterAddr) + "=" + LauncherStoreAddress(&hosts),
         std::string(launch::kMasterPort) + "=" +
             std::to_string(server->port()),
         std::string(launch::kJobSecret) + "=" +
             JobSecretToHex(server->secret()),
         std::string(launch::kStoreHosted) + "=1",
         std::string(launch::kEmulatedHost) + "=0", "TMPDIR=" + dir,
         "OMPI_MCA_btl_vader_backing_directory=" + dir});
  } catch (...) {
    RemoveTemporaryTree(dir);
    throw;
  }
  RemoveTemporaryTree(dir);
  return status;
}

}  // namespace ringlab::comm
