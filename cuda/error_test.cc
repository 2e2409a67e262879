// CudaError's messages: what failed and CUDA's name and text for it. Runs
// without a GPU (error names come from the runtime library, not a device).
#include "cuda/error.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

namespace ringlab::cuda {
namespace {

TEST(CudaErrorTest, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(Check(cudaSuccess, "nothing"));
}

TEST(CudaErrorTest, FailureNamesTheCallAndCudasVerdict) {
  try {
    Check(cudaErrorInvalidValue, "cudaMemcpy to the device");
    FAIL() << "no exception";
  } catch (const CudaError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cudaMemcpy to the device failed: cudaErrorInvalidValue "
              "(invalid argument)");
    EXPECT_EQ(e.status(), cudaErrorInvalidValue);
  }
}

TEST(CudaErrorTest, IsARuntimeError) {
  EXPECT_THROW(Check(cudaErrorMemoryAllocation, "cudaMalloc"),
               std::runtime_error);
}

TEST(CudaErrorTest, MacroNamesTheExpression) {
  try {
    RINGLAB_CUDA_CHECK(cudaErrorInvalidDevice);
    FAIL() << "no exception";
  } catch (const CudaError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cudaErrorInvalidDevice failed: ", 0),
              0u)
        << e.what();
  }
}

TEST(CudaErrorTest, ErrorText) {
  EXPECT_EQ(ErrorText(cudaErrorNoDevice),
            "cudaErrorNoDevice (no CUDA-capable device is detected)");
}

}  // namespace
}  // namespace ringlab::cuda
