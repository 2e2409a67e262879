// Tells a waiting rank that a peer on the same host has exited, so that the
// GPU backends' collectives fail at once, naming it, instead of at their
// deadline: ranks publish their host and pid in the store when the
// communicator is created, and a waiting rank checks the pids of its local
// peers.
#ifndef RINGLAB_COMM_PEER_WATCH_H_
#define RINGLAB_COMM_PEER_WATCH_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/store/store.h"

namespace ringlab::comm {

// This host's name plus its PID namespace: a pid, or a GPU's PCI bus id,
// means the same process or device only to peers that share both
// (containers may share a host name, not a namespace).
std::string HostIdentity();

// Watches the peers of a rank that live on the same host (by HostIdentity
// and pid, exchanged through the store).
class PeerWatch {
 public:
  // Publishes this rank's host and pid under `prefix` and reads the peers'
  // (each within `timeout`; the store throws on a timeout).
  PeerWatch(Store* store, const std::string& prefix, int rank, int world_size,
            std::chrono::milliseconds timeout);
  // Watches nobody.
  PeerWatch() = default;

  // The lowest rank known to have exited, or -1. Cheap enough to call every
  // millisecond: one kill(pid, 0) per local peer, /proc only when it is alive.
  int FirstDeadPeer() const;

  // Whether `rank` is a peer on this host known to have exited.
  bool Exited(int rank) const;

 private:
  std::vector<pid_t> local_pids_;  // per rank; 0 for self and remote ranks
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_PEER_WATCH_H_
