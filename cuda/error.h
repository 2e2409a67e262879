// How every ringlab package checks a CUDA runtime call: a failed call throws
// CudaError, whose message names the call and CUDA's verdict ("cudaMalloc
// failed: cudaErrorMemoryAllocation (out of memory)"). One exception type for
// all CUDA failures; a package whose contract promises another type (comm's
// CommError) converts at its boundary. The header needs no CUDA header, so
// host-only code can name the type.
#ifndef RINGLAB_CUDA_ERROR_H_
#define RINGLAB_CUDA_ERROR_H_

#include <stdexcept>
#include <string>

namespace ringlab::cuda {

class CudaError : public std::runtime_error {
 public:
  // status: the cudaError_t of the failed call (cudaErrorInvalidDevice where
  // no call failed but a device index is out of range, for instance); for a
  // CUDA library checked the same way (nn's cuBLAS calls), its status code.
  CudaError(const std::string& what, int status)
      : std::runtime_error(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// "<name> (<description>)" of a cudaError_t, e.g.
// "cudaErrorNoDevice (no CUDA-capable device is detected)".
std::string ErrorText(int status);

// Throws CudaError("<what> failed: <ErrorText(status)>") unless status is
// cudaSuccess. Takes an int so that callers pass any cudaError_t unchanged.
void Check(int status, const std::string& what);

}  // namespace ringlab::cuda

// Checks a CUDA runtime call, naming it by its source text.
#define RINGLAB_CUDA_CHECK(expr) \
  ::ringlab::cuda::Check(static_cast<int>(expr), #expr)

#endif  // RINGLAB_CUDA_ERROR_H_
