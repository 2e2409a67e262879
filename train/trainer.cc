#include "train/trainer.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "comm/gather_strings.h"
#include "nn/atomic_file.h"
#include "nn/cpu_mlp.h"
#include "nn/init.h"
#include "nn/npy.h"
#include "nn/torch_rng.h"
#include "train/dataset.h"
#include "train/distributed_sampler.h"
#include "train/evaluation.h"
#include "train/idx_dataset.h"
#include "train/outputs.h"
#include "train/trace.h"

namespace ringlab::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Settings = std::vector<std::pair<std::string, std::string>>;

// Bounds on every integer setting, so that no arithmetic on them overflows:
// with at most 1e9 samples (so at most 1e9 steps per epoch) and 1e9 epochs,
// a step number, step + 1 and epoch * steps_per_epoch stay within kMaxSteps
// (1e18 < 2^63), and samples + batch_size - 1 within 2e9.
constexpr int64_t kMaxEpochs = 1'000'000'000;
constexpr int64_t kMaxSamples = 1'000'000'000;
static_assert(kMaxEpochs * kMaxSamples <= kMaxSteps);

const char* const kFaultPoints[] = {"after_step", "part_written",
                                    "part_renamed", "before_latest",
                                    "before_prune"};

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

// --dataset, its default resolved.
std::string DatasetKind(const TrainConfig& c) {
  if (!c.dataset.empty()) return c.dataset;
  return c.data_dir.empty() ? "synthetic" : "npy";
}

std::string DataDir(const TrainConfig& c) {
  if (DatasetKind(c) == "fashion_mnist" && c.data_dir.empty()) {
    return kFashionMnistDir;
  }
  return c.data_dir;
}

// What every rank must share, by name: DDP's constructor checks the model's
// shapes; ringlab also checks the rest of the job, since a rank with another
// learning rate or data-set size would silently train something else.
Settings SharedSettings(const TrainConfig& c, int64_t dataset_size) {
  return {{"--model", nn::MlpLayout::Parse(c.model).ToString()},
          {"--sync", c.sync},
          {"--comm", c.comm},
          {"--device", nn::DeviceName(c.device)},
          {"--epochs", std::to_string(c.epochs)},
          {"--lr", FloatText(c.lr)},
          {"--batch_size", std::to_string(c.batch_size)},
          {"--sampler_seed", std::to_string(c.sampler_seed)},
          {"--shuffle", std::to_string(c.shuffle)},
          {"--drop_last", std::to_string(c.drop_last)},
          {"--set_epoch", std::to_string(c.set_epoch)},
          {"--avg_period", std::to_string(c.sync_options.avg_period)},
          {"--avg_warmup", std::to_string(c.sync_options.avg_warmup)},
          {"--dataset", DatasetKind(c)},
          {"the first bucket's cap",
           std::to_string(c.sync_options.first_bucket_bytes)},
          {"--bucket_cap_mb", std::to_string(c.sync_options.bucket_cap_bytes)},
          {"--checkpoint_every", std::to_string(c.checkpoint_every)},
          {"--resume", std::to_string(c.resume)},
          {"the data set size", std::to_string(dataset_size)}};
}

// What a checkpoint must have been written by to be resumed: the shared
// settings except --resume, --epochs and --checkpoint_every (a resumed run may
// train longer, checkpointing differently), plus
// what decides each rank's numbers.
std::string JobDescription(const TrainConfig& c, int world_size,
                           int64_t dataset_size) {
  std::string text;
  for (const auto& [name, value] : SharedSettings(c, dataset_size)) {
    if (name == "--resume" || name == "--epochs" ||
        name == "--checkpoint_every") {
      continue;
    }
    text += name + "=" + value + "\n";
  }
  text += "world size=" + std::to_string(world_size) + "\n";
  text += "--seed=" + std::to_string(c.seed) + "\n";
  text += "--per_rank_data=" + std::to_string(c.per_rank_data) + "\n";
  text += "--data_dir=" + c.data_dir + "\n";
  text += "--init_dir=" + c.init_dir + "\n";
  return text;
}

