// shm_ring: a Communicator for N processes on one machine over POSIX shared
// memory, choosing its algorithm by message size and by whether the ranks
// have a core each:
//   - up to 10 floats, inline: flag, description and data in one cache line;
//   - up to RINGLAB_SHM_ONESHOT_BYTES, one-shot: every rank posts its buffer,
//     then sums all of them in rank order;
//   - with a core per rank, a ring (reduce-scatter, then all-gather) whose
//     segments are cut into chunks that flow through small per-rank
//     mailboxes, so that rank r+1 reduces chunk k while rank r prepares
//     chunk k+1; each rank moves 2(N-1)/N of the buffer;
//   - with more ranks than cores, staged: through per-rank staging areas in
//     pieces, two synchronisations per piece instead of the ring's 2(N-1)
//     hand-offs per chunk (RINGLAB_SHM_RING_BYTES overrides the choice: the
//     ring from that size up);
//   - on registered memory (Allocate), zero-copy: each rank sums one segment
//     from every rank's slot into all of them (shm_regions.h).
// Every element is reduced once, in a fixed order, by one rank: results are
// bitwise identical on every rank and every run. AllGather takes the same
// paths by size (one-shot banks, staged, ring; shm_allgather.cc).
//
// Waits spin briefly, yield, then sleep on a futex, so more ranks than cores
// still progress and a busy core is not burnt; every wait has the
// CommOptions deadline and checks that the peer it waits on is still alive.
// The segment is an anonymous memfd of rank 0's, which peers open through
// /proc/<pid>/fd/<fd> (so the ranks must share the user, the machine and the
// PID namespace): it never has a name in /dev/shm, so nothing is left there
// after any exit, SIGKILL included. Its memory is reserved at creation (a
// CommError, not a SIGBUS, when too little is free). A rank that fails or
// dies while the ranks join is named by the others at once.
//
// The implementation, one concept per file, is listed in
// shm_ring_internal.h.
//
// Tuning (validated by every rank, rank 0's used by all):
// RINGLAB_SHM_ONESHOT_BYTES, RINGLAB_SHM_CHUNK_BYTES (the ring's chunk),
// RINGLAB_SHM_STAGE_BYTES (the staging area per rank), RINGLAB_SHM_RING_BYTES
// and RINGLAB_SHM_STREAM_STORES (0: cached, 1: non-temporal stores into the
// mailboxes; unset: chosen at creation from the measured barrier latency).
#ifndef RINGLAB_COMM_SHM_RING_H_
#define RINGLAB_COMM_SHM_RING_H_

#include <cstddef>
#include <memory>

#include "comm/communicator.h"

namespace ringlab::comm {

// Defaults measured with bench/allreduce_bench at 2 ranks (2-vCPU VM, under
// chrt -f 10): up to 10 floats the inline path (flag, description and data in
// one cache line) took 0.26-0.30 us against the ring's 0.45-0.5; at 1-4 KiB
// one-shot and ring tied; from 16 KiB the ring was faster (1.2x at 16 KiB, 2x
// at 256 KiB). Chunks of 16 KiB to 256 KiB were within noise of each other
// from 256 KiB to 64 MiB.
inline constexpr size_t kShmRingDefaultOneShotBytes = 4 << 10;
inline constexpr size_t kShmRingDefaultChunkBytes = 128 << 10;
inline constexpr size_t kShmRingDefaultStageBytes = 1 << 20;

// Collective over the store in context (required). Throws CommError when the
// segment cannot be created or a peer does not show up by the deadline.
std::unique_ptr<Communicator> CreateShmRing(const RankContext& context,
                                            const CommOptions& options);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_SHM_RING_H_
