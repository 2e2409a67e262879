#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "comm/cluster/emulated_cluster.h"
#include "nn/cpu_mlp.h"
#include "sync/synchronizer.h"
#include "torch_compat/generator.h"
#include "trace/trace.h"
#include "train/checkpointing.h"
#include "train/cpu_quota.h"
#include "train/distributed_sampler.h"
#include "train/mlp_buffers.h"
#include "train/outputs.h"
#include "train/training_data.h"

namespace ringlab::train {
namespace {

using trace::ScopedSpan;
using trace::Tracer;
using trace::Track;
using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

// One batch of this rank's share, as the DataLoader would give it.
struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
  std::vector<int64_t> indices;
  int64_t indices_epoch = -1;

  void Load(const Dataset& data, const DistributedSampler& sampler,
            int64_t sampler_epoch, int64_t begin, int64_t end) {
    if (sampler_epoch != indices_epoch) {
      indices = sampler.Indices(sampler_epoch);
      indices_epoch = sampler_epoch;
    }
    data.Gather(indices, static_cast<size_t>(begin), static_cast<size_t>(end),
                &x, &y);
  }
};

// Records forward and each layer's backward on the compute track, passing
// every report on to the synchroniser's observer.
class TracingObserver : public nn::BackwardObserver {
 public:
  TracingObserver(Tracer& tracer, nn::BackwardObserver* inner,
                  Clock::time_point start)
      : tracer_(tracer), inner_(inner), last_(start) {}
  void OnForwardDone() override {
    Mark("forward");
    if (inner_ != nullptr) inner_->OnForwardDone();
  }
  void OnLayerGrads(int layer, std::function<void()> wait_ready) override {
    Mark("backward fc" + std::to_string(layer + 1));
    if (inner_ != nullptr) inner_->OnLayerGrads(layer, std::move(wait_ready));
  }

 private:
  void Mark(std::string name) {
    const auto now = Clock::now();
    tracer_.Span(Track::kCompute, std::move(name), "compute", last_, now);
    last_ = now;
  }
  Tracer& tracer_;
  nn::BackwardObserver* inner_;
  Clock::time_point last_;
};

// The bus bytes this rank's communicators have sent: the job's and, with
// --post_local_subgroup=host, its host group's.
struct SentBytes {
  const comm::Communicator& job;
  const comm::Communicator* host;
  uint64_t operator()() const {
    return job.bytes_sent() + (host != nullptr ? host->bytes_sent() : 0);
  }
  // The bytes counted since the last call: a reduction that completes on a
  // synchroniser's own thread between two steps counts in the next.
  uint64_t Unrecorded() {
    const uint64_t now = (*this)();
    const uint64_t since = now - recorded;
    recorded = now;
    return since;
  }
  uint64_t recorded = 0;
};

// One step: forward and backward (the synchroniser's observer reducing
// buckets as they complete), the synchroniser, SGD; what losses.csv records
// of it (comm_ms: the time this thread spent on communication, the part of
// it that backward did not hide).
StepRecord TakeStep(nn::Mlp& model, MlpBuffers& buffers,
                    sync::Synchronizer& synchronizer, SentBytes& sent,
                    const Batch& batch, int64_t count,
                    const nn::SgdOptions& sgd, double stretch, int64_t epoch,
                    int64_t step, Tracer& tracer) {
  const auto start = Clock::now();
  sync::GradObserver* reducer = synchronizer.backward_observer(step);
  std::optional<LayerToTensorObserver> adapted;
  nn::BackwardObserver* observer =
      reducer != nullptr ? &adapted.emplace(*reducer) : nullptr;
  TracingObserver traced(tracer, observer, start);
  const float loss = model.ForwardBackward(
      batch.x.data(), batch.y.data(), static_cast<int>(count),
      tracer.enabled() ? &traced : observer);
  if (stretch > 0.0) {  // a straggler computes (1 + stretch) times as long
    ScopedSpan span(tracer, Track::kCompute, "straggler wait", "compute");
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(
        stretch * MillisecondsSince(start)));
  }
  const auto sync_start = Clock::now();
  synchronizer.AfterBackward(buffers, step);
  double comm_ms = MillisecondsSince(sync_start);
  {
    ScopedSpan span(tracer, Track::kCompute, "sgd step", "compute");
    model.SgdStep(sgd);
  }
  const auto average_start = Clock::now();
  synchronizer.AfterStep(buffers, step);
  comm_ms += MillisecondsSince(average_start);
  return {
      epoch, step, loss, MillisecondsSince(start), comm_ms, sent.Unrecorded()};
}
// A CPU model over a host-memory communicator keeps the buffer its
// synchroniser reduces (the gradients for allreduce, the parameters for
// param_avg) in the communicator's registered memory, so that the allreduce
// copies nothing in or out (shm_ring reduces it zero-copy). Collective: every
// rank has the same synchroniser, checked before.
std::unique_ptr<nn::Mlp> CreateModel(const TrainConfig& config,
                                     const nn::MlpLayout& layout,
                                     comm::Communicator& comm) {
  if (config.device != nn::Device::kCpu ||
      comm.memory() != comm::MemoryKind::kHost) {
    return nn::CreateMlp(config.device, layout);
  }
  nn::CpuMlpOptions options;
  options.gemm = nn::DefaultCpuGemmMode();
  const sync::ReducedBuffers reduced = sync::FindSync(config.sync).reduces;
  if (reduced.grads) options.grads_memory = comm.Allocate(layout.num_params());
  if (reduced.params) {
    options.params_memory = comm.Allocate(layout.num_params());
  }
  return nn::CreateCpuMlp(layout, options);
}