std::string SerializeSettings(const Settings& settings) {
  std::string text;
  for (const auto& [name, value] : settings) text += value + '\n';
  return text;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos;
       start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

// Like DDP's constructor: every rank checks that all agree, and all fail
// together, with the same message, when one does not.
void CheckRanksAgree(const TrainConfig& config, int64_t dataset_size,
                     comm::Communicator& comm) {
  const Settings settings = SharedSettings(config, dataset_size);
  const auto all = comm::AllGatherStrings(comm, SerializeSettings(settings));
  const std::vector<std::string> reference = SplitLines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<std::string> theirs = SplitLines(all[r]);
    for (size_t i = 0; i < settings.size(); ++i) {
      const std::string value = i < theirs.size() ? theirs[i] : "?";
      if (value != reference[i]) {
        throw std::invalid_argument(
            "rank " + std::to_string(r) + " disagrees with rank 0 on " +
            settings[i].first + " (" + value + " vs " + reference[i] + ")");
      }
    }
  }
}

Dataset FromImages(LabelledImages images, std::string source) {
  Dataset data;
  data.size = images.count;
  data.features = static_cast<int>(images.features);
  data.x = std::move(images.pixels);
  data.y = std::move(images.labels);
  data.source = std::move(source);
  return data;
}

// The training data and, where the data set has one, the test split.
struct TrainingData {
  Dataset train;
  Dataset test;
};

TrainingData LoadTrainingData(const TrainConfig& config,
                              const nn::MlpLayout& layout, int rank,
                              nn::TorchGenerator& generator) {
  const std::string kind = DatasetKind(config);
  if (kind == "fashion_mnist") {
    const std::string dir = DataDir(config);
    ImageDataSet set = ReadFashionMnist(dir);
    return {
        FromImages(std::move(set.train), "fashion_mnist:" + dir),
        FromImages(std::move(set.test), "fashion_mnist:" + dir + " (test)")};
  }
  if (kind == "npy") {
    return {LoadDataset(config.data_dir, rank, layout.in_features(),
                        layout.num_classes()),
            {}};
  }
  return {MakeSyntheticDataset(config.samples, layout.in_features(),
                               layout.num_classes(), generator),
          {}};
}

std::vector<float> LoadInitDir(const std::string& dir,
                               const nn::MlpLayout& layout) {
  std::vector<float> params(layout.num_params());
  try {
    nn::LoadParams(dir, layout, params.data());
  } catch (const nn::NpyError& e) {
    throw std::invalid_argument(e.what());
  }
  return params;
}

// As a PyTorch script: seed, build the model (its init draws), draw the data.
std::vector<float> InitialParams(const TrainConfig& config,
                                 const nn::MlpLayout& layout,
                                 nn::TorchGenerator& generator) {
  std::vector<float> params(layout.num_params());
  // Drawn even when --init_dir replaces them: the synthetic data drawn next
  // from the same generator must not depend on where the parameters came from.
  nn::InitLikeTorch(layout, generator, params.data());
  if (!config.init_dir.empty()) params = LoadInitDir(config.init_dir, layout);
  return params;
}

// Loads (so checks) every rank's data set, or only data_rank's when it is
// not negative, and returns the size they share.
int64_t DatasetSize(const TrainConfig& config, int world_size, int data_rank,
                    const nn::MlpLayout& layout) {
  const std::string kind = DatasetKind(config);
  if (kind == "synthetic") return config.samples;
  if (kind == "fashion_mnist") {
    ImageDataSetShape shape;
    try {
      shape = ReadFashionMnistShape(DataDir(config));
    } catch (const DataError& e) {
      if (!config.data_dir.empty()) throw;
      throw DataError(std::string(e.what()) +
                      " (apt-get install dataset-fashion-mnist, or give "
                      "--data_dir)");
    }
    if (shape.features != layout.in_features() || layout.num_classes() != 10) {
      throw std::invalid_argument(
          "--dataset=fashion_mnist has " + std::to_string(shape.features) +
          " pixels per image and 10 classes: the model must be " +
          std::to_string(shape.features) + ",...,10, not " + layout.ToString());
    }
    return shape.train_count;
  }
  int64_t size = -1;
  const int first = data_rank >= 0 ? data_rank : 0;
  const int last = data_rank >= 0 ? data_rank : std::max(world_size, 1) - 1;
  for (int rank = first; rank <= last; ++rank) {
    const Dataset data = LoadDataset(
        config.data_dir, rank, layout.in_features(), layout.num_classes());
    if (size >= 0 && data.size != size) {
      throw std::invalid_argument("--data_dir " + config.data_dir + ": rank " +
                                  std::to_string(rank) + "'s data set holds " +
                                  std::to_string(data.size) +
                                  " samples, rank 0's " + std::to_string(size) +
                                  " (DistributedSampler needs one size)");
    }
    size = data.size;
  }
  if (size > kMaxSamples) {
    throw std::invalid_argument("--data_dir " + config.data_dir + " holds " +
                                std::to_string(size) +
                                " samples, more than the 1e9 supported");
  }
  return size;
}

