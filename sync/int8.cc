// int8: DDP with 8-bit quantisation (Dettmers, 2016; Bagua's ByteGrad
// without its reduce-scatter): per bucket, one scale, max|g| / 127, and each
// gradient as round(g / scale) in [-127, 127] (to nearest, ties to even, as
// torch.round; a division, as torch divides, not a multiplication by the
// reciprocal), one byte each; every rank gathers all ranks' wires and
// averages scale * value. The rounding is biased, so error feedback is on by
// default.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "sync/byte_codec.h"
#include "sync/compressor.h"

namespace ringlab::sync {
namespace {

class Int8Compressor : public Compressor {
 public:
  Collective collective() const override { return Collective::kAllGather; }
  comm::DataType wire_type() const override { return comm::DataType::kFloat32; }
  size_t WireCount(size_t count) const override { return ByteWireCount(count); }
  void Encode(const float* grads, size_t count, int, void* wire) override {
    const float scale = LargestMagnitude(grads, count) / 127.0f;
    PutHeader(scale, wire);
    int8_t* values = WireBytes(wire);
    if (!(scale > 0.0f)) {
      std::fill(values, values + count, int8_t{0});
      return;
    }
    for (size_t k = 0; k < count; ++k) {
      const float q = RoundHalfEven(grads[k] / scale);
      values[k] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
  void Decode(const void* wire, size_t count, int, float* grads) override {
    const float scale = GetHeader(wire);
    const int8_t* values = WireBytes(wire);
    for (size_t i = 0; i < count; ++i) {
      grads[i] += scale * static_cast<float>(values[i]);
    }
  }
};

CompressorSync DescribeInt8() {
  CompressorSync c;
  SyncDescription& d = c.sync;
  d.name = "int8";
  d.summary =
      "DDP with 8-bit quantisation: each bucket as bytes under one scale by "
      "allgather, what the rounding misses kept for later (error feedback)";
  d.sends =
      "every step: 1 byte per gradient and one float32 per bucket, from "
      "every rank to every rank";
  d.pytorch =
      "none (8-bit quantisation with a per-bucket scale, as Bagua's "
      "ByteGrad)";
  d.options.push_back(
      BoolOption("int8_error_feedback", true,
                 "keep what the rounding misses and add it to the next step's "
                 "gradients"));
  c.make = [](const OptionValues&, int, int) {
    return std::make_unique<Int8Compressor>();
  };
  c.error_feedback_option = "int8_error_feedback";
  return c;
}

}  // namespace

RINGLAB_REGISTER_COMPRESSOR(DescribeInt8);

}  // namespace ringlab::sync
