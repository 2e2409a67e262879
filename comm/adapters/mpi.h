// mpi: MPI_Allreduce, MPI_Bcast, MPI_Allgather and MPI_Barrier on
// MPI_COMM_WORLD through Open MPI, for CPU runs across machines under mpirun
// and as the benchmark's anchor. Ranks come from MPI itself, not from the
// RankContext; the store is not used. Its own library so that binaries that
// do not want libmpi need not link it.
//
// MPI has no per-call deadline, so a watchdog thread aborts the whole job
// (MPI_Abort under MPI_THREAD_MULTIPLE, else it exits the rank, which mpirun
// turns into stopping the job) when one call has run longer than
// CommOptions::timeout; a rank that dies is otherwise handled by mpirun.
// MPI itself does not notice ranks that disagree on a call, so the front
// agrees on every call first, with one small MPI_Allreduce (comm.check_calls
// 0 measures plain MPI). Linking //comm/adapters:mpi registers "mpi".
#ifndef RINGLAB_COMM_ADAPTERS_MPI_H_
#define RINGLAB_COMM_ADAPTERS_MPI_H_

#endif  // RINGLAB_COMM_ADAPTERS_MPI_H_
