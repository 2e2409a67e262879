#include "train/synchronizer.h"

#include <stdexcept>

namespace ringlab::train {
namespace {

bool SharesMemory(const comm::Communicator& comm, const nn::Mlp& model) {
  return (comm.memory() == comm::MemoryKind::kDevice) ==
         (model.device() == nn::Device::kCuda);
}

class AllReduceSynchronizer : public Synchronizer {
 public:
  explicit AllReduceSynchronizer(comm::Communicator& comm) : comm_(comm) {}
  const char* name() const override { return "allreduce"; }
  void AfterBackward(nn::Mlp& model) override {
    AverageModelBuffer(comm_, model, ModelBuffer::kGrads);
  }
  void AfterStep(nn::Mlp&, int64_t) override {}

 private:
  comm::Communicator& comm_;
};

class ParamAvgSynchronizer : public Synchronizer {
 public:
  ParamAvgSynchronizer(comm::Communicator& comm, SyncOptions options)
      : comm_(comm), options_(options) {}
  const char* name() const override { return "param_avg"; }
  void AfterBackward(nn::Mlp&) override {}
  void AfterStep(nn::Mlp& model, int64_t step) override {
    if (IsAveragingStep(step, options_)) {
      AverageModelBuffer(comm_, model, ModelBuffer::kParams);
    }
  }

 private:
  comm::Communicator& comm_;
  SyncOptions options_;
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
  if (options.avg_warmup < 0 || options.avg_warmup > kMaxSteps) {
    throw std::invalid_argument("--avg_warmup must be in [0, " +
                                std::to_string(kMaxSteps) + "], not " +
                                std::to_string(options.avg_warmup));
  }
}

std::unique_ptr<Synchronizer> CreateSynchronizer(const std::string& name,
                                                 comm::Communicator& comm,
                                                 const SyncOptions& options) {
  ValidateSync(name, options);
  if (name == "allreduce") return std::make_unique<AllReduceSynchronizer>(comm);
  if (name == "param_avg") {
    return std::make_unique<ParamAvgSynchronizer>(comm, options);
  }
  return std::make_unique<NoSynchronizer>();
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
