// PyTorch's CPU random stream re-implemented: a 32-bit Mersenne Twister seeded
// as torch.manual_seed does, plus the few draws ringlab needs (uniform floats
// for nn.Linear's init, randperm for DistributedSampler, randint), each
// reproducing torch 1.13's CPU results bit for bit (see
// shared/pytorch-facts.md), so a run of ringlab and a run of the PyTorch script
// start from the same numbers.
#ifndef RINGLAB_TORCH_COMPAT_GENERATOR_H_
#define RINGLAB_TORCH_COMPAT_GENERATOR_H_

#include <cstdint>
#include <random>
#include <vector>

namespace ringlab::torch_compat {

class TorchGenerator {
 public:
  // torch.manual_seed(seed): the generator takes seed mod 2^32.
  explicit TorchGenerator(uint64_t seed = 0) { ManualSeed(seed); }
  void ManualSeed(uint64_t seed) {
    gen_.seed(static_cast<uint32_t>(seed & 0xFFFFFFFFu));
  }

  // One raw 32-bit draw.
  uint32_t Next() { return static_cast<uint32_t>(gen_()); }

  // One element of tensor.uniform_(from, to) (float32): 24 random bits scaled
  // to [0, 1), then a fused multiply-add, as torch's AVX2 build computes it.
  float Uniform(float from, float to);
  // Uniform(0, 1) without the multiply-add, which there leaves the draw as
  // it is (u * 1 + 0): the same bits, without the library call std::fmaf is
  // on the baseline x86-64.
  float UnitUniform() {
    return static_cast<float>(Next() & 0xFFFFFFu) * 0x1p-24f;
  }

  // torch.randperm(n, generator=g): forward Fisher–Yates, one draw per step.
  // Throws std::invalid_argument for n < 0.
  std::vector<int64_t> RandPerm(int64_t n);
  // torch.randperm(n, generator=g)[:k], drawing k times where RandPerm draws
  // n - 1 (its step i fixes element i) and holding only what moved. Throws
  // std::invalid_argument unless 0 <= k <= n.
  std::vector<int64_t> RandPermPrefix(int64_t n, int64_t k);

  // One element of torch.randint(0, k, ...): Next() % k. Throws
  // std::invalid_argument for k <= 0 or k >= 2^32 (where torch draws 64 bits).
  int64_t RandInt(int64_t k);

 private:
  std::mt19937 gen_;
};

}  // namespace ringlab::torch_compat

#endif  // RINGLAB_TORCH_COMPAT_GENERATOR_H_
