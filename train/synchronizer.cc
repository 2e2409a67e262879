#include "train/synchronizer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/diloco.h"

namespace ringlab::train {
namespace {

bool SharesMemory(const comm::Communicator& comm, const nn::Mlp& model) {
  return (comm.memory() == comm::MemoryKind::kDevice) ==
         (model.device() == nn::Device::kCuda);
}

// Averages the parameters across ranks in place (staging through host memory
// where the communicator cannot reach the model's), as PeriodicModelAverager.
void AverageParams(comm::Communicator& comm, nn::Mlp& model) {
  const size_t count = model.layout().num_params();
  if (SharesMemory(comm, model)) {
    comm.AllReduce(model.params(), count, comm::ReduceOp::kAvg);
    return;
  }
  std::vector<float> host(count);
  model.GetParams(host.data());
  comm.AllReduce(host.data(), count, comm::ReduceOp::kAvg);
  model.SetParams(host.data());
}

// DDP: the gradients reduced by a communication hook (comm_hooks.h: the
// average, or a compressed one) bucket by bucket as backward produces them
// (bucket_reducer.h), or, where the model's memory is not the communicator's,
// in one piece through host memory after backward.
class AllReduceSynchronizer : public Synchronizer {
 public:
  AllReduceSynchronizer(comm::Communicator& comm, nn::Mlp& model,
                        const SyncOptions& options, Tracer& tracer,
                        const char* name = "allreduce",
                        std::unique_ptr<CommHook> hook = MakeAllReduceHook())
      : comm_(comm), tracer_(tracer), name_(name), hook_(std::move(hook)) {
    if (SharesMemory(comm, model)) {
      reducer_ = std::make_unique<BucketReducer>(
          comm, model, model.grads(),
          AssignBuckets(model.layout(), options.first_bucket_bytes,
                        options.bucket_cap_bytes),
          options.overlap, *hook_, tracer);
    }
  }
  const char* name() const override { return name_; }
  void Start(const nn::Mlp&, bool resumed) override {
    if (resumed) hook_->Restored();
  }
  std::vector<SyncTensor> state() override { return hook_->state(); }
  nn::BackwardObserver* backward_observer(int64_t step) override {
    if (reducer_) reducer_->BeginStep(step);  // DDP's one bucket at step 0
    return reducer_.get();
  }
  void AfterBackward(nn::Mlp& model, int64_t) override {
    ScopedSpan wait(tracer_, Track::kCompute, "wait for allreduce",
                    kExposedCommCategory);
    if (reducer_) {
      reducer_->Finish();
      return;
    }
    const size_t count = model.layout().num_params();
    const GradBucket whole{0, 0, count, true};
    ScopedSpan reduce(
        tracer_, Track::kComm, "allreduce gradients", "comm",
        static_cast<int64_t>(hook_->BusBytes(whole, comm_.world_size())));
    std::vector<float> host(count);
    model.GetGrads(host.data());
    hook_->Reduce(comm_, whole, host.data());
    model.SetGrads(host.data());
  }
  void AfterStep(nn::Mlp&, int64_t) override {}

 private:
  comm::Communicator& comm_;
  Tracer& tracer_;
  const char* const name_;
  // Declared before the reducer, which uses it until it is destroyed.
  std::unique_ptr<CommHook> hook_;
  std::unique_ptr<BucketReducer> reducer_;
};

// Local SGD: the parameters averaged every K steps after the warm-up.
class ParamAvgSynchronizer : public Synchronizer {
 public:
  ParamAvgSynchronizer(comm::Communicator& comm, SyncOptions options,
                       Tracer& tracer)
      : comm_(comm), options_(options), tracer_(tracer) {}
  const char* name() const override { return "param_avg"; }
  void AfterBackward(nn::Mlp&, int64_t) override {}
  void AfterStep(nn::Mlp& model, int64_t step) override {
    if (!IsAveragingStep(step, options_)) return;
    ScopedSpan wait(tracer_, Track::kCompute, "wait for allreduce",
                    kExposedCommCategory);
    ScopedSpan reduce(
        tracer_, Track::kComm, "allreduce parameters", "comm",
        static_cast<int64_t>(comm::AllReduceBusBytes(
            model.layout().num_params() * sizeof(float), comm_.world_size())));
    AverageParams(comm_, model);
  }

