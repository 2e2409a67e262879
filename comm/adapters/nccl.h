// nccl: NVIDIA's NCCL as a ringlab backend: one NCCL communicator per rank
// (the unique id travels through the communicator's store), collectives on
// the rank's own CUDA stream, and a deadline watchdog that plain NCCL lacks:
// NCCL runs non-blocking, the host polls the stream and
// ncclCommGetAsyncError until the deadline, and on a timeout, an NCCL error
// or a peer's exit it aborts the communicator (ncclCommAbort) and throws a
// CommError naming what it waited for. NCCL does not notice ranks that
// disagree on a call, so the front agrees on every call first (an ncclMax
// of a few integers through pinned memory; comm.check_calls 0 skips it).
// NCCL needs one GPU per rank: two ranks on one device fail at creation
// with a message saying so (use ipc_ring, or world size 1, on a one-GPU
// machine).
//
// Data pointers given to the collectives are device pointers on the rank's
// device. Collectives run on the backend's own stream, not the caller's: the
// caller must have finished writing the buffer (synchronised its stream, as
// CudaMlp does before returning) before the call; the result is complete
// when the call returns. Linking //comm/adapters:nccl registers "nccl".
#ifndef RINGLAB_COMM_ADAPTERS_NCCL_H_
#define RINGLAB_COMM_ADAPTERS_NCCL_H_

#endif  // RINGLAB_COMM_ADAPTERS_NCCL_H_
