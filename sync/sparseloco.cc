// sparseloco: SparseLoCo (Sarfi et al., 2025): DiLoCo's inner steps, with
// the outer momentum replaced by an error-feedback accumulator on each rank
// and the pseudo-gradient sent sparse and quantised. Every inner_steps-th
// step each rank takes its change from the outer parameters,
// delta = outer - local, into its accumulator, e = beta * e + delta; keeps in
// each chunk of sparseloco_chunk elements of a tensor the sparseloco_topk
// largest magnitudes of e (ties to the lower position); quantises them to
// sparseloco_bits bits on a uniform grid over [-m, m], m the chunk's largest
// magnitude; takes what it sends out of e; and the ranks gather all ranks'
// chunks and step the outer parameters by -outer_lr times their average.
//
// The wire of a chunk: m (float32), its k positions (uint16) and k codes of
// b bits. Chunks are the tensor's flat elements in order (the paper's 2-D
// weights are cut into square blocks instead: a chunk is then a block).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/byte_codec.h"
#include "sync/ddp.h"
#include "sync/diloco.h"
#include "sync/synchronizer.h"

namespace ringlab::sync {
namespace {

struct Chunk {
  size_t begin = 0, size = 0, k = 0;
  size_t wire = 0;  // its first byte in a rank's wire
};

class SparseLoCoSynchronizer : public Synchronizer {
 public:
  explicit SparseLoCoSynchronizer(const SyncContext& c);
  void Start(ModelBuffers& model, bool resumed) override {
    if (!resumed) model.GetParams(outer_.data());
  }
  void AfterBackward(ModelBuffers&, int64_t) override {}
  void AfterStep(ModelBuffers& model, int64_t step) override;
  std::vector<SyncTensor> state() override {
    return {{"outer_params", &outer_}, {"sparseloco_error", &error_}};
  }
  const std::vector<float>* evaluated_params() const override {
    return &outer_;
  }

 private:
  size_t CodeBytes(size_t k) const { return (k * bits_ + 7) / 8; }
  void EncodeChunk(const Chunk& chunk, char* wire);
  void DecodeChunk(const Chunk& chunk, const char* wire, float* into) const;

