#include "comm/job/job_environment.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "comm/job/launch_variables.h"
#include "comm/process.h"
#include "comm/store/job_secret.h"

namespace ringlab::comm {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// The integer in variable `name`, or fallback when unset.
long EnvInt(const char* name, long fallback, long lo, long hi) {
  const char* v = Env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < lo || n > hi) {
    throw std::invalid_argument(
        std::string(name) + "='" + v + "': expected an integer in [" +
        std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return n;
}

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool InSlurmStep() {
  return Env(launch::kSlurmProcId) != nullptr &&
         Env(launch::kSlurmNtasks) != nullptr &&
         Env(launch::kSlurmStepId) != nullptr;
}

// Rank 0's address and the store's port under srun, where the job did not
// set them: the first node of the allocation, 15000 + the job id's last
// four digits (Lightning's SLURMEnvironment).
void SlurmDefaults(JobEnvironment* job) {
  if (Env(launch::kMasterAddr) == nullptr) {
    const char* nodes = Env(launch::kSlurmNodeList);
    const std::string first = nodes != nullptr ? FirstSlurmHost(nodes) : "";
    if (first.empty()) {
      throw std::invalid_argument(
          std::string("under srun without ") + launch::kMasterAddr + ", " +
          launch::kSlurmNodeList + " must name rank 0's node");
    }
    job->master_addr = first;
  }
  if (Env(launch::kMasterPort) == nullptr) {
    const long id = EnvInt(launch::kSlurmJobId, -1, 0, 1L << 62);
    if (id < 0) {
      throw std::invalid_argument(std::string("under srun without ") +
                                  launch::kMasterPort + ", " +
                                  launch::kSlurmJobId + " must be set");
    }
    job->master_port = 15000 + static_cast<int>(id % 10000);
  }
}

}  // namespace

std::string FirstSlurmHost(const std::string& node_list) {
  // The first name at the top level (commas inside brackets separate ranges).
  size_t end = 0;
  for (int depth = 0; end < node_list.size(); ++end) {
    const char c = node_list[end];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
  }
  const std::string name = node_list.substr(0, end);
  const size_t open = name.find('[');
  if (open == std::string::npos) return name;
  const size_t close = name.find(']', open);
  const std::string ranges = name.substr(open + 1, close - open - 1);
  const std::string first = ranges.substr(0, ranges.find_first_of(",-"));
  const std::string rest =
      close == std::string::npos ? "" : name.substr(close + 1);
  return name.substr(0, open) + first +
         (rest.find('[') == std::string::npos ? rest : "");
}

bool InLaunchedJob() {
  return Env(launch::kRank) != nullptr || Env(launch::kOmpiRank) != nullptr ||
         InSlurmStep();
}

JobEnvironment JobEnvironment::Read() {
  JobEnvironment job;
  // torchrun's variables first; mpirun's, then srun's when those are absent.
  const bool torch =
      Env(launch::kRank) != nullptr || Env(launch::kWorldSize) != nullptr;
  const bool mpi = !torch && Env(launch::kOmpiRank) != nullptr;
  const bool slurm = !torch && !mpi && InSlurmStep();
  // (None of them: torchrun's names, unset, give a lone process.)
  const char* rank_var = mpi     ? launch::kOmpiRank
                         : slurm ? launch::kSlurmProcId
                                 : launch::kRank;
  const char* world_var = mpi     ? launch::kOmpiSize
                          : slurm ? launch::kSlurmNtasks
                                  : launch::kWorldSize;
  const char* local_var = mpi     ? launch::kOmpiLocalRank
                          : slurm ? launch::kSlurmLocalId
                                  : launch::kLocalRank;
  if (torch &&
      (Env(launch::kRank) == nullptr) != (Env(launch::kWorldSize) == nullptr)) {
    throw std::invalid_argument(
        "RANK and WORLD_SIZE must be set together (as torchrun does)");
  }
  const long world = EnvInt(world_var, 1, 1, 1 << 20);
  const long rank = EnvInt(rank_var, 0, 0, 1 << 20);
  if (rank >= world) {
    throw std::invalid_argument(std::string(rank_var) + "=" +
                                std::to_string(rank) + " is not below " +
                                world_var + "=" + std::to_string(world));
  }
  job.rank = static_cast<int>(rank);
  job.world_size = static_cast<int>(world);
  job.local_rank = static_cast<int>(EnvInt(local_var, rank, 0, 1 << 20));
  job.master_port = static_cast<int>(EnvInt(launch::kMasterPort, -1, 1, 65535));
  if (const char* addr = Env(launch::kMasterAddr)) job.master_addr = addr;
  if (slurm && world > 1) SlurmDefaults(&job);
  if (const char* hex = Env(launch::kJobSecret)) {
    job.secret = JobSecretFromHex(hex, launch::kJobSecret);
  }
  const char* hosted = Env(launch::kStoreHosted);
  job.store_hosted = hosted != nullptr && std::string(hosted) == "1";
  if (const char* bind = Env(launch::kStoreBind)) job.store_bind = bind;
  job.emulated_host =
      static_cast<int>(EnvInt(launch::kEmulatedHost, -1, 0, 1 << 20));
  job.host = ThisHostIdentity();
  return job;
}

std::string ThisHostIdentity() {
  if (const char* id = Env(launch::kHostId)) return id;
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  const std::string boot =
      ReadFirstLine("/proc/sys/kernel/random/boot_id").substr(0, 8);
  char ns[64] = "";
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  std::string pid_ns = n > 0 ? std::string(ns, static_cast<size_t>(n)) : "?";
  const size_t open = pid_ns.find('['), close = pid_ns.find(']');
  if (open != std::string::npos && close != std::string::npos) {
    pid_ns = pid_ns.substr(open + 1, close - open - 1);
  }
  return std::string(name) + " (boot " + (boot.empty() ? "?" : boot) +
         ", pid namespace " + pid_ns + ")";
}

PeerInfo ThisPeer(const std::string& address) {
  PeerInfo me;
  me.host = ThisHostIdentity();
  me.pid = getpid();
  me.start_time = ProcessStartTime(getpid());
  me.address = address;
  return me;
}

std::string InterfaceWithAddress(const std::string& address) {
  in_addr wanted{};
  if (inet_pton(AF_INET, address.c_str(), &wanted) != 1) return "";
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string name;
  for (const ifaddrs* i = all; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (in->sin_addr.s_addr == wanted.s_addr) name = i->ifa_name;
  }
  freeifaddrs(all);
  return name;
}

std::string KeepDataSocketsOnJobInterface(const std::string& address,
                                          const char* variable,
                                          const std::string& prefix) {
  if (const char* chosen = Env(variable)) return chosen;
  const std::string name = InterfaceWithAddress(address);
  if (name.empty()) return "";
  const std::string value = prefix + name;
  setenv(variable, value.c_str(), /*overwrite=*/0);
  return value;
}

}  // namespace ringlab::comm
