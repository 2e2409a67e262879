#include "comm/cluster/namespaces_in_use.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <string>

namespace ringlab::comm::cluster {

// As a process's own namespace or through one of its descriptors.
std::set<ino_t> NetworkNamespacesInUse() {
  std::set<ino_t> inodes;
  std::unique_ptr<DIR, int (*)(DIR*)> proc(opendir("/proc"), closedir);
  while (dirent* entry = readdir(proc.get())) {
    const std::string pid = entry->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat info;
    if (stat(("/proc/" + pid + "/ns/net").c_str(), &info) == 0) {
      inodes.insert(info.st_ino);
    }
    const std::string fds = "/proc/" + pid + "/fd";
    std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(fds.c_str()), closedir);
    while (dir != nullptr && (entry = readdir(dir.get())) != nullptr) {
      char target[64] = {};
      const std::string fd = fds + "/" + entry->d_name;
      if (readlink(fd.c_str(), target, sizeof(target) - 1) > 0 &&
          std::string(target).rfind("net:[", 0) == 0 &&
          stat(fd.c_str(), &info) == 0) {
        inodes.insert(info.st_ino);
      }
    }
  }
  return inodes;
}

}  // namespace ringlab::comm::cluster
