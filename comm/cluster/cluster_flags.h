// The flags of a job on emulated hosts, defined once for every binary that
// places ranks on them (train, allreduce_bench): --hosts, --link and
// --link_latency (comm/cluster/job_cluster.h checks their values).
#ifndef RINGLAB_COMM_CLUSTER_CLUSTER_FLAGS_H_
#define RINGLAB_COMM_CLUSTER_CLUSTER_FLAGS_H_

#include <gflags/gflags.h>

#include "comm/cluster/job_cluster.h"

DECLARE_int32(hosts);
DECLARE_string(link);
DECLARE_string(link_latency);

namespace ringlab::comm::cluster {

ClusterRequest ClusterRequestFromFlags();
// Whether any of the three differs from its default (one host, as is).
bool ClusterRequested();

}  // namespace ringlab::comm::cluster

#endif  // RINGLAB_COMM_CLUSTER_CLUSTER_FLAGS_H_