  comm::Communicator& comm_;
  trace::Tracer& tracer_;
  const int64_t inner_steps_;
  const float outer_lr_, beta_;
  const int bits_;
  const size_t count_;
  std::vector<Chunk> chunks_;
  size_t wire_bytes_ = 0;
  std::vector<float> outer_, error_, local_, average_;
  std::vector<uint32_t> order_;
  float* wire_ = nullptr;  // the communicator's registered memory
  std::vector<char> gathered_;
};

SparseLoCoSynchronizer::SparseLoCoSynchronizer(const SyncContext& c)
    : comm_(c.comm),
      tracer_(c.tracer),
      inner_steps_(c.options.Int("inner_steps")),
      outer_lr_(static_cast<float>(c.options.Float("sparseloco_outer_lr"))),
      beta_(static_cast<float>(c.options.Float("sparseloco_beta"))),
      bits_(static_cast<int>(c.options.Int("sparseloco_bits"))),
      count_(c.model.layout().num_params()),
      outer_(count_),
      error_(count_, 0.0f),
      local_(count_),
      average_(count_) {
  const auto chunk = static_cast<size_t>(c.options.Int("sparseloco_chunk"));
  const auto topk = static_cast<size_t>(c.options.Int("sparseloco_topk"));
  for (const TensorSlot& t : c.model.layout().tensors()) {
    for (size_t at = 0; at < t.size; at += chunk) {
      Chunk ch;
      ch.begin = t.offset + at;
      ch.size = std::min(chunk, t.size - at);
      ch.k = std::min(topk, ch.size);
      ch.wire = wire_bytes_;
      wire_bytes_ += sizeof(float) + 2 * ch.k + CodeBytes(ch.k);
      chunks_.push_back(ch);
    }
  }
  wire_bytes_ = (wire_bytes_ + 3) / 4 * 4;  // whole float32 words
  wire_ = c.comm.Allocate(std::max<size_t>(1, wire_bytes_ / 4));
  gathered_.resize(wire_bytes_ * static_cast<size_t>(c.comm.world_size()));
}

void SparseLoCoSynchronizer::AfterStep(ModelBuffers& model, int64_t step) {
  if ((step + 1) % inner_steps_ != 0) return;
  model.GetParams(local_.data());
  for (size_t i = 0; i < count_; ++i) {
    // e.mul_(beta).add_(delta): two roundings.
    const float delta = outer_[i] - local_[i];
    error_[i] = error_[i] * beta_ + delta;
  }
  char* wire = reinterpret_cast<char*>(wire_);
  std::memset(wire, 0, wire_bytes_);
  for (const Chunk& chunk : chunks_) EncodeChunk(chunk, wire + chunk.wire);
  {
    trace::ScopedSpan wait = WaitSpan(tracer_, "wait for allgather");
    trace::ScopedSpan gather(tracer_, trace::Track::kComm,
                             "allgather sparse change", "comm",
                             static_cast<int64_t>(comm::AllGatherBusBytes(
                                 wire_bytes_, comm_.world_size())));
    comm_.AllGather(wire_, gathered_.data(), wire_bytes_ / 4,
                    comm::DataType::kFloat32);
  }
  trace::ScopedSpan span(tracer_, trace::Track::kCompute, "outer sgd step",
                         "compute");
  std::fill(average_.begin(), average_.end(), 0.0f);
  for (int r = 0; r < comm_.world_size(); ++r) {
    const char* theirs = gathered_.data() + r * wire_bytes_;
    for (const Chunk& chunk : chunks_) {
      DecodeChunk(chunk, theirs + chunk.wire, average_.data());
    }
  }
  const auto world = static_cast<float>(comm_.world_size());
  for (size_t i = 0; i < count_; ++i) {
    // p.add_(average, alpha=-lr), which torch fuses (as DiLoCo's step).
    outer_[i] = std::fma(average_[i] / world, -outer_lr_, outer_[i]);
  }
  model.SetParams(outer_.data());
}

// The chunk's k largest |e| (ties to the lower position), quantised; what is
// sent is taken out of e.
void SparseLoCoSynchronizer::EncodeChunk(const Chunk& chunk, char* wire) {
  float* e = error_.data() + chunk.begin;
  order_.resize(chunk.size);
  std::iota(order_.begin(), order_.end(), uint32_t{0});
  std::partial_sort(order_.begin(), order_.begin() + chunk.k, order_.end(),
                    [e](uint32_t a, uint32_t b) {
                      const float x = std::fabs(e[a]), y = std::fabs(e[b]);
                      return x > y || (x == y && a < b);
                    });
  const float largest = chunk.k > 0 ? std::fabs(e[order_[0]]) : 0.0f;
  PutHeader(largest, wire);
  char* positions = wire + sizeof(float);  // 2-byte, not always aligned
  auto* codes = reinterpret_cast<uint8_t*>(wire + sizeof(float) + 2 * chunk.k);
  const float top = static_cast<float>((1 << bits_) - 1);
  for (size_t j = 0; j < chunk.k; ++j) {
    const uint32_t at = order_[j];
    // The nearest of the 2^b levels (2j - top) * m / top, j in [0, top].
    const float level =
        largest > 0.0f
            ? std::clamp(RoundHalfEven((e[at] / largest * top + top) / 2.0f),
                         0.0f, top)
            : 0.0f;
    const auto code = static_cast<uint32_t>(level);
    const auto position = static_cast<uint16_t>(at);
    std::memcpy(positions + 2 * j, &position, sizeof(position));
    codes[j * bits_ / 8] |= static_cast<uint8_t>(code << (j * bits_ % 8));
    e[at] -= (2.0f * level - top) * (largest / top);
  }
}

void SparseLoCoSynchronizer::DecodeChunk(const Chunk& chunk, const char* wire,
                                         float* into) const {
  const float largest = GetHeader(wire);
  uint16_t position;
  const char* positions = wire + sizeof(float);
  const auto* codes =
      reinterpret_cast<const uint8_t*>(wire + sizeof(float) + 2 * chunk.k);
  const int top = (1 << bits_) - 1;
  const float unit = largest / static_cast<float>(top);
  for (size_t j = 0; j < chunk.k; ++j) {
    std::memcpy(&position, positions + 2 * j, sizeof(position));
    const int code = (codes[j * bits_ / 8] >> (j * bits_ % 8)) & top;
    into[chunk.begin + position] += static_cast<float>(2 * code - top) * unit;
  }
}

SyncDescription DescribeSparseLoCo() {
  SyncDescription d;
  d.name = "sparseloco";
  d.summary =
      "SparseLoCo: DiLoCo's inner steps; each rank's change through an "
      "error-feedback accumulator, sent as each chunk's top-k in a few bits";
  d.sends =
      "every inner_steps-th step: per chunk of sparseloco_chunk, one float32, "
      "sparseloco_topk positions (2 bytes) and codes (sparseloco_bits), from "
      "every rank to every rank";
  d.pytorch = "none (a PyTorch loop: experiments/fashion_mnist/pytorch_ddp.py)";
  d.options = {InnerStepsOption(),
               FloatOption("sparseloco_outer_lr", 1.0, 0, false, 1e30, false,
                           "the outer SGD's learning rate (alpha)"),
               FloatOption("sparseloco_beta", 0.95, 0, false, 1, false,
                           "the accumulator's decay (beta)"),
               IntOption("sparseloco_chunk", 4096, 1, 65536,
                         "elements per chunk of a tensor"),
               IntOption("sparseloco_topk", 64, 1, 65536,
                         "the values each chunk sends (k)"),
               IntOption("sparseloco_bits", 2, 1, 8, "bits per value sent")};
  d.check = [](const OptionValues& o) {
    if (8 % o.Int("sparseloco_bits") != 0) {
      throw std::invalid_argument(
          "--sparseloco_bits must be 1, 2, 4 or 8 (codes do not straddle "
          "bytes), not " +
          o.Text("sparseloco_bits"));
    }
    if (o.Int("sparseloco_topk") > o.Int("sparseloco_chunk")) {
      throw std::invalid_argument(
          "--sparseloco_topk must be at most --sparseloco_chunk (" +
          o.Text("sparseloco_chunk") + "), not " + o.Text("sparseloco_topk"));
    }
  };
  d.short_run = {{"inner_steps", "5"},
                 {"sparseloco_chunk", "16"},
                 {"sparseloco_topk", "4"}};
  d.create = [](const SyncContext& c) -> std::unique_ptr<Synchronizer> {
    RequireHostMemory(c.comm, "--sync=sparseloco gathers");
    return std::make_unique<SparseLoCoSynchronizer>(c);
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeSparseLoCo);

}  // namespace ringlab::sync
