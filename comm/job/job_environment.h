// What the environment says of this process's place in a job, read once
// from the variables its launcher set (launch_variables.h): torchrun's
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; ringlab's own
// launcher sets them too), else Open MPI's under mpirun, else Slurm's under
// srun (rank 0's host from the node list and a port from the job id where
// MASTER_ADDR and MASTER_PORT are unset, as Lightning does, so that
// `srun train ...` starts a job); and who this process is to its peers.
#ifndef RINGLAB_COMM_JOB_JOB_ENVIRONMENT_H_
#define RINGLAB_COMM_JOB_JOB_ENVIRONMENT_H_

#include <string>

#include "comm/peers.h"

namespace ringlab::comm {

struct JobEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = -1;                   // MASTER_PORT; -1 when unset
  std::string secret;         // RINGLAB_JOB_SECRET, as raw bytes; "" when unset
  bool store_hosted = false;  // RINGLAB_STORE_HOSTED=1: the launcher's store
  // Where rank 0's store listens: an IPv4 address of its host, or 0.0.0.0
  // for every interface; "" for MASTER_ADDR's address (RINGLAB_STORE_BIND).
  std::string store_bind;
  std::string host;  // ThisHostIdentity()
  // RINGLAB_EMULATED_HOST: the emulated host our launcher placed this rank
  // on (comm/cluster); -1 for none.
  int emulated_host = -1;

  // Throws std::invalid_argument naming a malformed or inconsistent
  // variable.
  static JobEnvironment Read();
};

// True when the environment says this process is one rank of a launched
// job: RANK, OMPI_COMM_WORLD_RANK, or srun's SLURM_PROCID in a job step.
bool InLaunchedJob();

// The first host of a Slurm node list ("gpu[003-005,009],cpu1" ->
// "gpu003"); "" for an empty list.
std::string FirstSlurmHost(const std::string& node_list);

// This host as ranks compare hosts: "<hostname> (boot <id>, pid namespace
// <inode>)": one kernel (boot_id) and one PID namespace, which is what
// shared-memory backends need of their ranks (they open each other's
// /proc/<pid>/fd) and what makes a pid name one process. RINGLAB_HOST_ID,
// when set, replaces it (as NCCL_HOSTID does NCCL's).
std::string ThisHostIdentity();

// This process on this host, reachable at `address`.
PeerInfo ThisPeer(const std::string& address);

// The name of the network interface that holds the IPv4 `address` ("lo" for
// 127.0.0.1), "" when none of this host's does.
std::string InterfaceWithAddress(const std::string& address);

// Libraries that open their own data sockets (NCCL's bootstrap and socket
// transport, Open MPI's TCP transport) listen, unless told otherwise, on
// interfaces of their choosing (Open MPI: every one), where anyone who can
// reach them may connect. Before such a library starts, this confines it to
// the interface of this rank's job address (`address`, the one it reached
// the store from): sets `variable` to `prefix` + that interface's name,
// unless the user set it. Returns the value in force ("" when none).
std::string KeepDataSocketsOnJobInterface(const std::string& address,
                                          const char* variable,
                                          const std::string& prefix = "");

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_JOB_ENVIRONMENT_H_
