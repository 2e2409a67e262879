#include "comm/process.h"

#include <errno.h>
#include <signal.h>

#include <fstream>
#include <string>

namespace ringlab::comm {

bool ProcessExited(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // Alive to kill(): still a zombie (or dying) if /proc says so.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace ringlab::comm
