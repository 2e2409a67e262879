// shm_ring: a Communicator for N processes on one machine over POSIX shared
// memory, choosing its algorithm by message size and by whether the ranks
// have a core each:
//   - up to 10 floats, inline: flag, description and data in one cache line;
//   - up to oneshot_bytes, one-shot: every rank posts its buffer,
//     then sums all of them in rank order;
//   - with a core per rank, a ring (reduce-scatter, then all-gather) whose
//     segments are cut into chunks that flow through small per-rank
//     mailboxes, so that rank r+1 reduces chunk k while rank r prepares
//     chunk k+1; each rank moves 2(N-1)/N of the buffer;
//   - with more ranks than cores, staged: through per-rank staging areas in
//     pieces, two synchronisations per piece instead of the ring's 2(N-1)
//     hand-offs per chunk (ring_bytes overrides the choice: the
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
// Tuning: CommOptions::tuning.shm_ring (comm/tuning.h: oneshot_bytes,
// chunk_bytes, stage_bytes, ring_bytes, stores, debug); rank 0's is used by
// every rank (its segment's header carries it), but for debug, each rank's
// own.
#ifndef RINGLAB_COMM_SHM_RING_SHM_RING_H_
#define RINGLAB_COMM_SHM_RING_SHM_RING_H_

#include <cstddef>
#include <memory>

#include "comm/communicator.h"

namespace ringlab::comm {

// Collective over the store in context (required). options.tuning as
// CreateCommunicator validated it (which is how to reach this). Throws
// CommError when the segment cannot be created or a peer does not show up by
// the deadline.
std::unique_ptr<Communicator> CreateShmRing(const RankContext& context,
                                            const CommOptions& options);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_SHM_RING_SHM_RING_H_
