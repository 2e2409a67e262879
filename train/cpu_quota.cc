#include "train/cpu_quota.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ringlab::train {
namespace {

// The quota: the least the kernel takes, 1 ms, in a period of 1 ms / cpus.
// A rank that waits on its peers most of a step never spends a share of the
// default 100 ms period; a period of a few ms throttles it within each step.
constexpr long kQuotaUs = 1'000;

// Where this process's cpu cgroup lies, and which interface it has.
struct Hierarchy {
  std::string dir;  // the process's cgroup directory
  bool v2 = false;  // cpu.max (v2) rather than cpu.cfs_quota_us (v1)
};

bool Exists(const std::string& path) {
  struct stat s;
  return stat(path.c_str(), &s) == 0;
}

// The process's cgroup in the cpu controller's hierarchy: v1's line whose
// controllers include "cpu", or v2's "0::" line; "" in dir where neither is
// mounted where systemd and Docker mount it.
Hierarchy Locate() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, v2_path;
  while (std::getline(self, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) v2_path = path;
    std::stringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name != "cpu") continue;
      for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
        const std::string dir = mount + (path == "/" ? "" : path);
        if (Exists(dir + "/cpu.cfs_quota_us")) return {dir, false};
      }
    }
  }
  const std::string dir = "/sys/fs/cgroup" + (v2_path == "/" ? "" : v2_path);
  if (!v2_path.empty() && Exists(dir + "/cgroup.controllers")) return {dir, true};
  return {};
}

std::string OwnName() {
  return "/ringlab-straggler-" + std::to_string(getpid());
}

// Writes `text` to `path`; "" or why not.
std::string Write(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  if (file) file << text << std::flush;
  if (!file) return "cannot write " + path + ": " + std::strerror(errno);
  return "";
}

// Makes the cgroup `dir` allowed `cpus` CPUs; "" or why not (dir removed).
std::string MakeLimited(const Hierarchy& where, const std::string& dir,
                        double cpus) {
  if (mkdir(dir.c_str(), 0755) != 0) {
    return "cannot make the cgroup " + dir + ": " + std::strerror(errno);
  }
  const std::string period = std::to_string(std::lround(kQuotaUs / cpus));
  const std::string quota = std::to_string(kQuotaUs);
  std::string why = where.v2 ? Write(dir + "/cpu.max", quota + " " + period)
                             : Write(dir + "/cpu.cfs_period_us", period);
  if (why.empty() && !where.v2) why = Write(dir + "/cpu.cfs_quota_us", quota);
  if (!why.empty()) rmdir(dir.c_str());
  return why;
}

}  // namespace

std::string CpuQuota::Unavailable() {
  const Hierarchy where = Locate();
  if (where.dir.empty()) {
    return "this machine has no cgroup cpu controller under /sys/fs/cgroup";
  }
  const std::string probe = where.dir + OwnName() + "-probe";
  const std::string why = MakeLimited(where, probe, 1.0);
  if (why.empty()) rmdir(probe.c_str());
  return why;
}

CpuQuota::CpuQuota(double cpus) {
  if (!(cpus >= 0.01 && cpus <= 1.0)) {
    throw std::runtime_error("a CPU quota must be in [0.01, 1] CPUs");
  }
  const Hierarchy where = Locate();
  if (where.dir.empty()) throw std::runtime_error(Unavailable());
  home_ = where.dir;
  own_ = where.dir + OwnName();
  std::string why = MakeLimited(where, own_, cpus);
  // cgroup.procs moves every thread of the process, those running already.
  if (why.empty()) why = Write(own_ + "/cgroup.procs", std::to_string(getpid()));
  if (!why.empty()) {
    rmdir(own_.c_str());
    throw std::runtime_error("cannot limit this rank's CPU time: " + why);
  }
}

CpuQuota::~CpuQuota() {
  Write(home_ + "/cgroup.procs", std::to_string(getpid()));
  rmdir(own_.c_str());
}

}  // namespace ringlab::train
