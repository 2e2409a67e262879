// Processes on this machine: whether one has ended, for the watch on a
// job's peers (comm/peers.h: PeerExited, PeerWatch) that lets a rank fail
// fast rather than wait out a deadline, whether it is ending or stopped (the
// launcher, before it blames a rank), and writing a whole message into a pipe
// to another (the launcher's forwarded output, the test drivers' reports).
#ifndef RINGLAB_COMM_PROCESS_H_
#define RINGLAB_COMM_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

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

// True when pid is stopped (SIGSTOP, Ctrl-Z's SIGTSTP: /proc/<pid>/stat's
// state T): alive, but answering nobody until continued. False for pid <= 0
// and for a pid that is gone.
bool ProcessStopped(pid_t pid);

// Writes all of `bytes` to fd (retrying short writes and EINTR); false when
// the descriptor took less (closed, or an error).
bool WriteFully(int fd, const std::string& bytes);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_PROCESS_H_
