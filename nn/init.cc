#include "nn/init.h"

#include "torch_compat/init.h"

namespace ringlab::nn {

void InitLikeTorch(const MlpLayout& layout, torch_compat::TorchGenerator& gen,
                   float* params) {
  for (int layer = 0; layer < layout.num_layers(); ++layer) {
    torch_compat::InitLinearLikeTorch(layout.widths()[layer],
                                      layout.widths()[layer + 1], gen,
                                      params + layout.weight(layer).offset,
                                      params + layout.bias(layer).offset);
  }
}

}  // namespace ringlab::nn
