#include "comm/process.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace ringlab::comm {
namespace {

// /proc/<pid>/stat after its command name: " state ppid pgrp ...". The name
// may hold spaces and parentheses, so the fields start after the last ')'.
// Empty when the file cannot be read.
std::string StatFields(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return "";
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return "";
  return line.substr(paren + 1);
}

}  // namespace

bool ProcessExited(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // Alive to kill(): still a zombie (or dying) if /proc says so.
  const std::string fields = StatFields(pid);
  if (fields.empty()) return false;
  const char state = fields[1];
  return state == 'Z' || state == 'X';
}

uint64_t ProcessStartTime(pid_t pid) {
  if (pid <= 0) return 0;
  // state, then fields 4 to 21, then starttime (field 22 of the line).
  unsigned long long start = 0;
  if (std::sscanf(StatFields(pid).c_str(),
                  " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d "
                  "%*d %*d %*d %*d %*d %llu",
                  &start) != 1) {
    return 0;
  }
  return start;
}

bool ProcessExiting(pid_t pid) {
  if (pid <= 0) return false;
  // state ppid pgrp session tty_nr tpgid flags
  unsigned long flags = 0;
  if (std::sscanf(StatFields(pid).c_str(), " %*c %*d %*d %*d %*d %*d %lu",
                  &flags) != 1) {
    return false;
  }
  constexpr unsigned long kPfExiting = 0x4;
  return (flags & kPfExiting) != 0;
}

bool ProcessStopped(pid_t pid) {
  if (pid <= 0) return false;
  char state = 0;
  if (std::sscanf(StatFields(pid).c_str(), " %c", &state) != 1) return false;
  return state == 'T';
}

bool WriteFully(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace ringlab::comm
