// An MLP initialised as PyTorch initialises the same network: with the same
// seed, InitLikeTorch fills the flat parameter buffer with exactly the numbers
// torch.manual_seed(seed); Net() puts in its state_dict (torch 1.13, CPU), by
// applying nn.Linear's initialisation (torch_compat/init.h) layer by layer in
// construction order.
#ifndef RINGLAB_NN_INIT_H_
#define RINGLAB_NN_INIT_H_

#include "nn/mlp.h"
#include "torch_compat/generator.h"

namespace ringlab::nn {

// params must hold layout.num_params() floats.
void InitLikeTorch(const MlpLayout& layout, torch_compat::TorchGenerator& gen,
                   float* params);

}  // namespace ringlab::nn

#endif  // RINGLAB_NN_INIT_H_
