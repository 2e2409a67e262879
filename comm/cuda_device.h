// Shared plumbing of the GPU backends (nccl, ipc_ring): CUDA error checks that
// throw CommError, the choice of device for a rank, a device count that never
// throws (and a variant that asks a forked child, so that a test's parent
// process never initialises CUDA before it forks its ranks), and PeerWatch,
// which tells a waiting rank that a peer on the same host has exited, so
// collectives fail at once instead of at their deadline; and PollPacer, the
// rhythm of the host's polling loops.
#ifndef RINGLAB_COMM_CUDA_DEVICE_H_
#define RINGLAB_COMM_CUDA_DEVICE_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::comm {

// Throws CommError("<backend>: <what> failed: <CUDA's name and message>") when
// `status` (a cudaError_t) is not cudaSuccess.
void CudaCheck(int status, const char* backend, const std::string& what);

// The CUDA device of this rank: options.cuda_device when >= 0, else
// local_rank mod the device count. Makes it current; throws CommError when
// there is no device or the index is out of range.
int SelectCudaDevice(const CommOptions& options, int local_rank,
                     const char* backend);

// Number of CUDA devices, 0 on any error (no driver, no device), with the
// reason in *why. Initialises CUDA in the calling process.
int CudaDeviceCount(std::string* why);

// Opaque handles (IPC memory handles, NCCL unique ids) as text for the store,
// and back; FromHex returns false unless hex holds exactly size bytes.
std::string ToHex(const void* data, size_t size);
bool FromHex(const std::string& hex, void* data, size_t size);

// The same, asked of a forked child: the caller's process never touches CUDA
// (CUDA does not survive fork(), so a parent that forks ranks must not). A
// child that has not answered within 60 s is killed: 0, "no device (probe
// timed out ...)".
int CudaDeviceCountInChild(std::string* why);

// This host's name plus its PID namespace: a pid, or a GPU's PCI bus id,
// means the same process or device only to peers that share both
// (containers may share a host name, not a namespace).
std::string HostIdentity();

// Watches the peers of a rank that live on the same host (by hostname and
// pid, exchanged through the store when the communicator is created).
class PeerWatch {
 public:
  // Publishes this rank's host and pid under `prefix` and reads the peers'.
  PeerWatch(Store* store, const std::string& prefix, int rank, int world_size,
            std::chrono::milliseconds timeout);
  PeerWatch() = default;

  // The lowest rank known to have exited, or -1. Cheap enough to call every
  // millisecond: one kill(pid, 0) per local peer, /proc only when it is alive.
  int FirstDeadPeer() const;

  // Whether `rank` is a peer on this host known to have exited.
  bool Exited(int rank) const;

 private:
  std::vector<pid_t> local_pids_;  // per rank; 0 for self and remote ranks
};

// Paces a host thread that polls a GPU: it spins (yielding) for the first
// 2 ms, since small collectives finish in microseconds and a sleep would
// dominate them, then sleeps 50 us between polls; the slower checks (peers'
// processes, deadlines) are due once a millisecond.
class PollPacer {
 public:
  PollPacer();
  bool CheckDue();  // true about once a millisecond (and on the first call)
  void Pause();

 private:
  std::chrono::steady_clock::time_point start_, last_check_;
  bool first_ = true;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_CUDA_DEVICE_H_
