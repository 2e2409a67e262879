#include "train/synchronizer.h"

#include <memory>
#include <stdexcept>
#include <vector>

namespace ringlab::train {
namespace {

bool SharesMemory(const comm::Communicator& comm, const nn::Mlp& model) {
  return (comm.memory() == comm::MemoryKind::kDevice) ==
         (model.device() == nn::Device::kCuda);
}

// DDP: the gradients averaged bucket by bucket as backward produces them
// (bucket_reducer.h), or, where the model's memory is not the communicator's,
// in one piece through host memory after backward.
class AllReduceSynchronizer : public Synchronizer {
 public:
  AllReduceSynchronizer(comm::Communicator& comm, nn::Mlp& model,
                        const SyncOptions& options, Tracer& tracer)
      : comm_(comm), tracer_(tracer) {
    if (SharesMemory(comm, model)) {
      reducer_ = std::make_unique<BucketReducer>(
          comm, model, model.grads(),
          AssignBuckets(model.layout(), options.first_bucket_bytes,
                        options.bucket_cap_bytes),
          options.overlap, tracer);
    }
  }
  const char* name() const override { return "allreduce"; }
  nn::BackwardObserver* backward_observer() override { return reducer_.get(); }
  void AfterBackward(nn::Mlp& model) override {
    ScopedSpan wait(tracer_, Track::kCompute, "wait for allreduce",
                    kExposedCommCategory);
    if (reducer_) {
      reducer_->Finish();
      return;
    }
    ScopedSpan reduce(
        tracer_, Track::kComm, "allreduce gradients", "comm",
        static_cast<int64_t>(comm::AllReduceBusBytes(
            model.layout().num_params() * sizeof(float), comm_.world_size())));
    AverageModelBuffer(comm_, model, ModelBuffer::kGrads);
  }
  void AfterStep(nn::Mlp&, int64_t) override {}

 private:
  comm::Communicator& comm_;
  Tracer& tracer_;
  std::unique_ptr<BucketReducer> reducer_;
};

// Local SGD: the parameters averaged every K steps after the warm-up.
class ParamAvgSynchronizer : public Synchronizer {
 public:
  ParamAvgSynchronizer(comm::Communicator& comm, SyncOptions options,
                       Tracer& tracer)
      : comm_(comm), options_(options), tracer_(tracer) {}
  const char* name() const override { return "param_avg"; }
  void AfterBackward(nn::Mlp&) override {}
  void AfterStep(nn::Mlp& model, int64_t step) override {
    if (!IsAveragingStep(step, options_)) return;
    ScopedSpan wait(tracer_, Track::kCompute, "wait for allreduce",
                    kExposedCommCategory);
    ScopedSpan reduce(
        tracer_, Track::kComm, "allreduce parameters", "comm",
        static_cast<int64_t>(comm::AllReduceBusBytes(
            model.layout().num_params() * sizeof(float), comm_.world_size())));
    AverageModelBuffer(comm_, model, ModelBuffer::kParams);
  }

 private:
  comm::Communicator& comm_;
  SyncOptions options_;
  Tracer& tracer_;
};

class NoSynchronizer : public Synchronizer {
 public:
  const char* name() const override { return "none"; }
  void AfterBackward(nn::Mlp&) override {}
  void AfterStep(nn::Mlp&, int64_t) override {}
};

}  // namespace

bool IsAveragingStep(int64_t step, const SyncOptions& options) {
  return step >= options.avg_warmup &&
         (step - options.avg_warmup) % options.avg_period == 0;
}

void ValidateSync(const std::string& name, const SyncOptions& options) {
  if (name != "allreduce" && name != "param_avg" && name != "none") {
    throw std::invalid_argument("unknown --sync=" + name +
                                " (expected allreduce, param_avg or none)");
  }
  if (options.avg_period < 1 || options.avg_period > kMaxSteps) {
    throw std::invalid_argument("--avg_period must be in [1, " +
                                std::to_string(kMaxSteps) + "], not " +
                                std::to_string(options.avg_period));
  }
  if (options.first_bucket_bytes == 0 || options.bucket_cap_bytes == 0) {
    throw std::invalid_argument("bucket caps must be positive");
  }
  if (options.avg_warmup < 0 || options.avg_warmup > kMaxSteps) {
    throw std::invalid_argument("--avg_warmup must be in [0, " +
                                std::to_string(kMaxSteps) + "], not " +
                                std::to_string(options.avg_warmup));
  }
}

std::unique_ptr<Synchronizer> CreateSynchronizer(const std::string& name,
                                                 comm::Communicator& comm,
                                                 nn::Mlp& model,
                                                 const SyncOptions& options,
                                                 Tracer* tracer) {
  static Tracer disabled(/*enabled=*/false, 0);
  Tracer& trace = tracer != nullptr ? *tracer : disabled;
  if (name == "allreduce") {
    return std::make_unique<AllReduceSynchronizer>(comm, model, options, trace);
  }
  if (name == "param_avg") {
    return std::make_unique<ParamAvgSynchronizer>(comm, options, trace);
  }
  if (name == "none") return std::make_unique<NoSynchronizer>();
  throw std::invalid_argument("unknown synchroniser " + name);
}

void AverageModelBuffer(comm::Communicator& comm, nn::Mlp& model,
                        ModelBuffer which) {
  const size_t count = model.layout().num_params();
  if (SharesMemory(comm, model)) {
    float* data = which == ModelBuffer::kGrads ? model.grads() : model.params();
    comm.AllReduce(data, count, comm::ReduceOp::kAvg);
    return;
  }
  std::vector<float> host(count);
  if (which == ModelBuffer::kGrads) {
    model.GetGrads(host.data());
    comm.AllReduce(host.data(), count, comm::ReduceOp::kAvg);
    model.SetGrads(host.data());
  } else {
    model.GetParams(host.data());
    comm.AllReduce(host.data(), count, comm::ReduceOp::kAvg);
    model.SetParams(host.data());
  }
}

void BroadcastParams(comm::Communicator& comm, nn::Mlp& model, int root) {
  const size_t count = model.layout().num_params();
  if (SharesMemory(comm, model)) {
    comm.Broadcast(model.params(), count, root);
    return;
  }
  std::vector<float> host(count);
  model.GetParams(host.data());
  comm.Broadcast(host.data(), count, root);
  model.SetParams(host.data());
}

}  // namespace ringlab::train
