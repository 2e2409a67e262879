// Joins this process to its job: connects to the job's TCP store (or hosts
// it, as rank 0), and gathers every rank's peer information once
// (comm/peers.h: host, process, address) into the RankContext that every
// backend is created from. The job's place comes from the environment
// (job_environment.h: torchrun's, mpirun's or srun's variables).
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
// RINGLAB_JOB_SECRET; torchrun-style, mpirun and srun launches set that
// variable on every rank themselves. Without it, a job whose store is
// reachable only on loopback (MASTER_ADDR and the listening address in
// 127.0.0.0/8) gets a secret from rank 0 through a file only this user can
// read (LoopbackSecretPath); any other job refuses to start.
#ifndef RINGLAB_COMM_JOB_RENDEZVOUS_H_
#define RINGLAB_COMM_JOB_RENDEZVOUS_H_

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/job/job_environment.h"
#include "comm/store/tcp_store.h"

namespace ringlab::comm {

class Rendezvous {
 public:
  // Joins the job `job` describes: hosts or connects to its store and
  // gathers every rank's peer information. Throws std::invalid_argument for
  // a job that cannot be (a store beyond loopback without a secret, rank 0
  // away from MASTER_ADDR), CommError when the store cannot be reached or a
  // rank does not report by the deadline. Without a master port in a job of
  // several ranks there is no store (context().store is null, no peers):
  // enough for the mpi backend.
  static std::unique_ptr<Rendezvous> Join(const JobEnvironment& job,
                                          std::chrono::milliseconds timeout);
  // Join(JobEnvironment::Read(), timeout).
  static std::unique_ptr<Rendezvous> FromEnv(std::chrono::milliseconds timeout);

  ~Rendezvous();
  const RankContext& context() const { return context_; }

 private:
  Rendezvous() = default;
  static std::unique_ptr<Rendezvous> JoinOrThrowStoreError(
      const JobEnvironment& job, std::chrono::milliseconds timeout);
  // Connects store_ to the job's store (rank 0 first hosts it).
  void JoinStore(const JobEnvironment& job, std::chrono::milliseconds timeout);
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;
  std::string published_secret_file_;  // rank 0's, removed at the end
  RankContext context_;
};

// Every rank's PeerInfo through `store` (this rank's: reached at `address`,
// on `host`), as Rendezvous and torch's process group gather them. Rank 0
// may host the store: it returns only once every rank has read every
// rank's, so that a job refused for spanning hosts is refused by each rank
// with the same message rather than by rank 0 and, for the others, a store
// gone. CommError naming the first rank that did not report by the
// deadline.
std::vector<PeerInfo> GatherPeers(Store& store, int rank, int world_size,
                                  const std::string& address,
                                  const std::string& host,
                                  std::chrono::milliseconds timeout);

// Where rank 0 of a loopback job without RINGLAB_JOB_SECRET publishes the
// job's secret for its peers: /tmp/ringlab-<uid>/store-<address>-<port>, in a
// directory that must belong to this user and admit nobody else. Rank 0
// writes it once its store listens; a file left by a crashed job is
// overwritten by the next rank 0 that listens on that address and port.
std::string LoopbackSecretPath(const std::string& address, int port);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_RENDEZVOUS_H_
