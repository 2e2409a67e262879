// ef_signsgd: DDP with EF-SignSGD (Karimireddy et al., 2019): per bucket,
// p = gradients + memory goes out as its signs, one bit each, and one scale,
// the mean magnitude ||p||_1 / d; every rank gathers all ranks' (scale,
// signs), averages scale * sign, and keeps p - scale * sign(p) in the memory.
// A zero counts as positive (GRACE's encoding, tensor >= 0). The sum of
// magnitudes is taken in double (SumInDouble), so that a reference in
// PyTorch, which sums in another order, rounds it to the same float32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "sync/byte_codec.h"
#include "sync/compressor.h"

namespace ringlab::sync {
namespace {

class EfSignCompressor : public Compressor {
 public:
  Collective collective() const override { return Collective::kAllGather; }
  comm::DataType wire_type() const override { return comm::DataType::kFloat32; }
  // The scale, then the signs packed 32 to a word.
  size_t WireCount(size_t count) const override {
    return 1 + (count + 31) / 32;
  }
  void Encode(const float* grads, size_t count, int, void* wire) override {
    const double magnitude =
        SumInDouble(grads, count, [](float g) { return std::fabs(g); });
    const float scale =
        count == 0 ? 0.0f
                   : static_cast<float>(magnitude / static_cast<double>(count));
    auto* words = static_cast<uint32_t*>(wire);
    std::memcpy(&words[0], &scale, sizeof(float));
    for (size_t w = 0; w * 32 < count; ++w) {
      const float* g = grads + w * 32;
      const size_t n = std::min<size_t>(32, count - w * 32);
      uint32_t bits = 0;
      for (size_t j = 0; j < n; ++j) {
        bits |= static_cast<uint32_t>(g[j] >= 0.0f) << j;
      }
      words[1 + w] = bits;
    }
  }
  void Decode(const void* wire, size_t count, int, float* grads) override {
    const auto* words = static_cast<const uint32_t*>(wire);
    uint32_t scale_bits;
    std::memcpy(&scale_bits, &words[0], sizeof(float));
    for (size_t w = 0; w * 32 < count; ++w) {
      float* g = grads + w * 32;
      const size_t n = std::min<size_t>(32, count - w * 32);
      const uint32_t bits = words[1 + w];
      for (size_t j = 0; j < n; ++j) {
        // scale with its sign bit set where the sign is negative: no branch
        // on random bits.
        const uint32_t value = scale_bits | ((~bits >> j) & 1u) << 31;
        float v;
        std::memcpy(&v, &value, sizeof(float));
        g[j] += v;
      }
    }
  }
};

CompressorSync DescribeEfSignSgd() {
  CompressorSync c;
  SyncDescription& d = c.sync;
  d.name = "ef_signsgd";
  d.summary =
      "DDP with EF-SignSGD: each bucket's signs and mean magnitude by "
      "allgather, what the signs miss kept for later (error feedback)";
  d.sends =
      "every step: 1 bit per gradient and one float32 per bucket, from every "
      "rank to every rank";
  d.pytorch = "none (GRACE's efsignsgd compressor with residual memory)";
  d.options.push_back(BoolOption(
      "ef_signsgd_error_feedback", true,
      "keep what the signs miss and add it to the next step's gradients "
      "(false: scaled signSGD)"));
  c.make = [](const OptionValues&, int, int) {
    return std::make_unique<EfSignCompressor>();
  };
  c.error_feedback_option = "ef_signsgd_error_feedback";
  return c;
}

}  // namespace

RINGLAB_REGISTER_COMPRESSOR(DescribeEfSignSgd);

}  // namespace ringlab::sync
