// ipc_ring: shm_ring's ring on GPUs, between processes on one machine, over
// CUDA IPC. Each rank allocates one device region (progress counters, then a
// data buffer) once, exports it with cudaIpcGetMemHandle, and maps every
// peer's through the store and cudaIpcOpenMemHandle. AllReduce copies the
// caller's device buffer into the registered one and runs, in one kernel, the
// reduce-scatter and all-gather of shm_ring (segments cut into chunks so that
// reading chunk k+1 overlaps reducing chunk k, 16-byte loads), synchronised by
// system-scope release/acquire counters, and ends with a barrier so that no
// rank overwrites a buffer a peer still reads. Messages up to a threshold take
// a one-shot kernel (every rank reads all peers' buffers and adds them in rank
// order). Either way every element is reduced once, in a fixed order, so
// results are bitwise identical on every rank. Buffers larger than the
// registered one go through in pieces.
//
// Ranks publish a descriptor of each call next to their counters, so that
// ranks in different collectives fail with "mismatched collectives" rather
// than hang or corrupt each other's data, as in shm_ring.
//
// Works with one GPU per rank (LOCAL_RANK) and with several ranks sharing one
// GPU (kernels of different processes then time-slice: correct, not fast;
// each collective costs at least a time slice). ipc_ring_threads runs the
// same kernels with the ranks as threads of one process, side by side on one
// GPU. Waits have the CommOptions deadline
// on the device (a spinning kernel gives up and says why) and on the host,
// which also watches peers' processes and stops the kernel when one exits.
// Mappings, handles and device memory are released on every exit path; a
// region a peer may still map (it did not say it unmapped it by the
// deadline) is leaked rather than freed. The collectives themselves are
// IpcRingCore's (core.h).
//
// Data pointers are device pointers on the rank's device, of any alignment
// (unaligned ones take a scalar path). Collectives run on the backend's own
// CUDA stream, not the caller's: the caller must have finished writing the
// buffer (synchronised its stream, as CudaMlp does before returning) before
// the call; the result is complete when the call returns. Needs one process
// per rank (CUDA IPC cannot map a process's own memory): two ranks in one
// process fail with a CommError saying so (and naming ipc_ring_threads).
// Creation waits join_timeout for peers, collectives timeout.
//
// Tuning: the ipc_ring.* settings (tuning.h: oneshot_bytes, the one-shot
// threshold; chunk_bytes, the ring's chunk; buffer_bytes, the registered
// buffer), rank 0's used by all (published at creation). Linking
// //comm/ipc_ring registers "ipc_ring" with CreateCommunicator.
#ifndef RINGLAB_COMM_IPC_RING_IPC_RING_H_
#define RINGLAB_COMM_IPC_RING_IPC_RING_H_

#include "comm/ipc_ring/tuning.h"

#endif  // RINGLAB_COMM_IPC_RING_IPC_RING_H_