 private:
  comm::Communicator& comm_;
  SyncOptions options_;
  Tracer& tracer_;
};

// Post-local SGD: DDP's allreduce for the first avg_warmup steps, then each
// rank's gradients stay its own (post_localSGD_hook with one-rank subgroups)
// or are averaged among its host's ranks (its intra-node subgroup: DDP's
// buckets over the host communicator), and the parameters are averaged over
// every rank every K steps (PeriodicModelAverager with the same warm-up).
class PostLocalSgdSynchronizer : public Synchronizer {
 public:
  PostLocalSgdSynchronizer(comm::Communicator& comm, nn::Mlp& model,
                           const SyncOptions& options, Tracer& tracer,
                           comm::Communicator* host_comm)
      : warmup_(options.avg_warmup),
        allreduce_(comm, model, options, tracer),
        average_(comm, options, tracer) {
    if (host_comm != nullptr) {
      host_allreduce_ = std::make_unique<AllReduceSynchronizer>(
          *host_comm, model, options, tracer, "post_local_sgd");
    }
  }
  const char* name() const override { return "post_local_sgd"; }
  nn::BackwardObserver* backward_observer(int64_t step) override {
    if (step < warmup_) return allreduce_.backward_observer(step);
    return host_allreduce_ ? host_allreduce_->backward_observer(step) : nullptr;
  }
  void AfterBackward(nn::Mlp& model, int64_t step) override {
    if (step < warmup_) {
      allreduce_.AfterBackward(model, step);
    } else if (host_allreduce_) {
      host_allreduce_->AfterBackward(model, step);
    }
  }
  void AfterStep(nn::Mlp& model, int64_t step) override {
    average_.AfterStep(model, step);
  }

 private:
  const int64_t warmup_;
  AllReduceSynchronizer allreduce_;
  std::unique_ptr<AllReduceSynchronizer> host_allreduce_;  // subgroup=host
  ParamAvgSynchronizer average_;
};

class NoSynchronizer : public Synchronizer {
 public:
  const char* name() const override { return "none"; }
  void AfterBackward(nn::Mlp&, int64_t) override {}
  void AfterStep(nn::Mlp&, int64_t) override {}
};

// none, but the ranks meet where allreduce would wait for its gradients:
// the step is then the slower rank's, as in any synchronous run, with no
// byte moved. Its step against none's is what synchronising costs before
// communication does.
class BarrierSynchronizer : public Synchronizer {
 public:
  BarrierSynchronizer(comm::Communicator& comm, Tracer& tracer)
      : comm_(comm), tracer_(tracer) {}
  const char* name() const override { return "barrier"; }
  void AfterBackward(nn::Mlp&, int64_t) override {
    ScopedSpan wait(tracer_, Track::kCompute, "wait for barrier",
                    kExposedCommCategory);
    comm_.Barrier();
  }
  void AfterStep(nn::Mlp&, int64_t) override {}

