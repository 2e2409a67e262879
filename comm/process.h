// Whether a process on this machine has ended, for the watch on a job's
// peers (comm/peers.h: PeerExited, PeerWatch) that lets a rank fail fast
// rather than wait out a deadline, and whether it is ending (the launcher,
// before it blames a rank).
#ifndef RINGLAB_COMM_PROCESS_H_
#define RINGLAB_COMM_PROCESS_H_

#include <sys/types.h>

#include <cstdint>

namespace ringlab::comm {

// True when pid no longer runs: gone, or a zombie nobody has reaped yet.
// False for pid <= 0.
bool ProcessExited(pid_t pid);

// When pid started, in clock ticks since boot (/proc/<pid>/stat's
// starttime); 0 when it cannot be read (gone, or pid <= 0).
uint64_t ProcessStartTime(pid_t pid);

// True when pid is on its way out (the kernel's PF_EXITING on its main
// thread): killed or returning, soon waitable. False for pid <= 0 and for a
// pid that is gone.
bool ProcessExiting(pid_t pid);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_PROCESS_H_
