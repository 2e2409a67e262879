// streaming_diloco: Streaming DiLoCo (Douillard et al., 2025): DiLoCo with
// the model cut into num_fragments fragments (consecutive whole tensors, the
// cuts nearest equal sizes) that synchronise on staggered schedules, each
// outer reduction overlapped with fragment_sync_delay (tau) inner steps and
// mixed into the local parameters with fragment_update_alpha, its
// pseudo-gradients quantised to quantize_bits.
//
// With s the number of inner steps taken, fragment f (from 0) of P has the
// offset H * (f + 1) / P (torchft's schedule): at every s = offset + k * H it
// sends its change, outer - local, and the reduction runs on a thread of its
// own while training goes on; at s + tau it waits for it, steps its outer
// parameters with the outer Nesterov SGD, and sets its local parameters to
// alpha * local + (1 - alpha) * outer. tau < H / P, so at most one reduction
// is in flight. quantize_bits 32 sends float32 by allreduce (with P = 1,
// tau = 0 and alpha = 0 this is diloco, bit for bit); 8 or 4 send each
// tensor's values on a symmetric grid of 2^(b-1) - 1 levels either side of
// zero under one float32 scale, its largest magnitude, to every rank by
// allgather (the paper's 4 bits are E3M0 floats; this is a uniform grid).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/byte_codec.h"
#include "sync/ddp.h"
#include "sync/diloco.h"
#include "sync/synchronizer.h"

namespace ringlab::sync {
namespace {

struct Fragment {
  size_t begin = 0, end = 0;             // in floats, of the flat buffer
  size_t first_tensor = 0, tensors = 0;  // of the layout's tensors
  int64_t offset = 0;                    // steps to its first send
  size_t wire_bytes = 0;                 // its wire from one rank
};

// The last tensor of each fragment: the cut after tensor i nearest
// total * (f + 1) / P (ties to the earlier), each fragment at least one
// (parts is at most the number of tensors: the description's check_model).
std::vector<Fragment> CutFragments(const ParamLayout& layout, int parts,
                                   int64_t inner_steps) {
  const std::vector<TensorSlot>& tensors = layout.tensors();
  const size_t count = tensors.size();
  const double total = static_cast<double>(layout.num_params());
  std::vector<Fragment> fragments(static_cast<size_t>(parts));
  size_t next = 0;  // the first tensor of the fragment being cut
  for (size_t f = 0; f < fragments.size(); ++f) {
    const double target = total * static_cast<double>(f + 1) / parts;
    const size_t last_allowed = count - (fragments.size() - f);
    size_t best = next;
    double best_gap = std::numeric_limits<double>::infinity();
    for (size_t i = next; i <= last_allowed; ++i) {
      const double end =
          static_cast<double>(tensors[i].offset + tensors[i].size);
      const double gap = std::fabs(end - target);
      if (gap < best_gap) best = i, best_gap = gap;
    }
    if (f + 1 == fragments.size()) best = count - 1;
    Fragment& fragment = fragments[f];
    fragment.first_tensor = next;
    fragment.tensors = best + 1 - next;
    fragment.begin = tensors[next].offset;
    fragment.end = tensors[best].offset + tensors[best].size;
    fragment.offset = inner_steps * static_cast<int64_t>(f + 1) / parts;
    next = best + 1;
  }
  return fragments;
}

class StreamingDiLoCoSynchronizer : public Synchronizer {
 public:
  explicit StreamingDiLoCoSynchronizer(const SyncContext& c);
  ~StreamingDiLoCoSynchronizer() override {
    try {
      Finish();
    } catch (...) {  // a failed reduction was already reported, or no one asks
    }
  }
  void Start(ModelBuffers& model, bool resumed) override {
    if (!resumed) model.GetParams(outer_.data());
  }
  void AfterBackward(ModelBuffers&, int64_t) override {}
  void AfterStep(ModelBuffers& model, int64_t step) override;
  void Finish() override {
    if (in_flight_.valid()) in_flight_.get();
  }
  std::vector<SyncTensor> state() override {
    Finish();  // the reduction's result is part of the state
    return {{"outer_params", &outer_},
            {"outer_momentum", &momentum_},
            {"streaming_reduced", &reduced_}};
  }
  const std::vector<float>* evaluated_params() const override {
    return &outer_;
  }

