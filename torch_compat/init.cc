// Built with -ffp-contract=off (see BUILD), as the generator's draws.
#include "torch_compat/init.h"

#include <cmath>
#include <cstddef>

namespace ringlab::torch_compat {

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

void InitLinearLikeTorch(int in_features, int out_features, TorchGenerator& gen,
                         float* weight, float* bias) {
  const size_t weights = static_cast<size_t>(in_features) * out_features;
  const double wb = KaimingUniformBound(in_features);
  for (size_t i = 0; i < weights; ++i) {
    weight[i] = gen.Uniform(static_cast<float>(-wb), static_cast<float>(wb));
  }
  const double bb = LinearBiasBound(in_features);
  for (int i = 0; i < out_features; ++i) {
    bias[i] = gen.Uniform(static_cast<float>(-bb), static_cast<float>(bb));
  }
}

}  // namespace ringlab::torch_compat
