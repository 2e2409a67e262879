// nn.Linear's default initialisation (reset_parameters), reproduced bit for
// bit: with the same generator state, InitLinearLikeTorch draws exactly the
// numbers torch 1.13 (CPU) puts in a Linear layer's weight and bias, so that
// a model built layer by layer in construction order after
// torch.manual_seed(seed) holds PyTorch's very parameters. Knows nothing of
// any model's layout (nn/init.h applies it to an MLP).
#ifndef RINGLAB_TORCH_COMPAT_INIT_H_
#define RINGLAB_TORCH_COMPAT_INIT_H_

#include "torch_compat/generator.h"

namespace ringlab::torch_compat {

// Weight (out_features x in_features, row-major) then bias (out_features),
// each U(-b, b): weight b = sqrt(3) * gain / sqrt(fan_in) with
// gain = sqrt(2 / (1 + 5)) (kaiming_uniform_ with a = sqrt(5)), bias
// b = 1 / sqrt(fan_in), fan_in = in_features; the bounds are computed in
// double as Python does and rounded to float once.
void InitLinearLikeTorch(int in_features, int out_features, TorchGenerator& gen,
                         float* weight, float* bias);

// The two bounds, exposed for tests.
double KaimingUniformBound(int fan_in);
double LinearBiasBound(int fan_in);

}  // namespace ringlab::torch_compat

#endif  // RINGLAB_TORCH_COMPAT_INIT_H_
