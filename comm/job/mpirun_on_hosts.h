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

// Open MPI's parameters for `nprocs` ranks on emulated hosts that share
// `cores` cores, as mpirun arguments. Each host's slots are its share of the
// ranks, so mpirun cannot see that the hosts share this machine's cores; more
// ranks than cores is what Open MPI calls oversubscribed, where a waiting
// rank yields its core instead of polling (polling, 4 ranks on 2 cores took
// 20 ms for a 64 KiB allreduce across hosts; yielding, 0.6 ms). And ringlab's
// allreduce rules, read from the file `rules`, unless the environment
// already tunes Open MPI's collectives (OMPI_MCA_coll_tuned_*).
std::vector<std::string> OpenMpiTuning(int nprocs, int cores,
                                       const std::string& rules);

// ringlab's allreduce rules for Open MPI's tuned collectives, in its
// dynamic rules file format (coll_tuned_dynamic_rules_filename): the
// collective's id (2, allreduce), then per communicator size from which a
// rule holds, per message size from which: algorithm, fan, segment size.
std::string OpenMpiAllreduceRules();

// Runs `argv` (its argv[0] resolved to this binary) as `nprocs` MPI ranks
// on `cluster`; returns mpirun's exit status (128 + N for a signal).
// Throws std::runtime_error when mpirun or nsenter is missing or cannot
// start.
int LaunchMpirunOnHosts(int nprocs, const std::vector<std::string>& argv,
                        const cluster::EmulatedCluster& cluster);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_MPIRUN_ON_HOSTS_H_