 private:
  comm::Communicator& comm_;
  Tracer& tracer_;
};

void CheckStepRange(const char* flag, int64_t value, int64_t lo) {
  if (value < lo || value > kMaxSteps) {
    throw std::invalid_argument(
        std::string(flag) + " must be in [" + std::to_string(lo) + ", " +
        std::to_string(kMaxSteps) + "], not " + std::to_string(value));
  }
}

}  // namespace

const std::vector<std::string>& SynchronizerNames() {
  static const std::vector<std::string> names = {
      "allreduce",      "fp16",   "bf16", "powersgd", "param_avg",
      "post_local_sgd", "diloco", "none", "barrier"};
  return names;
}

ReducedBuffers BuffersReducedBy(const std::string& name) {
  ReducedBuffers buffers;
  buffers.grads = name == "allreduce" || name == "post_local_sgd";
  buffers.params = name == "param_avg" || name == "post_local_sgd";
  return buffers;
}

bool IsAveragingStep(int64_t step, const SyncOptions& options) {
  return step >= options.avg_warmup &&
         (step - options.avg_warmup) % options.avg_period == 0;
}

void ValidateSync(const std::string& name, const SyncOptions& options) {
  const auto& names = SynchronizerNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown --sync=" + name +
                                " (expected one of " + known + ")");
  }
  CheckStepRange("--avg_period", options.avg_period, 1);
  CheckStepRange("--avg_warmup", options.avg_warmup, 0);
  CheckStepRange("--inner_steps", options.inner_steps, 1);
  if (options.post_local_host_subgroup && name != "post_local_sgd") {
    throw std::invalid_argument(
        "--post_local_subgroup=host is post_local_sgd's, not --sync=" + name +
        "'s");
  }
  if (name == "powersgd") {
    ValidatePowerSgd(options.powersgd);
    CheckStepRange("--powersgd_start_iter", options.powersgd.start_iter, 1);
  }
  if (options.first_bucket_bytes == 0 || options.bucket_cap_bytes == 0) {
    throw std::invalid_argument("bucket caps must be positive");
  }
  if (!(options.outer_lr >= 0) || !std::isfinite(options.outer_lr)) {
    throw std::invalid_argument("--outer_lr must be finite and >= 0, not " +
                                std::to_string(options.outer_lr));
  }
  if (!(options.outer_momentum >= 0 && options.outer_momentum < 1)) {
    throw std::invalid_argument("--outer_momentum must be in [0, 1), not " +
                                std::to_string(options.outer_momentum));
  }
}

std::unique_ptr<Synchronizer> CreateSynchronizer(
    const std::string& name, comm::Communicator& comm, nn::Mlp& model,
    const SyncOptions& options, Tracer* tracer, comm::Communicator* host_comm) {
  static Tracer disabled(/*enabled=*/false, 0);
  Tracer& trace = tracer != nullptr ? *tracer : disabled;
  if (name == "allreduce") {
    return std::make_unique<AllReduceSynchronizer>(comm, model, options, trace);
  }
  if (name == "param_avg") {
    return std::make_unique<ParamAvgSynchronizer>(comm, options, trace);
  }
  if (name == "fp16" || name == "bf16") {
    const comm::DataType type =
        name == "fp16" ? comm::DataType::kFloat16 : comm::DataType::kBFloat16;
    // The hook's 16-bit buffer is in the communicator's memory kind: host
    // here (a device communicator stages nothing, so it reduces the
    // model's own memory, on the device, which this hook cannot convert).
    if (comm.memory() != comm::MemoryKind::kHost) {
      throw std::invalid_argument("--sync=" + name +
                                  " converts in host memory: --comm=" +
                                  comm.backend() + " reduces device memory");
    }
    return std::make_unique<AllReduceSynchronizer>(
        comm, model, options, trace, name == "fp16" ? "fp16" : "bf16",
        MakeCompressHook(comm, type, model.layout().num_params()));
  }
  if (name == "powersgd") {
    // The hook plans the reducer's own buckets: the model's gradients must
    // be in the communicator's memory (no staging of the whole buffer).
    if (!SharesMemory(comm, model)) {
      throw std::invalid_argument(
          "--sync=powersgd reduces the model's own gradients: --comm=" +
          std::string(comm.backend()) + " does not reach the model's memory");
    }
    return std::make_unique<AllReduceSynchronizer>(
        comm, model, options, trace, "powersgd",
        MakePowerSgdHook(
            model.layout(),
            AssignBuckets(model.layout(), options.first_bucket_bytes,
                          options.bucket_cap_bytes),
            options.powersgd));
  }
  if (name == "post_local_sgd") {
    if (options.post_local_host_subgroup && host_comm == nullptr) {
      throw std::invalid_argument(
          "post_local_sgd with host subgroups needs the host's communicator");
    }
    return std::make_unique<PostLocalSgdSynchronizer>(
        comm, model, options, trace,
        options.post_local_host_subgroup ? host_comm : nullptr);
  }
  if (name == "diloco") {
    return CreateDiLoCoSynchronizer(comm, model, options, trace);
  }
  if (name == "none") return std::make_unique<NoSynchronizer>();
  if (name == "barrier") {
    return std::make_unique<BarrierSynchronizer>(comm, trace);
  }
  throw std::invalid_argument("unknown synchroniser " + name);
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
