// //cuda in comm's terms, for the GPU backends (nccl, ipc_ring,
// ipc_ring_threads): their contract is that every failure is a CommError, so
// CUDA's errors and the device choice are rethrown as CommError naming the
// backend.
#ifndef RINGLAB_COMM_CUDA_SUPPORT_H_
#define RINGLAB_COMM_CUDA_SUPPORT_H_

#include <string>

#include "comm/communicator.h"

namespace ringlab::comm {

// Throws CommError("<backend>: <what> failed: <CUDA's name and message>") when
// `status` (a cudaError_t) is not cudaSuccess.
void CudaCheck(int status, const char* backend, const std::string& what);

// The CUDA device of this rank: options.cuda_device when >= 0, else
// cuda::LocalDevice(local_rank) (local_rank mod the device count). Makes it
// current; throws CommError("<backend>: no CUDA device (...)") when there is
// none, or "<backend>: CUDA device N out of range (M devices)".
int SelectCudaDevice(const CommOptions& options, int local_rank,
                     const char* backend);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_CUDA_SUPPORT_H_
