#include "comm/cuda_support.h"

#include "cuda/device.h"
#include "cuda/error.h"

namespace ringlab::comm {

void CudaCheck(int status, const char* backend, const std::string& what) {
  try {
    cuda::Check(status, what);
  } catch (const cuda::CudaError& e) {
    throw CommError(std::string(backend) + ": " + e.what());
  }
}

int SelectCudaDevice(const CommOptions& options, int local_rank,
                     const char* backend) {
  try {
    return cuda::SelectRankDevice(options.cuda_device, local_rank);
  } catch (const cuda::CudaError& e) {
    throw CommError(std::string(backend) + ": " + e.what());
  }
}

}  // namespace ringlab::comm
