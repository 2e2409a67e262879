#include "comm/peer_watch.h"

#include <unistd.h>

#include <sstream>

#include "comm/process.h"

namespace ringlab::comm {

std::string HostIdentity() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  return std::string(name) + "|" + (n > 0 ? std::string(ns, n) : "?");
}

PeerWatch::PeerWatch(Store* store, const std::string& prefix, int rank,
                     int world_size, std::chrono::milliseconds timeout)
    : local_pids_(world_size, 0) {
  if (store == nullptr || world_size == 1) return;
  const std::string host = HostIdentity();
  store->Set(prefix + "/pid/" + std::to_string(rank),
             host + " " + std::to_string(getpid()));
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    std::istringstream in(
        store->Get(prefix + "/pid/" + std::to_string(r), timeout));
    std::string peer_host;
    long pid = 0;
    if (in >> peer_host >> pid && peer_host == host) {
      local_pids_[r] = static_cast<pid_t>(pid);
    }
  }
}

bool PeerWatch::Exited(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < local_pids_.size() &&
         local_pids_[rank] > 0 && ProcessExited(local_pids_[rank]);
}

int PeerWatch::FirstDeadPeer() const {
  for (size_t r = 0; r < local_pids_.size(); ++r) {
    if (local_pids_[r] > 0 && ProcessExited(local_pids_[r]))
      return static_cast<int>(r);
  }
  return -1;
}

}  // namespace ringlab::comm