// How the epochs divide into steps for this rank.
struct Schedule {
  int64_t samples = 0;  // this rank's share per epoch
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
};

void PrintJobLine(const TrainConfig& config, const nn::MlpLayout& layout,
                  const comm::Communicator& comm, const Schedule& schedule,
                  int64_t first_step) {
  std::printf(
      "ringlab train: model %s, %d rank(s), --sync=%s --comm=%s "
      "--device=%s, --dataset=%s, %lld samples/rank, %lld step(s)/epoch%s\n",
      layout.ToString().c_str(), comm.world_size(), config.sync.c_str(),
      comm.backend(), nn::DeviceName(config.device),
      DatasetKind(config).c_str(), static_cast<long long>(schedule.samples),
      static_cast<long long>(schedule.steps_per_epoch),
      first_step > 0
          ? (", resumed after step " + std::to_string(first_step)).c_str()
          : "");
  std::fflush(stdout);
}

void PrintEpochLine(const TrainConfig& config, const StepRecord& record,
                    const std::vector<EvalRecord>& evaluations) {
  std::string test;
  if (!evaluations.empty() && evaluations.back().step == record.step + 1) {
    char text[96];
    std::snprintf(text, sizeof(text), "; test loss %.4f, accuracy %.4f",
                  evaluations.back().test_loss,
                  evaluations.back().test_accuracy);
    test = text;
  }
  std::printf(
      "epoch %lld/%lld: loss %.6f (rank 0, its last batch), %.3f ms/step, "
      "%.3f ms of it synchronising%s\n",
      static_cast<long long>(record.epoch + 1),
      static_cast<long long>(config.epochs), record.loss, record.step_ms,
      record.comm_ms, test.c_str());
  std::fflush(stdout);
}

// Rank 0's test-set evaluation after `epochs` epochs, timed apart from
// training.
// Evaluates `model` with `params` in place of its own where given (DiLoCo's
// outer parameters), its own restored afterwards.
EvalResult EvaluateWithParams(nn::Mlp& model, const std::vector<float>* params,
                              const Dataset& test) {
  if (params == nullptr) return Evaluate(model, test);
  std::vector<float> own(params->size());
  model.GetParams(own.data());
  model.SetParams(params->data());
  const EvalResult r = Evaluate(model, test);
  model.SetParams(own.data());
  return r;
}

class Evaluator {
 public:
  Evaluator(const TrainConfig& config, const Dataset& test, int rank)
      : every_(config.eval_every),
        test_(test),
        active_(rank == 0 && every_ > 0 && test.size > 0),
        start_(Clock::now()) {}