void CheckResumable(const TrainConfig& config, int world_size,
                    int64_t dataset_size) {
  const std::string dir = config.out_dir + "/checkpoints";
  std::optional<int64_t> latest;
  try {
    latest = LatestCheckpoint(dir);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("--resume: ") + e.what());
  }
  if (!latest) {
    throw std::invalid_argument("--resume: no checkpoint in " + dir);
  }
  const std::vector<std::string> theirs = SplitLines(ReadJobDescription(dir));
  const std::vector<std::string> ours =
      SplitLines(JobDescription(config, world_size, dataset_size));
  for (size_t i = 0; i < ours.size(); ++i) {
    if (i >= theirs.size() || theirs[i] != ours[i]) {
      throw std::invalid_argument(
          "--resume: the checkpoint in " + dir + " is another job's (it has " +
          (i < theirs.size() ? theirs[i] : std::string("nothing")) +
          ", this run " + ours[i] + ")");
    }
  }
  const nn::MlpLayout layout = nn::MlpLayout::Parse(config.model);
  // Every rank's part, as each rank will read it: a checkpoint missing one
  // is refused here, before any rank starts.
  try {
    for (int rank = 0; rank < world_size; ++rank) {
      ReadRankCheckpoint(dir, rank, layout, *latest);
    }
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--resume: ") + e.what());
  }
}

void CheckRange(const char* flag, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    throw std::invalid_argument(std::string(flag) + " must be in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) +
                                "], not " + std::to_string(value));
  }
}

void CheckBounds(const TrainConfig& c, int world_size) {
  CheckRange("--epochs", c.epochs, 0, kMaxEpochs);
  CheckRange("--batch_size", c.batch_size, 1, kMaxSamples);
  if (c.data_dir.empty()) CheckRange("--samples", c.samples, 1, kMaxSamples);
  CheckRange("--checkpoint_every", c.checkpoint_every, 0, kMaxSteps);
  CheckRange("--fault_after_step", c.fault_after_step, -1, kMaxSteps);
  CheckRange("--fault_rank", c.fault_rank, 0, std::max(world_size, 1) - 1);
  if (std::find(std::begin(kFaultPoints), std::end(kFaultPoints),
                c.fault_point) == std::end(kFaultPoints)) {
    throw std::invalid_argument("unknown --fault_point=" + c.fault_point);
  }
  // Seeds are uint64, as torch.manual_seed's: the rank (--per_rank_data) and
  // the epoch (--set_epoch) added to them must not wrap around.
  const uint64_t ranks_added =
      c.per_rank_data ? static_cast<uint64_t>(std::max(world_size, 1) - 1) : 0;
  if (c.seed > UINT64_MAX - ranks_added) {
    throw std::invalid_argument(
        "--seed + rank must stay below 2^64 with --per_rank_data: --seed "
        "must be at most " +
        std::to_string(UINT64_MAX - ranks_added));
  }
  const uint64_t epochs_added =
      c.set_epoch && c.epochs > 0 ? static_cast<uint64_t>(c.epochs - 1) : 0;
  if (c.sampler_seed > UINT64_MAX - epochs_added) {
    throw std::invalid_argument(
        "--sampler_seed + epoch must stay below 2^64 with --set_epoch: "
        "--sampler_seed must be at most " +
        std::to_string(UINT64_MAX - epochs_added));
  }
}

