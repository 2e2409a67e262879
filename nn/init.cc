#include "nn/init.h"

#include <cmath>

namespace ringlab::nn {

double KaimingUniformBound(int fan_in) {
  // torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5)), step by step as
  // torch 1.13's Python does it: gain = calculate_gain('leaky_relu', a) =
  // sqrt(2 / (1 + a**2)), std = gain / sqrt(fan), bound = sqrt(3) * std.
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double std_dev = gain / std::sqrt(static_cast<double>(fan_in));
  return std::sqrt(3.0) * std_dev;
}

double LinearBiasBound(int fan_in) {
  return fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
}

void InitLikeTorch(const MlpLayout& layout, TorchGenerator& gen,
                   float* params) {
  for (int layer = 0; layer < layout.num_layers(); ++layer) {
    const int fan_in = layout.widths()[layer];
    const TensorSlot& w = layout.weight(layer);
    const TensorSlot& b = layout.bias(layer);
    const double wb = KaimingUniformBound(fan_in);
    for (size_t i = 0; i < w.size; ++i) {
      params[w.offset + i] =
          gen.Uniform(static_cast<float>(-wb), static_cast<float>(wb));
    }
    const double bb = LinearBiasBound(fan_in);
    for (size_t i = 0; i < b.size; ++i) {
      params[b.offset + i] =
          gen.Uniform(static_cast<float>(-bb), static_cast<float>(bb));
    }
  }
}

}  // namespace ringlab::nn
