// Finds this process's place in a job from the variables torchrun sets (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or from OpenMPI's
// (OMPI_COMM_WORLD_RANK, ...) under mpirun, connects to the job's TCP store,
// and has every rank report its host (ThisHostIdentity), so that backends that
// need one host can refuse a job that spans several.
//
// Who hosts the store: our launcher (LaunchRanks) hosts it itself and says so
// with RINGLAB_STORE_HOSTED=1, which avoids a race for the port; otherwise
// rank 0 hosts it on MASTER_PORT, listening on MASTER_ADDR's address (which
// must then be one of rank 0's host's), or on the address that --store_bind
// (RINGLAB_STORE_BIND) names, e.g. 0.0.0.0 for every interface. A lone
// process (WORLD_SIZE unset or 1, no MASTER_PORT) gets a private store on a
// free loopback port.
//
// Who may connect: only processes holding the job's secret
// (comm/store/job_secret.h). Our launcher draws one and passes it in
// RINGLAB_JOB_SECRET; torchrun-style and mpirun launches set that variable
// on every rank themselves. Without it, a job whose store is reachable only
// on loopback (MASTER_ADDR and the listening address in 127.0.0.0/8) gets a
// secret from rank 0 through a file only this user can read
// (LoopbackSecretPath); any other job refuses to start.
#ifndef RINGLAB_COMM_JOB_RENDEZVOUS_H_
#define RINGLAB_COMM_JOB_RENDEZVOUS_H_

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/store/tcp_store.h"

namespace ringlab::comm {

// What the environment says of this process's place in a job.
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

  // Throws std::invalid_argument naming a malformed or inconsistent
  // variable.
  static JobEnvironment Read();
};

class Rendezvous {
 public:
  // Joins the job `job` describes: hosts or connects to its store and
  // exchanges every rank's host. Throws std::invalid_argument for a job that
  // cannot be (a store beyond loopback without a secret, rank 0 away from
  // MASTER_ADDR), CommError when the store cannot be reached or a rank does
  // not report by the deadline. Without a master port in a job of several
  // ranks there is no store (context().store is null): enough for the mpi
  // backend.
  static std::unique_ptr<Rendezvous> Join(const JobEnvironment& job,
                                          std::chrono::milliseconds timeout);
  // Join(JobEnvironment::Read(), timeout).
  static std::unique_ptr<Rendezvous> FromEnv(std::chrono::milliseconds timeout);

  // True when the environment says this process is one rank of a launched
  // job (RANK or OMPI_COMM_WORLD_RANK is set).
  static bool InLaunchedJob();

  ~Rendezvous();
  const RankContext& context() const { return context_; }

 private:
  Rendezvous() = default;
  // Connects store_ to the job's store (rank 0 first hosts it).
  void JoinStore(const JobEnvironment& job, std::chrono::milliseconds timeout);

  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;
  std::string published_secret_file_;  // rank 0's, removed at the end
  RankContext context_;
};

// This host as ranks compare hosts: "<hostname> (boot <id>, pid namespace
// <inode>)": one kernel (boot_id) and one PID namespace, which is what
// shared-memory backends need of their ranks (they open each other's
// /proc/<pid>/fd). RINGLAB_HOST_ID, when set, replaces it (as NCCL_HOSTID
// does NCCL's).
std::string ThisHostIdentity();

// Where rank 0 of a loopback job without RINGLAB_JOB_SECRET publishes the
// job's secret for its peers: /tmp/ringlab-<uid>/store-<address>-<port>, in a
// directory that must belong to this user and admit nobody else. Rank 0
// writes it once its store listens; a file left by a crashed job is
// overwritten by the next rank 0 that listens on that address and port.
std::string LoopbackSecretPath(const std::string& address, int port);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_RENDEZVOUS_H_