void CheckDataFlags(const TrainConfig& c) {
  const std::string kind = DatasetKind(c);
  if (kind != "synthetic" && kind != "npy" && kind != "fashion_mnist") {
    throw std::invalid_argument("unknown --dataset=" + kind +
                                " (expected synthetic, npy or fashion_mnist)");
  }
  if (kind == "npy" && c.data_dir.empty()) {
    throw std::invalid_argument("--dataset=npy needs --data_dir");
  }
  if (kind == "synthetic" && !c.data_dir.empty()) {
    throw std::invalid_argument(
        "--data_dir is for --dataset=npy or --dataset=fashion_mnist");
  }
  if (kind != "synthetic" && c.per_rank_data) {
    throw std::invalid_argument("--per_rank_data draws synthetic data");
  }
  CheckRange("--eval_every", c.eval_every, 0, kMaxEpochs);
  if (!c.trace_path.empty()) {
    const fs::path parent = fs::path(c.trace_path).parent_path();
    if (fs::is_directory(c.trace_path) ||
        (!parent.empty() && !fs::is_directory(parent))) {
      throw std::invalid_argument("--trace=" + c.trace_path +
                                  ": not a file in an existing directory");
    }
  }
}

// Testing: rank --fault_rank kills itself (SIGKILL) at `point` of step
// --fault_after_step, as a crash there would stop it.
void MaybeFault(const TrainConfig& c, int rank, int64_t step,
                const char* point) {
  if (step == c.fault_after_step && rank == c.fault_rank &&
      c.fault_point == point) {
    std::fflush(nullptr);
    raise(SIGKILL);
  }
}

// Rank 0, while no other rank touches the checkpoints: a fresh run removes
// older ones (they must not be resumed into it) and describes its job; a
// resumed one removes what a crash left beyond the latest.
void PrepareCheckpoints(const TrainConfig& config, int world_size,
                        int64_t dataset_size) {
  const std::string dir = config.out_dir + "/checkpoints";
  if (config.resume) {
    if (const auto latest = LatestCheckpoint(dir)) {
      RemoveUnfinishedCheckpoints(dir, *latest);
    }
    return;
  }
  std::error_code error;
  fs::remove_all(dir, error);
  if (config.checkpoint_every > 0) {
    WriteJobDescription(dir, JobDescription(config, world_size, dataset_size));
  }
}

// Collective: every rank's part of the checkpoint after `step` goes to disk,
// then rank 0 moves latest to it, then removes the steps before it.
void TakeCheckpoint(const TrainConfig& config, const nn::MlpLayout& layout,
                    const nn::Mlp& model,
                    const std::vector<StepRecord>& history, int64_t step,
                    comm::Communicator& comm) {
  const std::string dir = config.out_dir + "/checkpoints";
  const int rank = comm.rank();
  RankCheckpoint checkpoint;
  checkpoint.next_step = step + 1;
  checkpoint.params.resize(layout.num_params());
  model.GetParams(checkpoint.params.data());
  checkpoint.history = history;
  WriteRankCheckpoint(dir, rank, layout, checkpoint,
                      [&] { MaybeFault(config, rank, step, "part_written"); });
  MaybeFault(config, rank, step, "part_renamed");
  comm.Barrier();  // every rank's part is on disk
  MaybeFault(config, rank, step, "before_latest");
  if (rank != 0) return;
  MarkLatestCheckpoint(dir, step + 1);
  MaybeFault(config, rank, step, "before_prune");
  PruneCheckpointsBefore(dir, step + 1);
}

