// qsgd: DDP with QSGD (Alistarh et al., 2017): per bucket, the L2 norm and,
// per gradient, its sign and a level in [0, s] of |g| / norm, rounded up
// with probability the remainder (stochastic rounding, unbiased), one byte
// each; every rank gathers all ranks' wires and averages norm / s * level.
// The rounding draws torch.rand from a generator seeded per bucket and rank
// (EncodeSeeds), one draw per gradient, in the model's order of the bucket's
// tensors. The norm is summed in double (SumInDouble), so that a reference
// in PyTorch, which sums in another order, rounds it to the same float32.
// Unbiased, so error feedback is off by default.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "sync/byte_codec.h"
#include "sync/compressor.h"
#include "torch_compat/generator.h"

namespace ringlab::sync {
namespace {

class QsgdCompressor : public Compressor {
 public:
  QsgdCompressor(int levels, int64_t seed, int rank, int world_size)
      : levels_(levels),
        seeds_("qsgd_draws", seed, static_cast<uint64_t>(world_size),
               static_cast<uint64_t>(rank)) {}
  Collective collective() const override { return Collective::kAllGather; }
  comm::DataType wire_type() const override { return comm::DataType::kFloat32; }
  size_t WireCount(size_t count) const override { return ByteWireCount(count); }
  void Encode(const float* grads, size_t count, int, void* wire) override {
    const double squares = SumInDouble(grads, count, [](float g) {
      return static_cast<double>(g) * static_cast<double>(g);
    });
    const auto norm = static_cast<float>(std::sqrt(squares));
    PutHeader(norm, wire);
    int8_t* levels = WireBytes(wire);
    torch_compat::TorchGenerator generator(seeds_.Next());
    const auto top = static_cast<float>(levels_);
    const float per_unit = norm > 0.0f ? top / norm : 0.0f;
    for (size_t i = 0; i < count; ++i) {
      const float u = generator.UnitUniform();
      // In [0, s] but for rounding, a norm so small that s / norm is
      // infinite, or a NaN (then 0): clamped, so that truncation is floor.
      const float scaled = per_unit * std::fabs(grads[i]);
      const float exact = scaled >= 0.0f ? (scaled < top ? scaled : top) : 0.0f;
      const auto lower = static_cast<float>(static_cast<int>(exact));
      const float level =
          std::min(lower + (u < exact - lower ? 1.0f : 0.0f), top);
      const auto byte = static_cast<int8_t>(level);
      levels[i] = grads[i] < 0.0f ? static_cast<int8_t>(-byte) : byte;
    }
  }
  void Decode(const void* wire, size_t count, int, float* grads) override {
    const float unit = GetHeader(wire) / static_cast<float>(levels_);
    const int8_t* levels = WireBytes(wire);
    for (size_t i = 0; i < count; ++i) {
      grads[i] += unit * static_cast<float>(levels[i]);
    }
  }
  std::vector<SyncTensor> state() override { return seeds_.state(); }
  void Restored() override { seeds_.Restored(); }

 private:
  const int levels_;
  EncodeSeeds seeds_;
};

CompressorSync DescribeQsgd() {
  CompressorSync c;
  SyncDescription& d = c.sync;
  d.name = "qsgd";
  d.summary =
      "DDP with QSGD: each bucket's norm and each gradient's sign and level "
      "of s, stochastically rounded, by allgather";
  d.sends =
      "every step: 1 byte per gradient and one float32 per bucket, from "
      "every rank to every rank";
  d.pytorch = "none (GRACE's qsgd compressor)";
  d.options.push_back(IntOption("qsgd_levels", 64, 1, 127,
                                "s: the levels between 0 and the norm"));
  d.options.push_back(IntOption("qsgd_seed", 0, 0, 0xffffffffLL,
                                "the seed of the rounding's generator"));
  d.options.push_back(BoolOption(
      "qsgd_error_feedback", false,
      "keep what the levels miss and add it to the next step's gradients"));
  c.make = [](const OptionValues& o, int rank, int world_size) {
    return std::make_unique<QsgdCompressor>(
        static_cast<int>(o.Int("qsgd_levels")), o.Int("qsgd_seed"), rank,
        world_size);
  };
  c.error_feedback_option = "qsgd_error_feedback";
  return c;
}

}  // namespace

RINGLAB_REGISTER_COMPRESSOR(DescribeQsgd);

}  // namespace ringlab::sync
