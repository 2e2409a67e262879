#include "train/job_checks.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/backend.h"
#include "comm/gather_strings.h"
#include "io/checksums.h"
#include "io/dirs.h"
#include "io/npy.h"
#include "nn/params_io.h"
#include "sync/synchronizer.h"
#include "train/checkpoint.h"
#include "train/cpu_quota.h"
#include "train/idx_dataset.h"
#include "train/memory_check.h"
#include "train/mlp_buffers.h"
#include "train/outputs.h"
#include "train/training_data.h"

namespace ringlab::train {
namespace {

namespace fs = std::filesystem;
using Settings = std::vector<std::pair<std::string, std::string>>;

// Bounds on every integer setting, so that no arithmetic on them overflows:
// with at most 1e9 samples (so at most 1e9 steps per epoch) and 1e9 epochs,
// a step number, step + 1 and epoch * steps_per_epoch stay within kMaxSteps
// (1e18 < 2^63), and samples + batch_size - 1 within 2e9.
constexpr int64_t kMaxEpochs = 1'000'000'000;
constexpr int64_t kMaxSamples = 1'000'000'000;
static_assert(kMaxEpochs * kMaxSamples <= sync::kMaxSteps);

// What every rank must share, by name: DDP's constructor checks the model's
// shapes; ringlab also checks the rest of the job, since a rank with another
// learning rate or data-set size would silently train something else.
Settings SharedSettings(const TrainConfig& c, int64_t dataset_size) {
  Settings settings = {
      {"--model", nn::MlpLayout::Parse(c.model).ToString()},
      {"--sync", c.sync},
      {"--comm", c.comm},
      {"--device", nn::DeviceName(c.device)},
      {"--epochs", std::to_string(c.epochs)},
      {"--lr", FloatText(c.sgd.lr)},
      {"--momentum", FloatText(c.sgd.momentum)},
      {"--nesterov", std::to_string(c.sgd.nesterov)},
      {"--weight_decay", FloatText(c.sgd.weight_decay)},
      {"--straggler_rank", std::to_string(c.straggler_rank)},
      {"--straggler_factor", std::to_string(c.straggler_factor)},
      {"--batch_size", std::to_string(c.batch_size)},
      {"--sampler_seed", std::to_string(c.sampler_seed)},
      {"--shuffle", std::to_string(c.shuffle)},
      {"--drop_last", std::to_string(c.drop_last)},
      {"--set_epoch", std::to_string(c.set_epoch)},
      {"--train_subset", std::to_string(c.train_subset)},
      {"--dataset", DatasetKind(c)},
      {"--checkpoint_every", std::to_string(c.checkpoint_every)},
      {"--resume", std::to_string(c.resume)},
      {"the data set size", std::to_string(dataset_size)}};
  // Named only where it is not the default, so that a job from before the
  // flag keeps its description (and its checkpoints resume).
  if (c.straggler_limit != StragglerLimit::kSleep) {
    settings.push_back(
        {"--straggler_limit", StragglerLimitName(c.straggler_limit)});
  }
  // The synchroniser's options, every one it declares.
  for (const auto& [name, value] : c.sync_options.values()) {
    settings.push_back({"--" + name, c.sync_options.Text(name)});
  }
  return settings;
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

// "<what> <name> sha256=<hex>" for each of `names` in dir.
std::string FileChecksums(const std::string& what, const std::string& dir,
                          const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) {
    try {
      text += what + " " + name +
              " sha256=" + io::Sha256OfFile(dir + "/" + name) + "\n";
    } catch (const io::ChecksumError& e) {
      throw std::invalid_argument(e.what());
    }
  }
  return text;
}

// The files the data set's loader reads (train/dataset.cc,
// train/idx_dataset.cc), by name in DataDir: IDX files (gzip'd where the .gz
// is there), per-rank .npy files for every rank, or the shared pair.
std::vector<std::string> DataFileNames(const TrainConfig& c, int world_size) {
  const std::string dir = DataDir(c);
  std::vector<std::string> names;
  std::error_code error;
  if (DatasetKind(c) == "fashion_mnist") {
    for (const char* base :
         {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
          "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
      const std::string gz = std::string(base) + ".gz";
      names.push_back(fs::exists(dir + "/" + gz, error) ? gz : base);
    }
  } else if (fs::exists(dir + "/data_rank0.npy", error)) {
    for (int r = 0; r < std::max(world_size, 1); ++r) {
      names.push_back("data_rank" + std::to_string(r) + ".npy");
      names.push_back("targets_rank" + std::to_string(r) + ".npy");
    }
  } else {
    names = {"data.npy", "targets.npy"};
  }
  return names;
}

}  // namespace

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
  // The files' bytes, not their paths: the same data moved elsewhere is the
  // same job, other data under the same name another.
  if (DatasetKind(c) != "synthetic") {
    text += FileChecksums("data", DataDir(c), DataFileNames(c, world_size));
  }
  if (!c.init_dir.empty()) {
    std::vector<std::string> tensors;
    const nn::MlpLayout layout = nn::MlpLayout::Parse(c.model);
    for (const nn::TensorSlot& t : layout.tensors()) {
      tensors.push_back(t.name + ".npy");
    }
    text += FileChecksums("init", c.init_dir, tensors);
  }
  return text;
}

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
namespace {

// From the data files' headers, the size every rank's data set shares.
int64_t DatasetSize(const TrainConfig& config, int world_size,
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
    if (shape.train_count == 0) {
      throw std::invalid_argument(DataDir(config) +
                                  ": the training images hold no samples");
    }
    return config.train_subset > 0
               ? std::min(config.train_subset, shape.train_count)
               : shape.train_count;
  }
  // A shared data.npy is one file for all ranks: its header is read once.
  const bool per_rank = fs::exists(config.data_dir + "/data_rank0.npy");
  int64_t size = -1;
  for (int rank = 0; rank < (per_rank ? std::max(world_size, 1) : 1); ++rank) {
    const int64_t rows = CheckNpyDataset(
        config.data_dir, rank, layout.in_features(), layout.num_classes());
    if (size >= 0 && rows != size) {
      throw std::invalid_argument(
          "--data_dir " + config.data_dir + ": rank " + std::to_string(rank) +
          "'s data set holds " + std::to_string(rows) + " samples, rank 0's " +
          std::to_string(size) + " (DistributedSampler needs one size)");
    }
    size = rows;
  }
  if (size > kMaxSamples) {
    throw std::invalid_argument("--data_dir " + config.data_dir + " holds " +
                                std::to_string(size) +
                                " samples, more than the 1e9 supported");
  }
  return size;
}

}  // namespace

