// shm_ring: a backend for N processes on one machine over POSIX shared
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
//     from every rank's slot into all of them (regions.h).
// Every element is reduced once, in a fixed order, by one rank: results are
// bitwise identical on every rank and every run. AllGather takes the same
// paths by size (one-shot banks, staged, ring; allgather.cc).
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
// internal.h.
//
// Tuning: the shm_ring.* settings (tuning.h: oneshot_bytes, chunk_bytes,
// stage_bytes, ring_bytes, stores, debug); rank 0's is used by every rank
// (its segment's header carries it), but for debug, each rank's own.
#ifndef RINGLAB_COMM_SHM_RING_SHM_RING_H_
#define RINGLAB_COMM_SHM_RING_SHM_RING_H_

#include "comm/shm_ring/tuning.h"

// Linking //comm/shm_ring registers "shm_ring" with CreateCommunicator; its
// description (shm_ring.cc) lists its settings (tuning.h).

#endif  // RINGLAB_COMM_SHM_RING_SHM_RING_H_
