// The CUDA backend of Mlp: parameters, gradients, momentum buffers and
// activations in device memory; GEMMs by cuBLAS, the rest by the kernels in
// cuda_kernels.h, all on one stream. Linking //nn:cuda_mlp registers it as
// Device::kCuda; CreateMlp(kCuda, …) then throws std::runtime_error only when
// no device can be used. Every CUDA and cuBLAS call is checked.
#ifndef RINGLAB_NN_CUDA_MLP_H_
#define RINGLAB_NN_CUDA_MLP_H_

#include <string>

namespace ringlab::nn {

// Number of usable CUDA devices; 0 (with the reason in *why, if not null) when
// the runtime reports any error, e.g. no driver on this machine.
int CudaDeviceCount(std::string* why);

}  // namespace ringlab::nn

#endif  // RINGLAB_NN_CUDA_MLP_H_
