// An MPI job on emulated hosts (`train --comm=mpi --hosts=H`): mpirun runs
// on host 0 and starts the other hosts' daemons through an rsh agent that
// enters their namespaces (nsenter) where a cluster would use ssh, placing
// the ranks contiguously (by slot, G per host). Rank 0's store is this
// launcher's, on host 0's address, as for the launcher's own ranks; MPI's
// TCP transport and out-of-band channel keep to the hosts' subnet, shared
// memory within a host. Nothing it makes outlives the call: the agent lives
// in a private temporary directory removed at the end.
#ifndef RINGLAB_COMM_JOB_MPIRUN_ON_HOSTS_H_
#define RINGLAB_COMM_JOB_MPIRUN_ON_HOSTS_H_

#include <string>
#include <vector>

#include "comm/cluster/emulated_cluster.h"

namespace ringlab::comm {

// Runs `argv` (its argv[0] resolved to this binary) as `nprocs` MPI ranks
// on `cluster`; returns mpirun's exit status (128 + N for a signal).
// Throws std::runtime_error when mpirun or nsenter is missing or cannot
// start.
int LaunchMpirunOnHosts(int nprocs, const std::vector<std::string>& argv,
                        const cluster::EmulatedCluster& cluster);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_MPIRUN_ON_HOSTS_H_