// Where training starts: the latest checkpoint's parameters and history
// when resuming, else rank 0's initial parameters (DDP's constructor
// broadcasts them). Returns the first step to take.
int64_t StartingPoint(const TrainConfig& config, const nn::MlpLayout& layout,
                      const std::vector<float>& params,
                      comm::Communicator& comm, nn::Mlp& model,
                      std::vector<StepRecord>* history) {
  const std::string dir = config.out_dir + "/checkpoints";
  const std::optional<int64_t> latest =
      config.resume ? LatestCheckpoint(dir) : std::nullopt;
  if (!latest) {
    model.SetParams(params.data());
    BroadcastParams(comm, model, /*root=*/0);
    return 0;
  }
  RankCheckpoint checkpoint =
      ReadRankCheckpoint(dir, comm.rank(), layout, *latest);
  model.SetParams(checkpoint.params.data());
  *history = std::move(checkpoint.history);
  return *latest;
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

// One step: forward and backward (the synchroniser's observer reducing
// buckets as they complete), the synchroniser, SGD; what losses.csv records
// of it (comm_ms: the time this thread spent on communication, the part of
// it that backward did not hide).
StepRecord TakeStep(nn::Mlp& model, Synchronizer& synchronizer,
                    comm::Communicator& comm, const Batch& batch, int64_t count,
                    const nn::SgdOptions& sgd, int64_t epoch, int64_t step,
                    Tracer& tracer) {
  const uint64_t bytes_before = comm.bytes_sent();
  const auto start = Clock::now();
  nn::BackwardObserver* observer = synchronizer.backward_observer();
  TracingObserver traced(tracer, observer, start);
  const float loss = model.ForwardBackward(
      batch.x.data(), batch.y.data(), static_cast<int>(count),
      tracer.enabled() ? &traced : observer);
  const auto sync_start = Clock::now();
  synchronizer.AfterBackward(model);
  double comm_ms = MillisecondsSince(sync_start);
  {
    ScopedSpan span(tracer, Track::kCompute, "sgd step", "compute");
    model.SgdStep(sgd);
  }
  const auto average_start = Clock::now();
  synchronizer.AfterStep(model, step);
  comm_ms += MillisecondsSince(average_start);
  return {epoch,   step,
          loss,    MillisecondsSince(start),
          comm_ms, comm.bytes_sent() - bytes_before};
}

}  // namespace

void ValidateConfig(const TrainConfig& config, int world_size, int data_rank) {
  const nn::MlpLayout layout = nn::MlpLayout::Parse(config.model);
  CheckBounds(config, world_size);
  if (!(config.lr >= 0.0f) || config.lr > 1e6f) {
    throw std::invalid_argument("--lr must be a number in [0, 1e6]");
  }
  if ((config.checkpoint_every > 0 || config.resume) &&
      config.out_dir.empty()) {
    throw std::invalid_argument(
        "--checkpoint_every and --resume need --out_dir");
  }
  ValidateSync(config.sync, config.sync_options);
  if (config.timeout.count() <= 0) {
    throw std::invalid_argument("--timeout must be positive");
  }
  if ((config.comm == "nccl" || config.comm == "ipc_ring" ||
       config.comm == "ipc_ring_threads") &&
      config.device != nn::Device::kCuda) {
    throw std::invalid_argument("--comm=" + config.comm +
                                " works on GPU memory: add --device=cuda");
  }
  CheckDataFlags(config);
  for (const std::string* dir : {&config.data_dir, &config.init_dir}) {
    if (!dir->empty() && !fs::is_directory(*dir)) {
      throw std::invalid_argument("no such directory: " + *dir);
    }
  }
  const int64_t dataset_size =
      DatasetSize(config, world_size, data_rank, layout);
  if (!config.init_dir.empty()) LoadInitDir(config.init_dir, layout);
  if (!config.out_dir.empty()) {
    MakeDirs(config.out_dir);
    const std::string probe = config.out_dir + "/.ringlab-write-probe";
    FILE* file = std::fopen(probe.c_str(), "wb");
    if (file == nullptr || std::fclose(file) != 0) {
      throw std::invalid_argument("--out_dir " + config.out_dir +
                                  " is not writable");
    }
    std::remove(probe.c_str());
  }
  if (config.resume) CheckResumable(config, world_size, dataset_size);
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
  if (config.sync == "allreduce") {
    options.grads_memory = comm.Allocate(layout.num_params());
  } else if (config.sync == "param_avg") {
    options.params_memory = comm.Allocate(layout.num_params());
  }
  return nn::CreateCpuMlp(layout, options);
}

namespace {

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
class Evaluator {
 public:
  Evaluator(const TrainConfig& config, const Dataset& test, int rank)
      : every_(config.eval_every),
        test_(test),
        active_(rank == 0 && every_ > 0 && test.size > 0),
        start_(Clock::now()) {}

