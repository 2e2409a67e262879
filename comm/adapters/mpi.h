// The "mpi" Communicator: MPI_Allreduce / MPI_Bcast / MPI_Barrier on
// MPI_COMM_WORLD through OpenMPI, for CPU runs across machines under mpirun
// (or Slurm) and as the benchmark's anchor. Ranks come from MPI itself, not
// from the RankContext; the store is not used. Its own library so that
// binaries that do not want libmpi need not link it.
//
// MPI has no per-call deadline, so a watchdog thread aborts the whole job
// (MPI_Abort under MPI_THREAD_MULTIPLE, else it exits the rank, which mpirun
// turns into stopping the job) when one call has run longer than
// CommOptions::timeout; a rank that dies is otherwise handled by mpirun.
// Calls that disagree across ranks (kind, count, op, root, or a skipped call)
// are detected before any data moves, at the cost of one small
// MPI_Allreduce per call, and throw CommError("mpi: mismatched ...") on
// every rank (unless CommOptions::tuning.mpi.check_calls is false on rank 0,
// whose choice every rank takes at creation).
#ifndef RINGLAB_COMM_ADAPTERS_MPI_H_
#define RINGLAB_COMM_ADAPTERS_MPI_H_

#include <memory>

#include "comm/communicator.h"

namespace ringlab::comm {

// Calls MPI_Init_thread unless MPI is already initialised (then MPI_Finalize
// is left to whoever initialised it). Throws CommError when MPI's world does
// not match context.world_size (e.g. ranks started without mpirun).
std::unique_ptr<Communicator> CreateMpiCommunicator(const RankContext& context,
                                                    const CommOptions& options);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_ADAPTERS_MPI_H_
