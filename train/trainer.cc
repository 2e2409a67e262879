#include "train/trainer.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

#include "nn/atomic_file.h"
#include "nn/init.h"
#include "nn/npy.h"
#include "nn/torch_rng.h"
#include "train/dataset.h"
#include "train/distributed_sampler.h"
#include "train/rank_exchange.h"

namespace ringlab::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Settings = std::vector<std::pair<std::string, std::string>>;

// Bounds that keep step counts and buffers far from overflow.
constexpr int64_t kMaxEpochs = 1'000'000'000;
constexpr int64_t kMaxSamples = 1'000'000'000;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

std::string FloatText(float value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
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
                     RankExchange& exchange) {
  const Settings settings = SharedSettings(config, dataset_size);
  const auto all = exchange.AllGather(SerializeSettings(settings));
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

Dataset LoadOrMakeDataset(const TrainConfig& config,
                          const nn::MlpLayout& layout, int rank,
                          nn::TorchGenerator& generator) {
  if (!config.data_dir.empty()) {
    return LoadDataset(config.data_dir, rank, layout.in_features(),
                       layout.num_classes());
  }
  return MakeSyntheticDataset(config.samples, layout.in_features(),
                              layout.num_classes(), generator);
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

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

std::string ConfigJson(const TrainConfig& c, int world_size,
                       const std::string& data_source) {
  auto boolean = [](bool value) { return value ? "true" : "false"; };
  std::string json = "{\n";
  json += "  \"model\": " + Quote(c.model) + ",\n";
  json += "  \"sync\": " + Quote(c.sync) + ",\n";
  json += "  \"comm\": " + Quote(c.comm) + ",\n";
  json += "  \"device\": " + Quote(nn::DeviceName(c.device)) + ",\n";
  json += "  \"world_size\": " + std::to_string(world_size) + ",\n";
  json += "  \"epochs\": " + std::to_string(c.epochs) + ",\n";
  json += "  \"lr\": " + FloatText(c.lr) + ",\n";
  json += "  \"batch_size\": " + std::to_string(c.batch_size) + ",\n";
  json += "  \"samples\": " + std::to_string(c.samples) + ",\n";
  json += "  \"seed\": " + std::to_string(c.seed) + ",\n";
  json += "  \"sampler_seed\": " + std::to_string(c.sampler_seed) + ",\n";
  json += "  \"shuffle\": " + std::string(boolean(c.shuffle)) + ",\n";
  json += "  \"drop_last\": " + std::string(boolean(c.drop_last)) + ",\n";
  json += "  \"set_epoch\": " + std::string(boolean(c.set_epoch)) + ",\n";
  json +=
      "  \"per_rank_data\": " + std::string(boolean(c.per_rank_data)) + ",\n";
  json +=
      "  \"avg_period\": " + std::to_string(c.sync_options.avg_period) + ",\n";
  json +=
      "  \"avg_warmup\": " + std::to_string(c.sync_options.avg_warmup) + ",\n";
  json += "  \"data\": " + Quote(data_source) + ",\n";
  json += "  \"init_dir\": " + Quote(c.init_dir) + ",\n";
  json +=
      "  \"checkpoint_every\": " + std::to_string(c.checkpoint_every) + ",\n";
  json += "  \"resume\": " + std::string(boolean(c.resume)) + ",\n";
  json += "  \"timeout_ms\": " + std::to_string(c.timeout.count()) + "\n";
  return json + "}\n";
}

// final/ is written whole into a temporary directory and swapped in, so it
// never mixes two runs' tensors (nor keeps a deeper model's fc3.*).
void ReplaceFinalParams(const std::string& out_dir, const nn::MlpLayout& layout,
                        const std::vector<float>& params) {
  const std::string final_dir = out_dir + "/final";
  const std::string fresh = final_dir + ".tmp-new";
  const std::string old = final_dir + ".tmp-old";
  std::error_code error;
  fs::remove_all(fresh, error);
  fs::remove_all(old, error);
  MakeDirs(fresh);
  nn::SaveParams(fresh, layout, params.data());
  if (fs::exists(final_dir)) fs::rename(final_dir, old, error);
  fs::rename(fresh, final_dir, error);
  if (error) {
    throw std::runtime_error("cannot write " + final_dir + ": " +
                             error.message());
  }
  fs::remove_all(old, error);
}

std::string RecordsToBytes(const std::vector<StepRecord>& records) {
  if (records.empty()) return "";
  return std::string(reinterpret_cast<const char*>(records.data()),
                     records.size() * sizeof(StepRecord));
}

std::vector<StepRecord> RecordsFromBytes(const std::string& bytes) {
  std::vector<StepRecord> records(bytes.size() / sizeof(StepRecord));
  if (records.empty()) return records;
  std::memcpy(records.data(), bytes.data(),
              records.size() * sizeof(StepRecord));
  return records;
}

std::string Fnv1a(const void* data, size_t size) {
  uint64_t hash = 1469598103934665603ull;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return std::string(reinterpret_cast<const char*>(&hash), sizeof(hash));
}

// Loads (so checks) every rank's data set, or only data_rank's when it is
// not negative, and returns the size they share.
int64_t DatasetSize(const TrainConfig& config, int world_size, int data_rank,
                    const nn::MlpLayout& layout) {
  if (config.data_dir.empty()) return config.samples;
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
  for (int rank = 0; rank < world_size; ++rank) {
    ReadRankCheckpoint(dir, rank, layout, *latest);
  }
}

}  // namespace

void ValidateConfig(const TrainConfig& config, int world_size, int data_rank) {
  const nn::MlpLayout layout = nn::MlpLayout::Parse(config.model);
  if (config.epochs < 0 || config.epochs > kMaxEpochs) {
    throw std::invalid_argument("--epochs must be in [0, 1e9]");
  }
  if (!(config.lr >= 0.0f) || config.lr > 1e6f) {
    throw std::invalid_argument("--lr must be a number in [0, 1e6]");
  }
  if (config.batch_size < 1) {
    throw std::invalid_argument("--batch_size must be at least 1");
  }
  if (config.data_dir.empty() &&
      (config.samples < 1 || config.samples > kMaxSamples)) {
    throw std::invalid_argument("--samples must be in [1, 1e9]");
  }
  if (config.checkpoint_every < 0) {
    throw std::invalid_argument("--checkpoint_every must be >= 0");
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
  const Dataset data = LoadOrMakeDataset(config, layout, rank, generator);

  const std::string checkpoint_dir = config.out_dir + "/checkpoints";
  if (rank == 0 && !config.out_dir.empty() && !config.resume) {
    // A fresh run: older checkpoints must not be resumed into it. Done before
    // the agreement check, a collective no rank passes before rank 0.
    std::error_code error;
    fs::remove_all(checkpoint_dir, error);
    if (config.checkpoint_every > 0) {
      WriteJobDescription(checkpoint_dir,
                          JobDescription(config, world_size, data.size));
    }
  }
  RankExchange exchange(comm, store, config.timeout);
  CheckRanksAgree(config, data.size, exchange);

  std::unique_ptr<nn::Mlp> model = nn::CreateMlp(config.device, layout);
  auto synchronizer =
      CreateSynchronizer(config.sync, comm, config.sync_options);

  TrainResult result;
  int64_t first_step = 0;
  std::optional<int64_t> latest;
  if (config.resume) latest = LatestCheckpoint(checkpoint_dir);
  if (latest) {
    RankCheckpoint checkpoint =
        ReadRankCheckpoint(checkpoint_dir, rank, layout, *latest);
    model->SetParams(checkpoint.params.data());
    result.history = std::move(checkpoint.history);
    first_step = *latest;
  } else {
    model->SetParams(params.data());
    BroadcastParams(comm, *model, /*root=*/0);  // DDP's constructor
  }

  const DistributedSampler sampler(
      data.size, world_size, rank,
      {config.shuffle, config.sampler_seed, config.drop_last});
  const int64_t samples = sampler.num_samples();
  const int64_t steps_per_epoch =
      (samples + config.batch_size - 1) / config.batch_size;
  const int64_t total_steps = steps_per_epoch * config.epochs;
  if (rank == 0 && !config.quiet) {
    std::printf(
        "ringlab train: model %s, %d rank(s), --sync=%s --comm=%s "
        "--device=%s, %lld samples/rank, %lld step(s)/epoch%s\n",
        layout.ToString().c_str(), world_size, config.sync.c_str(),
        comm.backend(), nn::DeviceName(config.device),
        static_cast<long long>(samples),
        static_cast<long long>(steps_per_epoch),
        latest ? (", resumed after step " + std::to_string(*latest)).c_str()
               : "");
    std::fflush(stdout);
  }

  const nn::SgdOptions sgd{config.lr};
  std::vector<float> batch_x;
  std::vector<int64_t> batch_y;
  std::vector<int64_t> indices;
  int64_t indices_epoch = -1;
  for (int64_t step = first_step; step < total_steps; ++step) {
    const int64_t epoch = step / steps_per_epoch;
    const int64_t batch = step % steps_per_epoch;
    const int64_t sampler_epoch = config.set_epoch ? epoch : 0;
    if (sampler_epoch != indices_epoch) {
      indices = sampler.Indices(sampler_epoch);
      indices_epoch = sampler_epoch;
    }
    const size_t begin = batch * config.batch_size;
    const size_t end = std::min<size_t>(begin + config.batch_size, samples);
    data.Gather(indices, begin, end, &batch_x, &batch_y);

    const uint64_t bytes_before = comm.bytes_sent();
    const auto start = Clock::now();
    const float loss = model->ForwardBackward(batch_x.data(), batch_y.data(),
                                              static_cast<int>(end - begin));
    const auto sync_start = Clock::now();
    synchronizer->AfterBackward(*model);
    double comm_ms = MillisecondsSince(sync_start);
    model->SgdStep(sgd);
    const auto average_start = Clock::now();
    synchronizer->AfterStep(*model, step);
    comm_ms += MillisecondsSince(average_start);
    const double step_ms = MillisecondsSince(start);
    result.history.push_back({epoch, step, loss, step_ms, comm_ms,
                              comm.bytes_sent() - bytes_before});

    if (config.checkpoint_every > 0 &&
        (step + 1) % config.checkpoint_every == 0 && step + 1 < total_steps) {
      RankCheckpoint checkpoint;
      checkpoint.next_step = step + 1;
      checkpoint.params.resize(layout.num_params());
      model->GetParams(checkpoint.params.data());
      checkpoint.history = result.history;
      WriteRankCheckpoint(checkpoint_dir, rank, layout, checkpoint);
      comm.Barrier();  // every rank's part is on disk
      if (rank == 0) MarkLatestCheckpoint(checkpoint_dir, step + 1);
    }
    if (step == config.fault_after_step && rank == config.fault_rank) {
      std::fflush(nullptr);
      raise(SIGKILL);
    }
    if (rank == 0 && !config.quiet && batch == steps_per_epoch - 1) {
      std::printf(
          "epoch %lld/%lld: loss %.6f (rank 0, its last batch), %.3f ms/step, "
          "%.3f ms of it synchronising\n",
          static_cast<long long>(epoch + 1),
          static_cast<long long>(config.epochs), loss, step_ms, comm_ms);
      std::fflush(stdout);
    }
  }

  result.final_params.resize(layout.num_params());
  model->GetParams(result.final_params.data());

  const auto all_records = exchange.AllGather(RecordsToBytes(result.history));
  // Whether every rank ends with rank 0's parameters, bit for bit.
  const auto all_hashes = exchange.AllGather(Fnv1a(
      result.final_params.data(), result.final_params.size() * sizeof(float)));
  const bool ranks_equal =
      std::all_of(all_hashes.begin(), all_hashes.end(),
                  [&](const std::string& h) { return h == all_hashes[0]; });
  if (rank == 0 && !config.out_dir.empty()) {
    std::string csv = StepRecordsToCsv({}, 0, /*header=*/true);
    for (int r = 0; r < world_size; ++r) {
      csv += StepRecordsToCsv(RecordsFromBytes(all_records[r]), r, false);
    }
    ReplaceFinalParams(config.out_dir, layout, result.final_params);
    nn::WriteFileAtomically(config.out_dir + "/losses.csv", csv);
    nn::WriteFileAtomically(config.out_dir + "/config.json",
                            ConfigJson(config, world_size, data.source));
    nn::WriteFileAtomically(
        config.out_dir + "/summary.json",
        std::string("{\n  \"ranks_bitwise_equal\": ") +
            (ranks_equal ? "true" : "false") + ",\n  \"world_size\": " +
            std::to_string(world_size) + ",\n  \"steps_per_rank\": " +
            std::to_string(result.history.size()) + "\n}\n");
  }
  comm.Barrier();  // nobody exits before rank 0 has written
  return result;
}

}  // namespace ringlab::train