  // params: what to evaluate in place of the model's own parameters (null:
  // its own).
  void AfterEpoch(int64_t epochs, int64_t steps, nn::Mlp& model,
                  const std::vector<float>* params, const SentBytes& sent,
                  Tracer& tracer, std::vector<EvalRecord>* out) {
    if (!active_ || epochs % every_ != 0) return;
    const auto eval_start = Clock::now();
    ScopedSpan span(tracer, Track::kCompute, "evaluation", "eval");
    const double wall_s =
        std::chrono::duration<double>(eval_start - start_).count() -
        excluded_s_;
    const EvalResult r = EvaluateWithParams(model, params, test_);
    out->push_back({epochs, steps, r.loss, r.accuracy, wall_s, sent()});
    excluded_s_ +=
        std::chrono::duration<double>(Clock::now() - eval_start).count();
  }

 private:
  int64_t every_;
  const Dataset& test_;
  bool active_;
  Clock::time_point start_;
  double excluded_s_ = 0;
};

using Counters = comm::cluster::EmulatedCluster::Counters;

// The counters of this rank's host's link, on an emulated host.
std::optional<Counters> HostLinkCounters(const TrainConfig& config) {
  if (config.emulated_host < 0) return std::nullopt;
  return comm::cluster::EmulatedCluster::ThisHostLinkCounters();
}

Schedule ScheduleOf(const TrainConfig& config,
                    const DistributedSampler& sampler) {
  Schedule schedule;
  schedule.samples = sampler.num_samples();
  schedule.steps_per_epoch =
      (schedule.samples + config.batch_size - 1) / config.batch_size;
  schedule.total_steps = schedule.steps_per_epoch * config.epochs;
  return schedule;
}

// The run's result: the model's parameters, or the synchroniser's where it
// keeps its own (DiLoCo's outer parameters).
std::vector<float> FinalParams(const sync::Synchronizer& synchronizer,
                               const nn::Mlp& model) {
  if (const std::vector<float>* shared = synchronizer.evaluated_params()) {
    return *shared;
  }
  std::vector<float> params(model.layout().num_params());
  model.GetParams(params.data());
  return params;
}

// Collectively, before the first step: the job's description (what binds a
// checkpoint's parts to it), the checkpoints prepared, and the ranks agreed
// on the settings. Returns the description.
std::string PrepareJob(const TrainConfig& config, int64_t dataset_size,
                       comm::Communicator& comm) {
  // What binds a checkpoint's parts to this job (hashing the data's files):
  // made only where checkpoints are written or read.
  const bool checkpoints =
      !config.out_dir.empty() && (config.checkpoint_every > 0 || config.resume);
  const std::string job =
      checkpoints ? JobDescription(config, comm.world_size(), dataset_size)
                  : "";
  if (config.resume) {
    CheckResumable(config, comm.world_size(), job, /*every_part=*/false);
    // Every rank has read what it resumes from before rank 0 promotes a
    // staged checkpoint (PrepareCheckpoints renames the directory the
    // others may still be reading: CI saw rank 1 find it gone).
    comm.Barrier();
  }
  // Before the agreement check, a collective no rank passes before rank 0.
  if (comm.rank() == 0 && !config.out_dir.empty()) {
    PrepareCheckpoints(config, job);
  }
  CheckRanksAgree(config, dataset_size, comm);
  return job;
}

}  // namespace

