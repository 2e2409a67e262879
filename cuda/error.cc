#include "cuda/error.h"

#include <cuda_runtime_api.h>

namespace ringlab::cuda {

std::string ErrorText(int status) {
  const auto err = static_cast<cudaError_t>(status);
  return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) +
         ")";
}

void Check(int status, const std::string& what) {
  if (status == cudaSuccess) return;
  throw CudaError(what + " failed: " + ErrorText(status), status);
}

}  // namespace ringlab::cuda