 private:
  bool Quantized() const { return bits_ < 32; }
  // A tensor's wire: its float32 scale and its codes.
  size_t TensorWireBytes(size_t size) const {
    return sizeof(float) + (size * bits_ + 7) / 8;
  }
  void Send(ModelBuffers& model, const Fragment& fragment);
  void Reduce(const Fragment& fragment);
  void Apply(ModelBuffers& model, const Fragment& fragment, bool first);
  void Encode(const TensorSlot& tensor, char* wire) const;
  void Decode(const TensorSlot& tensor, const char* wire, float* into) const;

  comm::Communicator& comm_;
  trace::Tracer& tracer_;
  const ParamLayout& layout_;
  const int64_t inner_steps_, delay_;
  const float outer_lr_, outer_momentum_, keep_, take_;
  const int bits_;
  const size_t count_;
  std::vector<Fragment> fragments_;
  std::vector<float> outer_, momentum_, local_;
  // The in-flight fragment's averaged change: written by the reduction's
  // thread, read once in_flight_ is done.
  std::vector<float> reduced_;
  float* wire_ = nullptr;  // the communicator's registered memory
  std::vector<char> gathered_;
  std::future<void> in_flight_;
};

StreamingDiLoCoSynchronizer::StreamingDiLoCoSynchronizer(const SyncContext& c)
    : comm_(c.comm),
      tracer_(c.tracer),
      layout_(c.model.layout()),
      inner_steps_(c.options.Int("inner_steps")),
      delay_(c.options.Int("fragment_sync_delay")),
      outer_lr_(static_cast<float>(c.options.Float("outer_lr"))),
      outer_momentum_(static_cast<float>(c.options.Float("outer_momentum"))),
      // p.mul_(alpha).add_(outer * (1 - alpha)): torch takes each scalar to
      // float32, 1 - alpha computed in double by Python.
      keep_(static_cast<float>(c.options.Float("fragment_update_alpha"))),
      take_(static_cast<float>(1.0 - c.options.Float("fragment_update_alpha"))),
      bits_(std::stoi(c.options.Choice("quantize_bits"))),
      count_(layout_.num_params()),
      fragments_(CutFragments(layout_,
                              static_cast<int>(c.options.Int("num_fragments")),
                              inner_steps_)),
      outer_(count_),
      momentum_(count_),
      local_(count_),
      reduced_(count_) {
  size_t floats = 0, wire_bytes = 0;  // the largest fragment's
  for (Fragment& fragment : fragments_) {
    for (size_t t = 0; t < fragment.tensors; ++t) {
      const size_t size = layout_.tensors()[fragment.first_tensor + t].size;
      fragment.wire_bytes += TensorWireBytes(size);
    }
    fragment.wire_bytes = (fragment.wire_bytes + 3) / 4 * 4;  // whole words
    floats = std::max(floats, fragment.end - fragment.begin);
    wire_bytes = std::max(wire_bytes, fragment.wire_bytes);
  }
  if (Quantized()) {
    floats = wire_bytes / 4;
    gathered_.resize(wire_bytes * static_cast<size_t>(comm_.world_size()));
  }
  wire_ = comm_.Allocate(std::max<size_t>(1, floats));
}

void StreamingDiLoCoSynchronizer::AfterStep(ModelBuffers& model, int64_t step) {
  const int64_t taken = step + 1;
  // Sends before syncs, as torchft: with tau = 0 a fragment waits at once.
  for (const Fragment& fragment : fragments_) {
    const int64_t since = taken - fragment.offset;
    if (since >= 0 && since % inner_steps_ == 0) Send(model, fragment);
  }
  for (const Fragment& fragment : fragments_) {
    const int64_t since = taken - delay_ - fragment.offset;
    if (since >= 0 && since % inner_steps_ == 0) {
      Apply(model, fragment, /*first=*/since == 0);
    }
  }
}

// The fragment's change (divided by the world before the sum, as DiLoCo's
// average) into the wire, and its reduction started on a thread of its own.
void StreamingDiLoCoSynchronizer::Send(ModelBuffers& model,
                                       const Fragment& fragment) {
  Finish();  // tau < H / P: the previous fragment's was applied already
  model.GetParams(local_.data());
  const float world = static_cast<float>(comm_.world_size());
  for (size_t i = fragment.begin; i < fragment.end; ++i) {
    // Quantised: each rank's own change, averaged after decoding.
    const float delta = outer_[i] - local_[i];
    if (Quantized()) {
      local_[i] = delta;
    } else {
      wire_[i - fragment.begin] = delta / world;
    }
  }
  if (Quantized()) {
    char* wire = reinterpret_cast<char*>(wire_);
    std::fill(wire, wire + fragment.wire_bytes, 0);
    for (size_t t = 0; t < fragment.tensors; ++t) {
      const TensorSlot& tensor = layout_.tensors()[fragment.first_tensor + t];
      Encode(tensor, wire);
      wire += TensorWireBytes(tensor.size);
    }
  }
  in_flight_ =
      std::async(std::launch::async, [this, &fragment] { Reduce(fragment); });
}

void StreamingDiLoCoSynchronizer::Reduce(const Fragment& fragment) {
  const size_t n = fragment.end - fragment.begin;
  if (!Quantized()) {
    trace::ScopedSpan reduce(tracer_, trace::Track::kComm,
                             "allreduce fragment change", "comm",
                             static_cast<int64_t>(comm::AllReduceBusBytes(
                                 n * sizeof(float), comm_.world_size())));
    comm_.AllReduce(wire_, n, comm::ReduceOp::kSum);
    std::copy(wire_, wire_ + n, reduced_.begin() + fragment.begin);
    return;
  }
  {
    trace::ScopedSpan gather(tracer_, trace::Track::kComm,
                             "allgather quantised fragment change", "comm",
                             static_cast<int64_t>(comm::AllGatherBusBytes(
                                 fragment.wire_bytes, comm_.world_size())));
    comm_.AllGather(wire_, gathered_.data(), fragment.wire_bytes / 4,
                    comm::DataType::kFloat32);
  }
  float* sum = reduced_.data();
  std::fill(sum + fragment.begin, sum + fragment.end, 0.0f);
  for (int r = 0; r < comm_.world_size(); ++r) {
    const char* wire = gathered_.data() + r * fragment.wire_bytes;
    for (size_t t = 0; t < fragment.tensors; ++t) {
      const TensorSlot& tensor = layout_.tensors()[fragment.first_tensor + t];
      Decode(tensor, wire, sum);
      wire += TensorWireBytes(tensor.size);
    }
  }
  const float world = static_cast<float>(comm_.world_size());
  for (size_t i = fragment.begin; i < fragment.end; ++i) sum[i] /= world;
}

void StreamingDiLoCoSynchronizer::Apply(ModelBuffers& model,
                                        const Fragment& fragment, bool first) {
  {
    trace::ScopedSpan wait = WaitSpan(tracer_, "wait for fragment reduction");
    Finish();
  }
  trace::ScopedSpan span(tracer_, trace::Track::kCompute,
                         "outer sgd step and merge", "compute");
  const size_t n = fragment.end - fragment.begin;
  OuterNesterovStep(reduced_.data() + fragment.begin,
                    momentum_.data() + fragment.begin, first, outer_lr_,
                    outer_momentum_, outer_.data() + fragment.begin, n);
  model.GetParams(local_.data());
  for (size_t i = fragment.begin; i < fragment.end; ++i) {
    local_[i] = local_[i] * keep_ + outer_[i] * take_;
  }
  model.SetParams(local_.data());
}

// A tensor's changes (in local_) as a scale, its largest magnitude m, and
// codes q + L of q = round(delta / m * L) in [-L, L], L = 2^(b-1) - 1; a
// tensor with a non-finite change goes under a NaN scale (all NaN on arrival,
// as torch's max makes it).
void StreamingDiLoCoSynchronizer::Encode(const TensorSlot& tensor,
                                         char* wire) const {
  const float* delta = local_.data() + tensor.offset;
  const float largest = LargestMagnitude(delta, tensor.size);
  PutHeader(largest, wire);
  if (!(largest > 0.0f)) return;  // zero or NaN: codes stay 0
  auto* codes = reinterpret_cast<uint8_t*>(wire + sizeof(float));
  const int levels = (1 << (bits_ - 1)) - 1;
  const float top = static_cast<float>(levels);
  for (size_t i = 0; i < tensor.size; ++i) {
    const float q =
        std::clamp(RoundHalfEven(delta[i] / largest * top), -top, top);
    const auto code = static_cast<uint32_t>(static_cast<int>(q) + levels);
    codes[i * bits_ / 8] |= static_cast<uint8_t>(code << (i * bits_ % 8));
  }
}

void StreamingDiLoCoSynchronizer::Decode(const TensorSlot& tensor,
                                         const char* wire, float* into) const {
  const float scale = GetHeader(wire);
  const auto* codes = reinterpret_cast<const uint8_t*>(wire + sizeof(float));
  const int levels = (1 << (bits_ - 1)) - 1;
  const int mask = (1 << bits_) - 1;
  const float unit = scale / static_cast<float>(levels);
  float* sum = into + tensor.offset;
  for (size_t i = 0; i < tensor.size; ++i) {
    const int code = (codes[i * bits_ / 8] >> (i * bits_ % 8)) & mask;
    // A NaN scale makes every value NaN, a zero one every value 0.
    const float q =
        std::isfinite(scale) ? static_cast<float>(code - levels) : 1.0f;
    sum[i] += q * unit;
  }
}

SyncDescription DescribeStreamingDiLoCo() {
  SyncDescription d;
  d.name = "streaming_diloco";
  d.summary =
      "Streaming DiLoCo: DiLoCo over num_fragments fragments on staggered "
      "schedules, each outer reduction overlapped with fragment_sync_delay "
      "inner steps and mixed in by fragment_update_alpha";
  d.sends =
      "every inner_steps-th step per fragment, staggered: its change in "
      "quantize_bits bits per parameter (32: by allreduce; 8 or 4: to every "
      "rank, with a float32 scale per tensor)";
  d.pytorch = "none (a PyTorch loop: experiments/fashion_mnist/pytorch_ddp.py)";
  d.options = {InnerStepsOption(),
               OuterLrOption(),
               OuterMomentumOption(),
               IntOption("num_fragments", 2, 1, 1024,
                         "fragments of the model, each synchronised on its own "
                         "schedule (P)"),
               IntOption("fragment_sync_delay", 1, 0, kMaxSteps,
                         "inner steps a fragment's reduction overlaps (tau)"),
               FloatOption("fragment_update_alpha", 0.5, 0, false, 1, false,
                           "the local parameters' share in the merge (alpha)"),
               ChoiceOption("quantize_bits", "4", {"4", "8", "32"},
                            "bits per value of the change sent")};
  d.check = [](const OptionValues& o) {
    const int64_t h = o.Int("inner_steps"), p = o.Int("num_fragments");
    if (p > h) {
      throw std::invalid_argument(
          "--num_fragments must be at most --inner_steps (" +
          o.Text("inner_steps") + "), not " + o.Text("num_fragments"));
    }
    if (o.Int("fragment_sync_delay") >= h / p) {
      throw std::invalid_argument(
          "--fragment_sync_delay must be below --inner_steps / "
          "--num_fragments (" +
          std::to_string(h / p) + "), not " + o.Text("fragment_sync_delay"));
    }
  };
  d.check_model = [](const OptionValues& o, const ParamLayout& layout) {
    if (static_cast<size_t>(o.Int("num_fragments")) > layout.tensors().size()) {
      throw std::invalid_argument(
          "--num_fragments must be at most the model's number of tensors (" +
          std::to_string(layout.tensors().size()) + "), not " +
          o.Text("num_fragments"));
    }
  };
  d.short_run = {{"inner_steps", "6"}, {"num_fragments", "2"}};
  d.create = [](const SyncContext& c) -> std::unique_ptr<Synchronizer> {
    RequireHostMemory(c.comm, "--sync=streaming_diloco averages");
    return std::make_unique<StreamingDiLoCoSynchronizer>(c);
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeStreamingDiLoCo);

}  // namespace ringlab::sync
