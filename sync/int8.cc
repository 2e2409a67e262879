// int8: DDP with 8-bit quantisation (Dettmers, 2016; Bagua's ByteGrad
// without its reduce-scatter): per bucket, one scale, max|g| / 127, and each
// gradient as round(g / scale) in [-127, 127] (to nearest, ties to even, as
// torch.round), one byte each; every rank gathers all ranks' wires and
// averages scale * value. The rounding is biased, so error feedback is on by
// default.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "sync/byte_codec.h"
#include "sync/compressor.h"
#include "sync/ddp.h"

namespace ringlab::sync {
namespace {

class Int8Compressor : public Compressor {
 public:
  Collective collective() const override { return Collective::kAllGather; }
  comm::DataType wire_type() const override { return comm::DataType::kFloat32; }
  size_t WireCount(size_t count) const override { return ByteWireCount(count); }
  void Encode(const float* grads, size_t count, int, void* wire) override {
    float largest = 0.0f;
    for (size_t i = 0; i < count; ++i) {
      largest = std::max(largest, std::fabs(grads[i]));
    }
    const float scale = largest / 127.0f;
    PutHeader(scale, wire);
    int8_t* values = WireBytes(wire);
    for (size_t i = 0; i < count; ++i) {
      const float q = scale > 0.0f ? std::nearbyint(grads[i] / scale) : 0.0f;
      values[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
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

SyncDescription DescribeInt8() {
  SyncDescription d;
  d.name = "int8";
  d.summary =
      "DDP with 8-bit quantisation: each bucket as bytes under one scale by "
      "allgather, what the rounding misses kept for later (error feedback)";
  d.sends =
      "every step: 1 byte per gradient and one float32 per bucket, from "
      "every rank to every rank";
  d.pytorch = "none (8-bit quantisation with a per-bucket scale, as Bagua's "
      "ByteGrad)";
  d.options = DdpOptions();
  d.options.push_back(BoolOption(
      "int8_error_feedback", true,
      "keep what the rounding misses and add it to the next step's "
      "gradients"));
  d.create = [](const SyncContext& c) {
    return CreateCompressorSync(c, std::make_unique<Int8Compressor>(),
                                c.options.Bool("int8_error_feedback"));
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeInt8);

}  // namespace ringlab::sync
