// Built with -ffp-contract=off (see BUILD): the one fused operation below must
// be the explicit std::fmaf, and nothing else may be fused or reordered.
#include "torch_compat/generator.h"

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace ringlab::torch_compat {

float TorchGenerator::Uniform(float from, float to) {
  // 2^-24 is exact in float; the product with a 24-bit integer is exact too.
  const float u = static_cast<float>(Next() & 0xFFFFFFu) * 0x1p-24f;
  return std::fmaf(u, to - from, from);
}

std::vector<int64_t> TorchGenerator::RandPerm(int64_t n) {
  if (n < 0) {
    throw std::invalid_argument("RandPerm: n must be >= 0, got " +
                                std::to_string(n));
  }
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), int64_t{0});
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z =
        static_cast<int64_t>(Next() % static_cast<uint64_t>(n - i));
    std::swap(r[i], r[i + z]);
  }
  return r;
}

std::vector<int64_t> TorchGenerator::RandPermPrefix(int64_t n, int64_t k) {
  if (k < 0 || k > n) {
    throw std::invalid_argument("RandPermPrefix: k must be in [0, " +
                                std::to_string(n) + "], got " +
                                std::to_string(k));
  }
  // The permutation's elements that differ from the identity.
  std::unordered_map<int64_t, int64_t> moved;
  moved.reserve(static_cast<size_t>(2 * k));
  auto at = [&moved](int64_t i) {
    const auto it = moved.find(i);
    return it == moved.end() ? i : it->second;
  };
  std::vector<int64_t> prefix(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    int64_t chosen = at(i);
    if (i + 1 < n) {
      const int64_t z =
          static_cast<int64_t>(Next() % static_cast<uint64_t>(n - i));
      const int64_t other = at(i + z);
      moved[i + z] = chosen;
      chosen = other;
    }
    prefix[static_cast<size_t>(i)] = chosen;
  }
  return prefix;
}

int64_t TorchGenerator::RandInt(int64_t k) {
  if (k <= 0) {
    throw std::invalid_argument("RandInt: k must be > 0, got " +
                                std::to_string(k));
  }
  // From 2^32 on torch draws 64 bits per element, which is not reproduced.
  if (k >= (int64_t{1} << 32)) {
    throw std::invalid_argument("RandInt: k must be below 2^32, got " +
                                std::to_string(k));
  }
  return static_cast<int64_t>(Next() % static_cast<uint64_t>(k));
}

}  // namespace ringlab::torch_compat
