// The CUDA backend of Mlp: parameters, gradients, momentum buffers and
// activations in device memory; GEMMs by cuBLAS, the rest by the kernels in
// cuda_kernels.h, all on one stream. Linking //nn:cuda_mlp registers it as
// Device::kCuda; CreateMlp(kCuda, …) then throws std::runtime_error only when
// no device can be used. Every CUDA and cuBLAS call is checked (failures throw
// cuda::CudaError). How many devices there are: cuda/device.h.
#ifndef RINGLAB_NN_CUDA_MLP_H_
#define RINGLAB_NN_CUDA_MLP_H_

#endif  // RINGLAB_NN_CUDA_MLP_H_
