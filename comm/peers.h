// Who the ranks of a job are, gathered once when the job starts (as NCCL
// gathers its peer info at init) and read by every backend and by the
// liveness watch: each rank's host, its process (pid and start time, which
// together name it even after the pid is reused) and the address its peers
// on other hosts reach it at. A rank learns that a peer on its host has died
// from these (PeerExited, PeerWatch); ranks on other hosts it learns of only
// through its connections to them.
#ifndef RINGLAB_COMM_PEERS_H_
#define RINGLAB_COMM_PEERS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ringlab::comm {

class Store;

struct PeerInfo {
  // The rank's host as ranks compare hosts (comm/job/rendezvous.h:
  // ThisHostIdentity): one kernel and one PID namespace.
  std::string host;
  int64_t pid = 0;
  // The process's start time in clock ticks since boot (/proc/<pid>/stat):
  // with the host, it tells this process from a later one given its pid.
  uint64_t start_time = 0;
  // The IPv4 address this rank reached the job's store from: one of its
  // host's that peers on the store's network reach (127.0.0.1 on one host).
  std::string address;

  bool SameHost(const PeerInfo& other) const { return host == other.host; }
  bool SameProcess(const PeerInfo& other) const {
    return SameHost(other) && pid == other.pid &&
           start_time == other.start_time;
  }
  // One line, for the store: "<pid> <start_time> <address> <host>".
  std::string Encode() const;
  // Throws std::invalid_argument for text Encode did not make.
  static PeerInfo Decode(const std::string& text);
};

// Whether `peer`, a peer on the host of `self` (this process's entry), no
// longer runs (gone, a zombie, or its pid now another process). False for a
// peer on another host: that cannot be told from here.
bool PeerExited(const PeerInfo& peer, const PeerInfo& self);

// Every rank's PeerInfo, in rank order: publishes `mine` under
// "peer/<rank>" in store and waits (server-side) for the others' within
// timeout. Throws StoreTimeout naming the ranks that did not publish.
std::vector<PeerInfo> ExchangePeers(Store& store, int rank, int world_size,
                                    const PeerInfo& mine,
                                    std::chrono::milliseconds timeout);

// "rank 0 on a; ranks 1,2 on b" for the peers' hosts; *count (when not
// null) says how many hosts.
std::string DescribeHosts(const std::vector<PeerInfo>& peers, size_t* count);

// The ranks on the host of `rank` (itself among them), in rank order.
std::vector<int> RanksOnHostOf(const std::vector<PeerInfo>& peers, int rank);

// Watches the peers of a rank that run on its host, so that a waiting rank
// learns at once that one has died instead of at its deadline.
class PeerWatch {
 public:
  // Watches nobody.
  PeerWatch() = default;
  PeerWatch(const std::vector<PeerInfo>& peers, int rank);

  // The lowest rank known to have exited, or -1. Cheap enough to call every
  // millisecond: one kill(pid, 0) per local peer, /proc only when it lives.
  int FirstDeadPeer() const;
  // Whether `rank` is a peer on this host known to have exited.
  bool Exited(int rank) const;
  // FirstDeadPeer, looking again for up to `grace` while it is -1: a peer
  // that broke a connection by dying may take a moment to be seen gone.
  int DeadPeerWithin(std::chrono::milliseconds grace) const;
  // The peer's pid, for messages (0 for a peer on another host).
  int64_t pid(int rank) const;
  // "rank 1 (pid 42)", "rank 1 (pid 42), rank 2 (pid 43)": every peer on
  // this host known to have exited, after looking for up to `grace` for one
  // (DeadPeerWithin); "" when none has. All of them: the first to die need
  // not be the lowest, and others may have failed, and exited, because of it.
  std::string ExitedWithin(std::chrono::milliseconds grace) const;

 private:
  PeerInfo self_;
  std::vector<PeerInfo> local_;  // per rank; pid 0 for self and remote ranks
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_PEERS_H_
