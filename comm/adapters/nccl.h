// The `nccl` backend: one NCCL communicator per rank (the unique id travels
// through the store), collectives on the rank's own CUDA stream, and a
// deadline watchdog that plain NCCL lacks: NCCL runs non-blocking, the host
// polls the stream and ncclCommGetAsyncError until the deadline, and on a
// timeout, an NCCL error or a peer's exit it aborts the communicator
// (ncclCommAbort) and throws a CommError naming what it waited for. NCCL
// needs one GPU per rank: two ranks on one device fail at creation with a
// message saying so (use ipc_ring, or world size 1, on a one-GPU machine).
// Linking //comm/adapters:nccl registers "nccl" with CreateCommunicator.
#ifndef RINGLAB_COMM_ADAPTERS_NCCL_H_
#define RINGLAB_COMM_ADAPTERS_NCCL_H_

#include <memory>

#include "comm/communicator.h"

namespace ringlab::comm {

// Data pointers given to the collectives are device pointers on the rank's
// device (memory() == kDevice). Collectives run on the communicator's own
// CUDA stream, not the caller's: the caller must have finished writing the
// buffer (synchronised its stream, as CudaMlp does before returning) before
// the call; the result is complete when the call returns. Throws CommError
// when NCCL cannot start.
std::unique_ptr<Communicator> CreateNcclCommunicator(
    const RankContext& context, const CommOptions& options);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_ADAPTERS_NCCL_H_
