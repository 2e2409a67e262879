// Finds this process's place in a job from the variables torchrun sets (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or from OpenMPI's
// (OMPI_COMM_WORLD_RANK, ...) under mpirun, and connects to the job's TCP
// store so that backends can exchange what they need to connect.
//
// Who hosts the store: our launcher (LaunchRanks) hosts it itself and says so
// with RINGLAB_STORE_HOSTED=1, which avoids a race for the port; otherwise
// rank 0 hosts it on MASTER_PORT, bound to 127.0.0.1 unless
// RINGLAB_STORE_BIND names another address (e.g. 0.0.0.0 for several
// machines). A lone process (WORLD_SIZE unset or 1, no MASTER_PORT) gets a
// private store on a free loopback port.
#ifndef RINGLAB_COMM_RENDEZVOUS_H_
#define RINGLAB_COMM_RENDEZVOUS_H_

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/tcp_store.h"

namespace ringlab::comm {

class Rendezvous {
 public:
  // Reads the environment; throws std::invalid_argument naming the variable
  // for a malformed or inconsistent one, CommError when the store cannot be
  // reached by the deadline. Without MASTER_PORT in a job of several ranks
  // there is no store (context().store is null): enough for the mpi backend.
  static std::unique_ptr<Rendezvous> FromEnv(std::chrono::milliseconds timeout);

  // True when the environment says this process is one rank of a launched
  // job (RANK or OMPI_COMM_WORLD_RANK is set).
  static bool InLaunchedJob();

  const RankContext& context() const { return context_; }

 private:
  Rendezvous() = default;

  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;
  RankContext context_;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_RENDEZVOUS_H_