namespace {

void CheckCheckpoint(const TrainConfig& config, int world_size,
                     const std::string& ours, bool every_part) {
  const std::string dir =
      ResumableCheckpointDir(config.out_dir + "/checkpoints");
  const std::optional<int64_t> latest = LatestCheckpoint(dir);
  if (!latest) throw std::invalid_argument("no checkpoint in " + dir);
  const std::string difference =
      FirstJobDifference(ReadJobDescription(dir), ours);
  if (!difference.empty()) {
    throw std::invalid_argument("the checkpoint in " + dir +
                                " is another job's (it has " + difference +
                                ")");
  }
  const nn::MlpLayout layout = nn::MlpLayout::Parse(config.model);
  // Every rank's part, as each rank will read it: a checkpoint missing one,
  // holding another rank's or another job's (job.txt edited to match this
  // run) is refused here, before any rank starts.
  for (int rank = 0; rank < world_size; ++rank) {
    if (every_part) ReadRankCheckpoint(dir, rank, layout, *latest, ours);
  }
}

}  // namespace

void CheckResumable(const TrainConfig& config, int world_size,
                    const std::string& job, bool every_part) {
  // Whatever is wrong with what is on disk (a file missing or damaged, a
  // symlink loop, a directory where a file should be) is the user's input:
  // one line, exit 2.
  try {
    CheckCheckpoint(config, world_size, job, every_part);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("--resume: ") + e.what());
  }
}

