// ef_signsgd: DDP with EF-SignSGD (Karimireddy et al., 2019): per bucket,
// p = gradients + memory goes out as its signs, one bit each, and one scale,
// the mean magnitude ||p||_1 / d; every rank gathers all ranks' (scale,
// signs), averages scale * sign, and keeps p - scale * sign(p) in the memory.
// A zero counts as positive (GRACE's encoding, tensor >= 0). The sum of
// magnitudes is taken in double, so that its float32 rounding does not
// depend on the order of summing (a reference in PyTorch sums in another).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "sync/compressor.h"
#include "sync/ddp.h"

namespace ringlab::sync {
namespace {

class EfSignCompressor : public Compressor {
 public:
  Collective collective() const override { return Collective::kAllGather; }
  comm::DataType wire_type() const override { return comm::DataType::kFloat32; }
  // The scale, then the signs packed 32 to a word.
  size_t WireCount(size_t count) const override { return 1 + (count + 31) / 32; }
  void Encode(const float* grads, size_t count, int, void* wire) override {
    double magnitude = 0;
    for (size_t i = 0; i < count; ++i) magnitude += std::fabs(grads[i]);
    const float scale =
        count == 0 ? 0.0f
                   : static_cast<float>(magnitude / static_cast<double>(count));
    auto* words = static_cast<uint32_t*>(wire);
    std::memcpy(&words[0], &scale, sizeof(float));
    std::memset(&words[1], 0, (WireCount(count) - 1) * sizeof(uint32_t));
    for (size_t i = 0; i < count; ++i) {
      if (grads[i] >= 0.0f) words[1 + i / 32] |= uint32_t{1} << (i % 32);
    }
  }
  void Decode(const void* wire, size_t count, int, float* grads) override {
    const auto* words = static_cast<const uint32_t*>(wire);
    float scale;
    std::memcpy(&scale, &words[0], sizeof(float));
    for (size_t i = 0; i < count; ++i) {
      const bool positive = (words[1 + i / 32] >> (i % 32)) & 1u;
      grads[i] += positive ? scale : -scale;
    }
  }
};

SyncDescription DescribeEfSignSgd() {
  SyncDescription d;
  d.name = "ef_signsgd";
  d.summary =
      "DDP with EF-SignSGD: each bucket's signs and mean magnitude by "
      "allgather, what the signs miss kept for later (error feedback)";
  d.sends =
      "every step: 1 bit per gradient and one float32 per bucket, from every "
      "rank to every rank";
  d.pytorch = "none (GRACE's efsignsgd compressor with residual memory)";
  d.options = DdpOptions();
  d.options.push_back(BoolOption(
      "ef_signsgd_error_feedback", true,
      "keep what the signs miss and add it to the next step's gradients "
      "(false: scaled signSGD)"));
  d.create = [](const SyncContext& c) {
    return CreateCompressorSync(c, std::make_unique<EfSignCompressor>(),
                                c.options.Bool("ef_signsgd_error_feedback"));
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeEfSignSgd);

}  // namespace ringlab::sync
