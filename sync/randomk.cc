// randomk: DDP with random-k sparsification and error feedback (Stich et
// al., 2018; GRACE's randomk): per bucket, k gradients at positions drawn
// from a torch generator that every rank seeds alike, so the positions need
// not travel: the k values are averaged by allreduce (4k bytes), the others
// stay in the memory for the next step. The positions are the first k of
// torch.randperm(count), in the model's order of the bucket's tensors.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "sync/compressor.h"
#include "torch_compat/generator.h"

namespace ringlab::sync {
namespace {

class RandomKCompressor : public Compressor {
 public:
  RandomKCompressor(double ratio, int64_t seed)
      : ratio_(ratio), seeds_("randomk_draws", seed, 1, 0) {}
  Collective collective() const override { return Collective::kAllReduce; }
  comm::DataType wire_type() const override { return comm::DataType::kFloat32; }
  size_t WireCount(size_t count) const override { return K(count); }
  void Encode(const float* grads, size_t count, int world_size,
              void* wire) override {
    Choose(count);
    auto* values = static_cast<float*>(wire);
    const auto world = static_cast<float>(world_size);
    for (size_t i = 0; i < chosen_.size(); ++i) {
      values[i] = grads[chosen_[i]] / world;
    }
  }
  // The positions of this bucket's last Encode (the hook decodes the bucket
  // it just encoded).
  void Decode(const void* wire, size_t count, int, float* grads) override {
    const auto* values = static_cast<const float*>(wire);
    std::fill(grads, grads + count, 0.0f);
    for (size_t i = 0; i < chosen_.size(); ++i) grads[chosen_[i]] = values[i];
  }
  std::vector<SyncTensor> state() override { return seeds_.state(); }
  void Restored() override { seeds_.Restored(); }

 private:
  size_t K(size_t count) const { return CountOfShare(ratio_, count); }
  void Choose(size_t count) {
    torch_compat::TorchGenerator generator(seeds_.Next());
    const std::vector<int64_t> chosen = generator.RandPermPrefix(
        static_cast<int64_t>(count), static_cast<int64_t>(K(count)));
    chosen_.assign(chosen.begin(), chosen.end());
  }

  const double ratio_;
  EncodeSeeds seeds_;
  std::vector<size_t> chosen_;
};

CompressorSync DescribeRandomK() {
  CompressorSync c;
  SyncDescription& d = c.sync;
  d.name = "randomk";
  d.summary =
      "DDP with random-k sparsification: each bucket's gradients at k shared "
      "random positions averaged, the rest kept for later (error feedback)";
  d.sends =
      "every step: randomk_ratio of the gradients as float32 values by "
      "allreduce (the positions follow from a shared seed)";
  d.pytorch = "none (GRACE's randomk compressor with residual memory)";
  d.options.push_back(FloatOption("randomk_ratio", 0.01, 0, true, 1, false,
                                  "the share of each bucket's gradients sent"));
  d.options.push_back(IntOption("randomk_seed", 0, 0, 0xffffffffLL,
                                "the seed of the positions' generator"));
  d.options.push_back(BoolOption(
      "randomk_error_feedback", true,
      "keep what was not sent and add it to the next step's gradients"));
  c.make = [](const OptionValues& o, int, int) {
    return std::make_unique<RandomKCompressor>(o.Float("randomk_ratio"),
                                               o.Int("randomk_seed"));
  };
  c.error_feedback_option = "randomk_error_feedback";
  return c;
}

}  // namespace

RINGLAB_REGISTER_COMPRESSOR(DescribeRandomK);

}  // namespace ringlab::sync