  void AfterEpoch(int64_t epochs, int64_t steps, nn::Mlp& model,
                  const comm::Communicator& comm, Tracer& tracer,
                  std::vector<EvalRecord>* out) {
    if (!active_ || epochs % every_ != 0) return;
    const auto eval_start = Clock::now();
    ScopedSpan span(tracer, Track::kCompute, "evaluation", "eval");
    const double wall_s =
        std::chrono::duration<double>(eval_start - start_).count() -
        excluded_s_;
    const EvalResult r = Evaluate(model, test_);
    out->push_back(
        {epochs, steps, r.loss, r.accuracy, wall_s, comm.bytes_sent()});
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

}  // namespace

TrainResult RunRank(const TrainConfig& config, comm::Communicator& comm,
                    comm::Store* store) {
  const int rank = comm.rank();
  const int world_size = comm.world_size();
  const nn::MlpLayout layout = nn::MlpLayout::Parse(config.model);
  if (comm.memory() == comm::MemoryKind::kDevice &&
      config.device != nn::Device::kCuda) {
    throw std::invalid_argument(std::string("--comm=") + comm.backend() +
                                " works on GPU memory: add --device=cuda");
  }

  nn::TorchGenerator generator(config.seed + (config.per_rank_data ? rank : 0));
  std::vector<float> params = InitialParams(config, layout, generator);
  const TrainingData data = LoadTrainingData(config, layout, rank, generator);

  // Before the agreement check, a collective no rank passes before rank 0.
  if (rank == 0 && !config.out_dir.empty()) {
    PrepareCheckpoints(config, world_size, data.train.size);
  }
  CheckRanksAgree(config, data.train.size, comm);

  Tracer tracer(!config.trace_path.empty(), rank);
  std::unique_ptr<nn::Mlp> model = CreateModel(config, layout, comm);
  auto synchronizer = CreateSynchronizer(config.sync, comm, *model,
                                         config.sync_options, &tracer);
  TrainResult result;
  const int64_t first_step =
      StartingPoint(config, layout, params, comm, *model, &result.history);

  const DistributedSampler sampler(
      data.train.size, world_size, rank,
      {config.shuffle, config.sampler_seed, config.drop_last});
  Schedule schedule;
  schedule.samples = sampler.num_samples();
  schedule.steps_per_epoch =
      (schedule.samples + config.batch_size - 1) / config.batch_size;
  schedule.total_steps = schedule.steps_per_epoch * config.epochs;
  if (rank == 0 && !config.quiet) {
    PrintJobLine(config, layout, comm, schedule, first_step);
  }

  const nn::SgdOptions sgd{config.lr};
  Evaluator evaluator(config, data.test, rank);
  Batch batch;
  for (int64_t step = first_step; step < schedule.total_steps; ++step) {
    const int64_t epoch = step / schedule.steps_per_epoch;
    const int64_t index = step % schedule.steps_per_epoch;
    const int64_t begin = index * config.batch_size;
    const int64_t end = std::min(begin + config.batch_size, schedule.samples);
    {
      ScopedSpan span(tracer, Track::kCompute, "load batch", "data");
      batch.Load(data.train, sampler, config.set_epoch ? epoch : 0, begin, end);
    }
    result.history.push_back(TakeStep(*model, *synchronizer, comm, batch,
                                      end - begin, sgd, epoch, step, tracer));

    if (config.checkpoint_every > 0 &&
        (step + 1) % config.checkpoint_every == 0 &&
        step + 1 < schedule.total_steps) {
      TakeCheckpoint(config, layout, *model, result.history, step, comm);
    }
    MaybeFault(config, rank, step, "after_step");
    if (index == schedule.steps_per_epoch - 1) {
      evaluator.AfterEpoch(epoch + 1, step + 1, *model, comm, tracer,
                           &result.evaluations);
      if (rank == 0 && !config.quiet) {
        PrintEpochLine(config, result.history.back(), result.evaluations);
      }
    }
  }

  result.final_params.resize(layout.num_params());
  model->GetParams(result.final_params.data());
  if (tracer.enabled()) result.trace_events = tracer.EventsJson();
  WriteRunOutputs(config, layout, data.train.source, result, comm);
  return result;
}

}  // namespace ringlab::train