namespace {

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
  CheckRange("--train_subset", c.train_subset, 0, kMaxSamples);
  CheckRange("--checkpoint_every", c.checkpoint_every, 0, sync::kMaxSteps);
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

// torch.optim.SGD's own rules (nn::ValidateSgdOptions), each said by flag,
// and finite bounds: a momentum of 1 or more makes the buffer grow without
// limit, which torch accepts but no run wants.
void CheckOptimizer(const nn::SgdOptions& sgd) {
  if (!(sgd.lr >= 0.0f) || sgd.lr > 1e6f) {
    throw std::invalid_argument("--lr must be a number in [0, 1e6]");
  }
  if (!(sgd.momentum >= 0.0f) || sgd.momentum >= 1.0f) {
    throw std::invalid_argument("--momentum must be a number in [0, 1)");
  }
  if (!(sgd.weight_decay >= 0.0f) || sgd.weight_decay > 1e6f) {
    throw std::invalid_argument("--weight_decay must be a number in [0, 1e6]");
  }
  if (sgd.nesterov && sgd.momentum == 0.0f) {
    throw std::invalid_argument("--nesterov needs --momentum above 0");
  }
  nn::ValidateSgdOptions(sgd);
}

void CheckStraggler(const TrainConfig& c, int world_size) {
  if (c.straggler_rank < -1 || c.straggler_rank >= std::max(world_size, 1)) {
    throw std::invalid_argument(
        "--straggler_rank must be -1 or a rank of the job (0 to " +
        std::to_string(std::max(world_size, 1) - 1) + "), not " +
        std::to_string(c.straggler_rank));
  }
  if (!(c.straggler_factor >= 1.0) || c.straggler_factor > 100.0) {
    throw std::invalid_argument(
        "--straggler_factor must be a number in [1, 100]");
  }
  if (c.straggler_rank >= 0 && c.straggler_limit == StragglerLimit::kCpuQuota &&
      comm::BackendNamed(c.comm).launch == comm::RankLaunch::kThreads) {
    throw std::invalid_argument(
        "--straggler_limit=cpu_quota limits a process, and with --comm=" +
        c.comm + " every rank is a thread of this one");
  }
}

// The synchroniser exists and the options are its own, each in range: a
// config made in code is held to what the flags are.
void CheckSyncOptions(const TrainConfig& c) {
  std::map<std::string, std::string> given;
  for (const auto& [name, value] : c.sync_options.values()) {
    given[name] = c.sync_options.Text(name);
  }
  const sync::OptionValues options = sync::ParseSyncOptions(c.sync, given);
  sync::CheckSyncModel(c.sync, options,
                       SyncLayoutOf(nn::MlpLayout::Parse(c.model)));
}

void CheckDataFlags(const TrainConfig& c) {
  const std::string kind = DatasetKind(c);
  if (kind != "synthetic" && kind != "npy" && kind != "fashion_mnist") {
    throw std::invalid_argument("unknown --dataset=" + kind +
                                " (expected synthetic, npy or fashion_mnist)");
  }
  if (kind != "fashion_mnist" && c.train_subset != 0) {
    throw std::invalid_argument(
        "--train_subset is for --dataset=fashion_mnist");
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
}

// A file can be made in dir (io::WhyNotWritable), or `what` is refused.
void ProbeWritable(const std::string& dir, const std::string& what) {
  const std::string why = io::WhyNotWritable(dir);
  if (!why.empty()) {
    throw std::invalid_argument(what + " is not writable (" + why + ")");
  }
}

// Every path the run writes, probed: the trace is written atomically (a
// temporary beside it, renamed), so it is its directory that must take a file.
void ProbeOutputs(const TrainConfig& c) {
  if (!c.trace_path.empty()) {
    const fs::path parent = fs::path(c.trace_path).parent_path();
    std::error_code error;
    if (fs::is_directory(c.trace_path, error) ||
        (!parent.empty() && !fs::is_directory(parent, error))) {
      throw std::invalid_argument("--trace=" + c.trace_path +
                                  ": not a file in an existing directory");
    }
    ProbeWritable(parent.empty() ? "." : parent.string(),
                  "--trace=" + c.trace_path + ": its directory");
  }
  if (c.out_dir.empty()) return;
  io::MakeDirs(c.out_dir);
  ProbeWritable(c.out_dir, "--out_dir " + c.out_dir);
  for (const char* sub : {"/checkpoints", "/checkpoints.next"}) {
    std::error_code error;
    // Followed, it would let this run write and prune another's.
    if (fs::is_symlink(fs::symlink_status(c.out_dir + sub, error))) {
      throw std::invalid_argument(
          c.out_dir + sub +
          " is a symbolic link: checkpoints are never written or read "
          "through one");
    }
    if (fs::is_directory(c.out_dir + sub, error)) {
      ProbeWritable(c.out_dir + sub, c.out_dir + sub);
    }
  }
}
// --model's layout; its errors in the flag's terms, not the parser's.
nn::MlpLayout ParseModelFlag(const std::string& model) {
  try {
    return nn::MlpLayout::Parse(model);
  } catch (const std::invalid_argument& e) {
    const std::string why = e.what();
    const size_t colon = why.find(": ");
    throw std::invalid_argument(
        "--model=" + model + ": " +
        (colon == std::string::npos ? why : why.substr(colon + 2)));
  }
}

}  // namespace

void ValidateConfig(const TrainConfig& config, int world_size,
                    ValidationScope scope) {
  const nn::MlpLayout layout = ParseModelFlag(config.model);
  CheckBounds(config, world_size);
  CheckOptimizer(config.sgd);
  CheckStraggler(config, world_size);
  if ((config.checkpoint_every > 0 || config.resume) &&
      config.out_dir.empty()) {
    throw std::invalid_argument(
        "--checkpoint_every and --resume need --out_dir");
  }
  CheckSyncOptions(config);
  if (config.timeout.count() <= 0) {
    throw std::invalid_argument("--timeout must be positive");
  }
  const comm::BackendDescription& backend = comm::BackendNamed(config.comm);
  if (backend.memory == comm::MemoryKind::kDevice &&
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
  ProbeOutputs(config);
  // A rank reads its inputs once, in RunRank, which checks them there.
  if (scope == ValidationScope::kRank) return;
  if (config.straggler_rank >= 0 &&
      config.straggler_limit == StragglerLimit::kCpuQuota) {
    const std::string why =
        CpuQuota::Unavailable(1.0 / config.straggler_factor);
    if (!why.empty()) {
      throw std::invalid_argument("--straggler_limit=cpu_quota: " + why);
    }
  }
  const int64_t dataset_size = DatasetSize(config, world_size, layout);
  // Every rank of the launch runs on this machine; a GPU's memory is the
  // device's to refuse.
  if (config.device == nn::Device::kCpu) {
    if (const auto available = AvailableMemory()) {
      CheckMemoryFits(EstimateMemory(layout, config.batch_size, dataset_size),
                      world_size, *available);
    }
  }
  if (!config.init_dir.empty()) {
    try {
      nn::CheckParamsDir(config.init_dir, layout);
    } catch (const io::NpyError& e) {
      throw std::invalid_argument(e.what());
    }
  }
  if (config.resume) {
    CheckResumable(config, world_size,
                   JobDescription(config, world_size, dataset_size));
  }
}

}  // namespace ringlab::train