TrainResult RunRank(const TrainConfig& config, comm::Communicator& comm,
                    const FaultInjection& faults,
                    const HostCommFactory& make_host_comm) {
  const int rank = comm.rank();
  const int world_size = comm.world_size();
  const nn::MlpLayout layout = nn::MlpLayout::Parse(config.model);
  if (comm.memory() == comm::MemoryKind::kDevice &&
      config.device != nn::Device::kCuda) {
    // ValidateConfig says it in the CLI's terms; this guards other callers.
    throw std::invalid_argument(std::string("a CPU model cannot train over ") +
                                comm.backend() + ", which reduces GPU memory");
  }

  torch_compat::TorchGenerator generator(config.seed +
                                         (config.per_rank_data ? rank : 0));
  std::vector<float> params = InitialParams(config, layout, generator);
  const TrainingData data = LoadTrainingData(config, layout, rank, generator);

  const std::string job = PrepareJob(config, data.train.size, comm);
  const std::unique_ptr<comm::Communicator> host =
      make_host_comm ? make_host_comm() : nullptr;
  comm::Communicator* const host_comm = host.get();

  Tracer tracer(!config.trace_path.empty(), rank);
  std::unique_ptr<nn::Mlp> model = CreateModel(config, layout, comm);
  MlpBuffers buffers(*model);
  auto synchronizer = sync::CreateSync(
      config.sync, {comm, buffers, config.sync_options, tracer, host_comm});
  SentBytes sent{comm, host_comm};
  TrainResult result;
  const int64_t first_step =
      StartingPoint(config, layout, params, job, comm, *model,
                    synchronizer->state(), &result.history);
  synchronizer->Start(buffers, /*resumed=*/first_step > 0);

  const DistributedSampler sampler(
      data.train.size, world_size, rank,
      {config.shuffle, config.sampler_seed, config.drop_last});
  const Schedule schedule = ScheduleOf(config, sampler);
  if (rank == 0 && !config.quiet) {
    PrintJobLine(config, layout, comm, schedule, first_step);
  }

  const nn::SgdOptions& sgd = config.sgd;
  const bool straggler = rank == config.straggler_rank;
  const bool sleeps = config.straggler_limit == StragglerLimit::kSleep;
  const double stretch =
      straggler && sleeps ? config.straggler_factor - 1.0 : 0.0;
  std::optional<CpuQuota> quota;  // released as the rank returns
  if (straggler && !sleeps) quota.emplace(1.0 / config.straggler_factor);
  Evaluator evaluator(config, data.test, rank);
  bool staged = !config.resume;  // a fresh run's first checkpoint is staged
  Batch batch;
  const std::optional<Counters> link_before = HostLinkCounters(config);
  sent.recorded = sent();  // the start-up's broadcast is no step's
  for (int64_t step = first_step; step < schedule.total_steps; ++step) {
    const int64_t epoch = step / schedule.steps_per_epoch;
    const int64_t index = step % schedule.steps_per_epoch;
    const int64_t begin = index * config.batch_size;
    const int64_t end = std::min(begin + config.batch_size, schedule.samples);
    {
      ScopedSpan span(tracer, Track::kCompute, "load batch", "data");
      batch.Load(data.train, sampler, config.set_epoch ? epoch : 0, begin, end);
    }
    result.history.push_back(TakeStep(*model, buffers, *synchronizer, sent,
                                      batch, end - begin, sgd, stretch, epoch,
                                      step, tracer));

    if (config.checkpoint_every > 0 &&
        (step + 1) % config.checkpoint_every == 0 &&
        step + 1 < schedule.total_steps) {
      TakeCheckpoint(config, faults, layout, *model, synchronizer->state(),
                     result.history, job, step, comm, &staged);
    }
    MaybeFault(faults, rank, step, "after_step");
    if (index == schedule.steps_per_epoch - 1) {
      evaluator.AfterEpoch(epoch + 1, step + 1, *model,
                           synchronizer->evaluated_params(), sent, tracer,
                           &result.evaluations);
      if (rank == 0 && !config.quiet) {
        PrintEpochLine(config, result.history.back(), result.evaluations);
      }
    }
  }

  synchronizer->Finish();  // nothing in flight once the ranks part
  if (!result.history.empty())
    result.history.back().bytes_sent += sent.Unrecorded();
  const std::optional<Counters> link_after = HostLinkCounters(config);
  if (link_before && link_after) {
    result.link =
        LinkTraffic{config.emulated_host, link_after->sent - link_before->sent,
                    link_after->received - link_before->received};
  }
  result.final_params = FinalParams(*synchronizer, *model);
  if (tracer.enabled()) result.trace_events = tracer.EventsJson();
  WriteRunOutputs(config, layout, data.train.source, result, comm);
  return result;
}

}  // namespace ringlab::train
