// topk: DDP with top-k sparsification and error feedback (Lin et al., 2018's
// deep gradient compression without its momentum correction; Stich et al.,
// 2018's memory): per bucket, the k gradients of largest magnitude (what the
// memory adds in included) go out as (index, value) pairs by allgather, every
// rank sums what all sent and divides by the world size; what was not sent
// stays in the memory for the next step. A compressor in GRACE's split
// (compressor.h): this file is all of it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "sync/compressor.h"

namespace ringlab::sync {
namespace {

class TopKCompressor : public Compressor {
 public:
  explicit TopKCompressor(double ratio) : ratio_(ratio) {}
  Collective collective() const override { return Collective::kAllGather; }
  comm::DataType wire_type() const override { return comm::DataType::kFloat32; }
  // k (index, value) pairs, as 2k float32 words: an index's bits travel in
  // a float's (the allgather only moves them).
  size_t WireCount(size_t count) const override { return 2 * K(count); }
  void Encode(const float* grads, size_t count, int, void* wire) override {
    const size_t k = K(count);
    order_.resize(count);
    std::iota(order_.begin(), order_.end(), uint32_t{0});
    // The k largest magnitudes, ties to the lower index: the same on every
    // machine.
    std::nth_element(order_.begin(), order_.begin() + k, order_.end(),
                     [grads](uint32_t a, uint32_t b) {
                       const float x = std::fabs(grads[a]),
                                   y = std::fabs(grads[b]);
                       return x > y || (x == y && a < b);
                     });
    std::sort(order_.begin(), order_.begin() + k);
    auto* words = static_cast<uint32_t*>(wire);
    for (size_t i = 0; i < k; ++i) {
      words[2 * i] = order_[i];
      std::memcpy(&words[2 * i + 1], &grads[order_[i]], sizeof(float));
    }
  }
  void Decode(const void* wire, size_t count, int, float* grads) override {
    const auto* words = static_cast<const uint32_t*>(wire);
    for (size_t i = 0; i < K(count); ++i) {
      float value;
      std::memcpy(&value, &words[2 * i + 1], sizeof(float));
      grads[words[2 * i]] += value;
    }
  }

 private:
  size_t K(size_t count) const { return CountOfShare(ratio_, count); }
  const double ratio_;
  std::vector<uint32_t> order_;
};

CompressorSync DescribeTopK() {
  CompressorSync c;
  SyncDescription& d = c.sync;
  d.name = "topk";
  d.summary =
      "DDP with top-k sparsification: each bucket's largest gradients by "
      "allgather, the rest kept for later (error feedback)";
  d.sends =
      "every step: topk_ratio of the gradients as (index, value) pairs, "
      "8 bytes each, from every rank to every rank";
  d.pytorch = "none (GRACE's topk compressor with residual memory)";
  d.options.push_back(FloatOption("topk_ratio", 0.01, 0, true, 1, false,
                                  "the share of each bucket's gradients sent"));
  d.options.push_back(BoolOption(
      "topk_error_feedback", true,
      "keep what was not sent and add it to the next step's gradients"));
  c.make = [](const OptionValues& o, int, int) {
    return std::make_unique<TopKCompressor>(o.Float("topk_ratio"));
  };
  c.error_feedback_option = "topk_error_feedback";
  return c;
}

}  // namespace

RINGLAB_REGISTER_COMPRESSOR(DescribeTopK);

}  // namespace ringlab::sync
