// The CUDA backend's small kernels (everything that is not a GEMM), as
// host-side launchers callable from ordinary C++: bias add (+ReLU), ReLU
// backward, bias gradient, softmax cross-entropy (loss rows + logit gradient),
// the loss mean, and SGD. Each launches on the given stream and returns the
// launch's cudaError_t, which the caller checks (the error state is cleared
// first, so that an older error is not reported as this launch's). Their
// arithmetic is cuda_kernel_math.h's, which the tests also run on the CPU.
#ifndef RINGLAB_NN_CUDA_KERNELS_H_
#define RINGLAB_NN_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ringlab::nn::cuda {

// y[j, i] += b[i] for a row-major [rows, cols] y; then ReLU when relu.
cudaError_t AddBias(float* y, const float* b, int rows, int cols, bool relu,
                    cudaStream_t stream);
// dh[k] = h[k] > 0 ? dh[k] : 0.
cudaError_t ReluBackward(const float* h, float* dh, int64_t n,
                         cudaStream_t stream);
// db[i] = Σ_j dy[j, i], j in order.
cudaError_t BiasGrad(const float* dy, float* db, int rows, int cols,
                     cudaStream_t stream);
// Per row j: row_loss[j] = -log_softmax(z_j)[y_j]; dz = (softmax -
// onehot)/rows.
cudaError_t SoftmaxCrossEntropy(const float* logits, const int64_t* labels,
                                int rows, int cols, float* row_loss,
                                float* dlogits, cudaStream_t stream);
// *out = Σ row_loss / rows (one block).
cudaError_t MeanLoss(const float* row_loss, int rows, float* out,
                     cudaStream_t stream);
// torch.optim.SGD on n floats; buf may be null when momentum == 0; first
// says the momentum buffer is not yet initialised.
cudaError_t Sgd(float* params, const float* grads, float* buf, int64_t n,
                float lr, float momentum, double dampening, float weight_decay,
                bool nesterov, bool first, cudaStream_t stream);

}  // namespace ringlab::nn::cuda

#endif  // RINGLAB_NN_CUDA_KERNELS_H_
