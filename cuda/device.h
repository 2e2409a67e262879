// Which CUDA devices this process has and which one a thread uses: the count
// (asked in this process, or of a forked child so that a process that forks
// ranks never initialises CUDA itself), the device a rank uses (LOCAL_RANK
// modulo the count, as torchrun-style launchers expect), and making a device
// current. Failures throw CudaError (cuda/error.h), except the counts, which
// answer 0 and say why.
#ifndef RINGLAB_CUDA_DEVICE_H_
#define RINGLAB_CUDA_DEVICE_H_

#include <string>

namespace ringlab::cuda {

// Number of CUDA devices; 0 on any error (no driver, no device), with the
// reason in *why when why is not null. Never throws. Initialises CUDA in the
// calling process.
int DeviceCount(std::string* why);

// The same, asked of a forked child: the caller's process never touches CUDA
// (CUDA does not survive fork(), so a parent that forks ranks must not). A
// child that has not answered within 60 s is killed: 0, "no device (probe
// timed out ...)".
int DeviceCountInChild(std::string* why);

// The device of the rank with this local rank: local_rank modulo
// DeviceCount(). Throws CudaError("no CUDA device (<why>)") where there is
// none, std::invalid_argument for local_rank < 0. Makes nothing current.
int LocalDevice(int local_rank);

// Makes `device` the calling thread's current device (cudaSetDevice). Throws
// CudaError when there is no device or the index is out of range.
void SelectDevice(int device);

// A rank's device made current and returned: `requested` when >= 0, else
// LocalDevice(local_rank). Throws as those do.
int SelectRankDevice(int requested, int local_rank);

// The calling thread's current device (cudaGetDevice); throws CudaError.
int CurrentDevice();

// Waits until the current device has finished all work (cudaDeviceSynchronize)
// and throws CudaError for any error that work raised.
void Synchronize();

}  // namespace ringlab::cuda

#endif  // RINGLAB_CUDA_DEVICE_H_
