#include "train/cpu_quota.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
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
      for (const char* mount :
           {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
        const std::string dir = mount + (path == "/" ? "" : path);
        if (Exists(dir + "/cpu.cfs_quota_us")) return {dir, false};
      }
    }
  }
  const std::string dir = "/sys/fs/cgroup" + (v2_path == "/" ? "" : v2_path);
  if (!v2_path.empty() && Exists(dir + "/cgroup.controllers"))
    return {dir, true};
  return {};
}

constexpr char kPrefix[] = "ringlab-straggler-";
constexpr char kNoController[] =
    "this machine has no cgroup cpu controller under /sys/fs/cgroup";

// Writes `text` to `path`; "" or why not.
std::string Write(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  const bool wrote = fd >= 0 && write(fd, text.data(), text.size()) ==
                                    static_cast<ssize_t>(text.size());
  const int error = errno;
  if (fd >= 0) close(fd);
  return wrote ? "" : "cannot write " + path + ": " + std::strerror(error);
}

// Removes the cgroups of ranks no longer running: a rank killed (a fault, a
// deadline) leaves its empty cgroup behind, since no destructor ran.
void RemoveOrphans(const std::string& parent) {
  DIR* dir = opendir(parent.c_str());
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::atol(name.c_str() + sizeof(kPrefix) - 1);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      rmdir((parent + "/" + name).c_str());
    }
  }
  closedir(dir);
}

// Makes the cgroup `dir` allowed `cpus` CPUs; "" or why not (dir removed).
std::string MakeLimited(const Hierarchy& where, const std::string& dir,
                        double cpus) {
  if (mkdir(dir.c_str(), 0755) != 0) {
    return "cannot make the cgroup " + dir + ": " + std::strerror(errno);
  }
  const std::string period = std::to_string(std::lround(kQuotaUs / cpus));
  const std::string quota = std::to_string(kQuotaUs);
  std::string why;
  if (where.v2 && !Exists(dir + "/cpu.max")) {
    why = "cgroup v2's cpu controller is not delegated below " + where.dir +
          " (its cgroup.subtree_control lacks cpu)";
  } else if (where.v2) {
    why = Write(dir + "/cpu.max", quota + " " + period);
  } else {
    why = Write(dir + "/cpu.cfs_period_us", period);
    if (why.empty()) why = Write(dir + "/cpu.cfs_quota_us", quota);
  }
  if (!why.empty()) rmdir(dir.c_str());
  return why;
}

// Moves this process (every thread) into `dir`, a cgroup made for it in the
// hierarchy `where`; "" or why not (dir removed).
std::string Enter(const Hierarchy& where, const std::string& dir, double cpus) {
  RemoveOrphans(where.dir);
  std::string why = MakeLimited(where, dir, cpus);
  if (why.empty()) {
    why = Write(dir + "/cgroup.procs", std::to_string(getpid()));
    if (!why.empty()) rmdir(dir.c_str());
  }
  return why;
}

std::string Leave(const std::string& home, const std::string& own) {
  const std::string why =
      Write(home + "/cgroup.procs", std::to_string(getpid()));
  rmdir(own.c_str());
  return why;
}

std::string OwnCgroup(const Hierarchy& where) {
  return where.dir + "/" + kPrefix + std::to_string(getpid());
}

}  // namespace

std::string CpuCgroupDir() { return Locate().dir; }

std::string CpuQuota::Unavailable(double cpus) {
  const Hierarchy where = Locate();
  if (where.dir.empty()) return kNoController;
  // What a rank will do: make its cgroup with this quota, enter it, leave.
  std::string why = Enter(where, OwnCgroup(where), cpus);
  if (why.empty()) why = Leave(where.dir, OwnCgroup(where));
  return why;
}

CpuQuota::CpuQuota(double cpus) {
  if (!(cpus >= 0.01 && cpus <= 1.0)) {
    throw std::runtime_error("a CPU quota must be in [0.01, 1] CPUs");
  }
  const Hierarchy where = Locate();
  if (where.dir.empty()) throw std::runtime_error(kNoController);
  home_ = where.dir;
  own_ = OwnCgroup(where);
  const std::string why = Enter(where, own_, cpus);
  if (!why.empty()) {
    throw std::runtime_error("cannot limit this rank's CPU time: " + why);
  }
}

CpuQuota::~CpuQuota() { Leave(home_, own_); }

}  // namespace ringlab::train
