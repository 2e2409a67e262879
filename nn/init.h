// nn.Linear's default initialisation, reproduced bit for bit: with the same
// seed, InitLikeTorch fills the flat parameter buffer with exactly the numbers
// torch.manual_seed(seed); Net() puts in its state_dict (torch 1.13, CPU).
#ifndef RINGLAB_NN_INIT_H_
#define RINGLAB_NN_INIT_H_

#include "nn/mlp.h"
#include "nn/torch_rng.h"

namespace ringlab::nn {

// Layer by layer, weight then bias (construction order), each U(-b, b):
// weight b = sqrt(3) * gain / sqrt(fan_in) with gain = sqrt(2 / (1 + 5))
// (kaiming_uniform_ with a = sqrt(5)), bias b = 1 / sqrt(fan_in); the bounds
// are computed in double as Python does and rounded to float once. params must
// hold layout.num_params() floats.
void InitLikeTorch(const MlpLayout& layout, TorchGenerator& gen, float* params);

// The two bounds, exposed for tests.
double KaimingUniformBound(int fan_in);
double LinearBiasBound(int fan_in);

}  // namespace ringlab::nn

#endif  // RINGLAB_NN_INIT_H_
