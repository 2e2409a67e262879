// The floor of a benchmark across emulated hosts: what one TCP stream
// carries from one host to another through their links and the switch,
// measured in the same run as the rows it is the floor of (allreduce_bench).
// Below the link's nominal rate by the headers and the token buckets' slack
// (0.95 Gbit/s measured at 1gbit), and, unlimited, what this machine's CPUs
// move through veths and a bridge.
#ifndef RINGLAB_COMM_CLUSTER_LINK_PROBE_H_
#define RINGLAB_COMM_CLUSTER_LINK_PROBE_H_

#include <chrono>

#include "comm/cluster/emulated_cluster.h"

namespace ringlab::comm::cluster {

// Bits per second of payload sent from host `from` to host `to` in one TCP
// stream for about `duration` (after a first quarter, not counted, in
// which the stream and the buckets settle). Throws ClusterError when the
// stream fails or stalls for 10 s.
double MeasureTcpThroughput(const EmulatedCluster& cluster, int from, int to,
                            std::chrono::milliseconds duration);

}  // namespace ringlab::comm::cluster

#endif  // RINGLAB_COMM_CLUSTER_LINK_PROBE_H_
