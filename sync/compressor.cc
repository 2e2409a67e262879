#include "sync/compressor.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/ddp.h"

namespace ringlab::sync {
namespace {

class CompressorHook : public CommHook {
 public:
  CompressorHook(comm::Communicator& comm,
                 std::unique_ptr<Compressor> compressor, bool error_feedback,
                 size_t max_count)
      : compressor_(std::move(compressor)),
        element_bytes_(comm::DataTypeSize(compressor_->wire_type())),
        wire_count_(compressor_->WireCount(max_count)),
        wire_(reinterpret_cast<char*>(
            comm.Allocate((wire_count_ * element_bytes_ + sizeof(float) - 1) /
                          sizeof(float)))),
        max_count_(max_count) {
    if (error_feedback) error_.assign(max_count, 0.0f);
  }

  void Reduce(comm::Communicator& comm, const GradBucket& bucket,
              float* grads) override {
    if (bucket.end > max_count_ || bucket.begin > bucket.end) {
      throw std::logic_error("compressor hook: a bucket beyond its buffer");
    }
    const size_t count = bucket.count();
    const int world = comm.world_size();
    float* const x = grads + bucket.begin;
    if (!error_.empty()) {
      float* const e = error_.data() + bucket.begin;
      for (size_t i = 0; i < count; ++i) x[i] += e[i];
    }
    // One bucket at a time (the reducer's one thread, blocking collectives):
    // every bucket's wire at the start of the buffer, which holds the
    // largest (WireCount grows with the count; a per-bucket offset would not
    // fit where each bucket's wire has a header or rounds up).
    char* const wire = wire_;
    const size_t wire_count = compressor_->WireCount(count);
    compressor_->Encode(x, count, world, wire);
    if (!error_.empty()) Remember(wire, x, count, world, bucket.begin);
    if (compressor_->collective() == Compressor::Collective::kAllReduce) {
      comm.AllReduce(wire, wire_count, compressor_->wire_type(),
                     comm::ReduceOp::kSum);
      compressor_->Decode(wire, count, world, x);
      return;
    }
    Gather(comm, wire, wire_count, count, x);
  }

  uint64_t BusBytes(const GradBucket& bucket, int world_size) const override {
    const uint64_t bytes =
        compressor_->WireCount(bucket.count()) * element_bytes_;
    return compressor_->collective() == Compressor::Collective::kAllReduce
               ? comm::AllReduceBusBytes(bytes, world_size)
               : comm::AllGatherBusBytes(bytes, world_size);
  }

  bool elementwise() const override {
    return compressor_->collective() == Compressor::Collective::kAllReduce &&
           compressor_->elementwise();
  }

  std::vector<SyncTensor> state() override {
    std::vector<SyncTensor> tensors = compressor_->state();
    if (!error_.empty()) tensors.push_back({"compressor_error", &error_});
    return tensors;
  }
  void Restored() override { compressor_->Restored(); }

 private:
  // The memory becomes what this rank's own wire does not say of x.
  void Remember(const void* wire, const float* x, size_t count, int world,
                size_t begin) {
    decoded_.assign(count, 0.0f);
    compressor_->Decode(wire, count, world, decoded_.data());
    // A kAllReduce wire decodes to x / world (its share of the average).
    const float scale =
        compressor_->collective() == Compressor::Collective::kAllReduce
            ? static_cast<float>(world)
            : 1.0f;
    for (size_t i = 0; i < count; ++i) {
      error_[begin + i] = x[i] - decoded_[i] * scale;
    }
  }

  void Gather(comm::Communicator& comm, const char* wire, size_t wire_count,
              size_t count, float* x) {
    const size_t wire_bytes = wire_count * element_bytes_;
    gathered_.resize(wire_bytes * comm.world_size());
    comm.AllGather(wire, gathered_.data(), wire_count,
                   compressor_->wire_type());
    std::fill(x, x + count, 0.0f);
    for (int r = 0; r < comm.world_size(); ++r) {
      compressor_->Decode(gathered_.data() + r * wire_bytes, count,
                          comm.world_size(), x);
    }
    const float world = static_cast<float>(comm.world_size());
    for (size_t i = 0; i < count; ++i) x[i] /= world;
  }

  std::unique_ptr<Compressor> compressor_;
  const size_t element_bytes_;
  const size_t wire_count_;
  char* const wire_;  // registered
  const size_t max_count_;
  std::vector<float> error_;  // empty without error feedback
  std::vector<float> decoded_;
  std::vector<char> gathered_;
};

}  // namespace

std::unique_ptr<CommHook> MakeCompressorHook(
    comm::Communicator& comm, std::unique_ptr<Compressor> compressor,
    bool error_feedback, size_t max_count) {
  return std::make_unique<CompressorHook>(comm, std::move(compressor),
                                          error_feedback, max_count);
}

std::unique_ptr<Synchronizer> CreateCompressorSync(
    const SyncContext& c, std::unique_ptr<Compressor> compressor,
    bool error_feedback) {
  // The wire is in the communicator's memory kind: host here (a device
  // communicator stages nothing, so it would reduce the model's own memory,
  // on the device, which the codecs cannot read).
  RequireHostMemory(c.comm, "a compressing --sync encodes");
  return std::make_unique<DdpSynchronizer>(
      c.comm, c.model, c.options, c.tracer,
      MakeCompressorHook(c.comm, std::move(compressor), error_feedback,
                         c.model.layout().num_params()));
}

namespace {

std::map<std::string, CompressorSync>& Compressors() {
  static auto* compressors = new std::map<std::string, CompressorSync>();
  return *compressors;
}

}  // namespace

bool RegisterCompressorSync(CompressorSync compressor) {
  SyncDescription d = compressor.sync;
  std::vector<OptionSpec> options = DdpOptions();
  options.insert(options.end(), d.options.begin(), d.options.end());
  d.options = std::move(options);
  d.create = [make = compressor.make,
              feedback =
                  compressor.error_feedback_option](const SyncContext& c) {
    return CreateCompressorSync(
        c, make(c.options, c.comm.rank(), c.comm.world_size()),
        !feedback.empty() && c.options.Bool(feedback));
  };
  const std::string name = d.name;
  RegisterSync(std::move(d));
  Compressors().emplace(name, std::move(compressor));
  return true;
}

std::vector<std::string> CompressorNames() {
  std::vector<std::string> names;
  for (const auto& [name, compressor] : Compressors()) names.push_back(name);
  return names;
}

std::unique_ptr<Compressor> MakeCompressor(const std::string& name,
                                           const OptionValues& options,
                                           int rank, int world_size) {
  const auto it = Compressors().find(name);
  if (it == Compressors().end()) {
    throw std::invalid_argument("--sync=" + name + " is not a compressor");
  }
  return it->second.make(options, rank, world_size);
}

}  // namespace ringlab::sync
