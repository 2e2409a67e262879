// A cluster on one machine (`--hosts=H --link=RATE`): H emulated hosts, each
// a network and a UTS namespace with its own host name (ringlab-host-<h>)
// and address (10.78.0.<h+1> on its eth0), all joined through one switch (a
// bridge in a namespace of its own), every host's link to the switch shaped
// to the link's rate in both directions (a token bucket on each end of its
// veth pair, netem beneath it for a delay). A job's ranks are started inside
// the hosts (Enter); rank 0's store listens on host 0 (InNetworkOf).
//
// Everything is anonymous and held only by this object's descriptors and the
// processes inside the hosts: when both are gone, whatever way the job ended
// (kill -9 of its launcher included), the kernel removes the namespaces and
// with them the veths, the bridge and the queueing disciplines. Nothing is
// named in /run/netns, nothing is left to clean up.
//
// Needs CAP_SYS_ADMIN and CAP_NET_ADMIN: as root it just works; otherwise
// GainNetworkAdmin makes the process root of a user namespace of its own,
// where the kernel allows unprivileged ones. Configured with iproute2's ip
// and tc (as Mininet and the kernel's selftests do), each run with a
// deadline; any failure is a ClusterError saying what is missing.
#ifndef RINGLAB_COMM_CLUSTER_EMULATED_CLUSTER_H_
#define RINGLAB_COMM_CLUSTER_EMULATED_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/cluster/link.h"

namespace ringlab::comm::cluster {

class ClusterError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "" when this process may create the cluster's namespaces: it is root, or
// it has just become root of a new user namespace, in a network namespace
// of its own with only loopback (which must happen while it has one thread,
// before any other starts); else why not, one line.
std::string GainNetworkAdmin();

class EmulatedCluster {
 public:
  static constexpr int kMaxHosts = 64;
  static constexpr char kInterface[] = "eth0";

  // Builds the hosts and the switch; throws ClusterError when it cannot
  // (having removed what it made), std::invalid_argument for hosts outside
  // [1, kMaxHosts] or a delay the kernel cannot make (no netem).
  EmulatedCluster(int hosts, const Link& link);
  // std::invalid_argument for a count outside [1, kMaxHosts].
  static void CheckHostCount(int hosts);
  ~EmulatedCluster();
  EmulatedCluster(const EmulatedCluster&) = delete;
  EmulatedCluster& operator=(const EmulatedCluster&) = delete;

  int hosts() const { return static_cast<int>(hosts_.size()); }
  const Link& link() const { return link_; }
  static std::string HostName(int host);
  static std::string Address(int host);
  static std::string Subnet();  // every host's address is in it

  // Paths another process of this user opens to join host's namespaces
  // ("/proc/<this pid>/fd/<n>", for nsenter --net= and --uts=), valid while
  // this object lives.
  std::string NetworkPath(int host) const;
  std::string UtsPath(int host) const;
  // Joins host `host`'s network and UTS namespaces: for a forked child,
  // before it execs (async-signal-safe). False when the kernel refused.
  bool Enter(int host) const;
  // Runs fn with the calling thread in host's network namespace (a socket
  // made there stays there), and back in its own, also when fn throws.
  void InNetworkOf(int host, const std::function<void()>& fn) const;

  // Bytes through host's link so far (its eth0's counters): what really
  // crossed the network, headers and retransmissions included.
  struct Counters {
    uint64_t sent = 0;
    uint64_t received = 0;
  };
  Counters LinkCounters(int host) const;
  // The same, read by a process on an emulated host of its own link; none
  // where this network namespace has no eth0.
  static std::optional<Counters> ThisHostLinkCounters();

 private:
  struct Namespaces {
    int net = -1;
    int uts = -1;
  };
  void Build();
  void Release();
  void ConnectHost(int host);
  void Shape(const Namespaces& where, const std::string& device);

  Link link_;
  std::string ip_, tc_;  // iproute2's tools; tc_ empty when nothing is shaped
  Namespaces switch_;
  std::vector<Namespaces> hosts_;
};

}  // namespace ringlab::comm::cluster

#endif  // RINGLAB_COMM_CLUSTER_EMULATED_CLUSTER_H_
