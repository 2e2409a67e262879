// Gradient compression in GRACE's split (Xu et al., 2021): a compressor
// encodes a bucket of gradients into a wire buffer and decodes it back; the
// collective it needs is either an allreduce that sums the wire in its own
// element type (fp16, bf16: the sum of encodings is the encoding of the sum)
// or an allgather of every rank's wire, each decoded and averaged (top-k,
// signs); an optional error-feedback memory adds to the next step's gradients
// what the encoding lost. MakeCompressorHook turns one into a DDP
// communication hook, so that a new compressor is one small file: a
// Compressor and its registration, RINGLAB_REGISTER_COMPRESSOR
// (docs/extending.md).
#ifndef RINGLAB_SYNC_COMPRESSOR_H_
#define RINGLAB_SYNC_COMPRESSOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "sync/comm_hooks.h"
#include "sync/synchronizer.h"

namespace ringlab::sync {

class Compressor {
 public:
  enum class Collective { kAllReduce, kAllGather };
  virtual ~Compressor() = default;
  virtual Collective collective() const = 0;
  // True where each wire element is one gradient's and sums alone (fp16): a
  // bucket may then be reduced in DDP's order of its tensors
  // (CommHook::elementwise), which 3 or more ranks need to sum as torch.
  virtual bool elementwise() const { return false; }
  // The wire's element type and its length for `count` gradients (the same
  // on every rank: collectives need equal counts).
  virtual comm::DataType wire_type() const = 0;
  virtual size_t WireCount(size_t count) const = 0;
  // grads[0, count) into wire. kAllReduce: what the ranks' wires summed must
  // decode to the average (so it may divide by world_size first).
  virtual void Encode(const float* grads, size_t count, int world_size,
                      void* wire) = 0;
  // kAllReduce: the summed wire into grads (overwritten). kAllGather: one
  // rank's wire, added into grads (the hook zeroes them first and divides by
  // the world size after).
  virtual void Decode(const void* wire, size_t count, int world_size,
                      float* grads) = 0;
  // What a resumed run needs to encode as the uninterrupted one would (the
  // count behind its random draws); Restored after it was read back.
  virtual std::vector<SyncTensor> state() { return {}; }
  virtual void Restored() {}
};

// The seeds of a compressor that draws (random-k's indices, QSGD's rounding):
// one fresh torch generator per bucket encoded, seeded with
// seed + (buckets encoded before) * stride + offset, mod 2^32, so that a
// PyTorch reference draws the same with
// torch.Generator().manual_seed(...), and a resumed run as the uninterrupted
// one (the count is checkpoint state under `name`).
class EncodeSeeds {
 public:
  EncodeSeeds(std::string name, int64_t seed, uint64_t stride, uint64_t offset)
      : name_(std::move(name)),
        seed_(static_cast<uint64_t>(seed)),
        stride_(stride),
        offset_(offset) {}
  uint64_t Next() {
    return (seed_ + count_++ * stride_ + offset_) & 0xffffffffu;
  }
  std::vector<SyncTensor> state() {
    PutCount(count_, counter_.data());
    return {{name_, &counter_}};
  }
  void Restored() { count_ = GetCount(counter_.data()); }

 private:
  const std::string name_;
  const uint64_t seed_, stride_, offset_;
  uint64_t count_ = 0;
  std::vector<float> counter_ = std::vector<float>(2, 0.0f);
};

// A DDP hook from a compressor: per bucket, with error feedback the memory
// is added to the gradients before encoding and becomes what the decoding of
// this rank's own wire misses (as GRACE's residual memory). Its wire buffers
// (max_count gradients' worth, each bucket at its own offset) are the
// communicator's registered memory (collective: every rank makes the hook).
std::unique_ptr<CommHook> MakeCompressorHook(
    comm::Communicator& comm, std::unique_ptr<Compressor> compressor,
    bool error_feedback, size_t max_count);

// The description's factory for a compressor in the DDP family: it refuses a
// communicator that does not reduce host memory (the codecs run on the CPU).
std::unique_ptr<Synchronizer> CreateCompressorSync(
    const SyncContext& context, std::unique_ptr<Compressor> compressor,
    bool error_feedback);

// A compressor and the synchroniser it makes: the description holds its
// name, summary, bytes, PyTorch counterpart and its own options; DDP's bucket
// options and the factory are added when it registers.
struct CompressorSync {
  SyncDescription sync;
  std::function<std::unique_ptr<Compressor>(const OptionValues& options,
                                            int rank, int world_size)>
      make;
  // Its bool option that turns error feedback on, or "" for none (never).
  std::string error_feedback_option;
};

// Registers the synchroniser and the compressor under its name (at static
// initialisation: RINGLAB_REGISTER_COMPRESSOR).
bool RegisterCompressorSync(CompressorSync compressor);
#define RINGLAB_REGISTER_COMPRESSOR(describe)                  \
  static const bool ringlab_compressor_registered_##describe = \
      ::ringlab::sync::RegisterCompressorSync(describe())

// The registered compressors' names, and one made by name with its
// synchroniser's options (benches measure each alone; std::invalid_argument
// for a name that is not a compressor's).
std::vector<std::string> CompressorNames();
std::unique_ptr<Compressor> MakeCompressor(const std::string& name,
                                           const OptionValues& options,
                                           int rank, int world_size);

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_COMPRESSOR_H_
