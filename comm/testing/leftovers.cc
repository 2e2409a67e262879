#include "comm/testing/leftovers.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace ringlab::comm::testing {
namespace {

std::vector<std::string> DirEntries(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(d);
  }
  return names;
}

std::string ReadLink(const std::string& path) {
  char buf[4096];
  const ssize_t n = readlink(path.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string CommandOf(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

// Children of every thread of this process (after adoption: every
// descendant whose parent has gone too).
std::vector<std::string> RunningChildren() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  std::vector<std::string> pids;
  for (const std::string& task : DirEntries("/proc/self/task")) {
    std::ifstream in("/proc/self/task/" + task + "/children");
    std::string pid;
    while (in >> pid) pids.push_back(pid);
  }
  return pids;
}

std::vector<std::string> HeldMemfds() {
  std::vector<std::string> held;
  for (const std::string& fd : DirEntries("/proc/self/fd")) {
    const std::string target = ReadLink("/proc/self/fd/" + fd);
    if (target.rfind("/memfd:ringlab", 0) == 0) {
      held.push_back("fd " + fd + " holds " + target);
    }
  }
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:ringlab") != std::string::npos) {
      held.push_back("mapped: " + line);
    }
  }
  return held;
}

std::vector<std::string> ListeningSockets() {
  std::set<std::string> mine;  // socket inodes among this process's fds
  for (const std::string& fd : DirEntries("/proc/self/fd")) {
    const std::string target = ReadLink("/proc/self/fd/" + fd);
    if (target.rfind("socket:[", 0) == 0) {
      mine.insert(target.substr(8, target.size() - 9));
    }
  }
  std::vector<std::string> listening;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout,
          inode;
      row >> slot >> local >> remote >> state >> queues >> timer >> retr >>
          uid >> timeout >> inode;
      if (state == "0A" && mine.count(inode)) {
        const std::string port_hex = local.substr(local.find(':') + 1);
        listening.push_back("still listening on TCP port " +
                            std::to_string(std::stoi(port_hex, nullptr, 16)));
      }
    }
  }
  return listening;
}

}  // namespace

void AdoptOrphans() { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

std::vector<std::string> Leftovers(int grace_ms,
                                   const std::vector<pid_t>& expected) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  auto unexpected = [&] {
    std::vector<std::string> children = RunningChildren();
    children.erase(
        std::remove_if(children.begin(), children.end(),
                       [&](const std::string& pid) {
                         return std::find(expected.begin(), expected.end(),
                                          static_cast<pid_t>(std::stol(pid))) !=
                                expected.end();
                       }),
        children.end());
    return children;
  };
  std::vector<std::string> children = unexpected();
  while (!children.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    children = unexpected();
  }
  std::vector<std::string> leftovers;
  for (const std::string& pid : children) {
    leftovers.push_back("process " + pid + " (" + CommandOf(pid) +
                        ") still running");
    // Reported once: later jobs start clean.
    kill(static_cast<pid_t>(std::stol(pid)), SIGKILL);
    waitpid(static_cast<pid_t>(std::stol(pid)), nullptr, 0);
  }
  for (std::string& s : HeldMemfds()) leftovers.push_back(std::move(s));
  for (std::string& s : ListeningSockets()) leftovers.push_back(std::move(s));
  return leftovers;
}

}  // namespace ringlab::comm::testing
