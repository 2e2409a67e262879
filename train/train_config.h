// What one training job is: the model, the synchroniser and communicator,
// the device, the data, the optimiser, the schedule, where outputs go. The
// CLI fills it from flags; job_checks.h validates it once before any rank
// starts (and each rank against its own inputs); every rank runs it
// (trainer.h).
#ifndef RINGLAB_TRAIN_TRAIN_CONFIG_H_
#define RINGLAB_TRAIN_TRAIN_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "nn/mlp.h"
#include "sync/options.h"
#include "sync/synchronizer.h"

namespace ringlab::train {

// How a straggler is slowed (TrainConfig::straggler_limit).
enum class StragglerLimit { kSleep, kCpuQuota };

// The limit's flag text, as config.json and a job's description write it.
inline const char* StragglerLimitName(StragglerLimit limit) {
  switch (limit) {  // no default: -Wswitch names a limit without its text
    case StragglerLimit::kSleep:
      return "sleep";
    case StragglerLimit::kCpuQuota:
      return "cpu_quota";
  }
  return "?";
}

// The limit whose flag text is `text`; std::invalid_argument for any other.
inline StragglerLimit ParseStragglerLimit(const std::string& text) {
  for (const StragglerLimit limit :
       {StragglerLimit::kSleep, StragglerLimit::kCpuQuota}) {
    if (text == StragglerLimitName(limit)) return limit;
  }
  throw std::invalid_argument(
      "--straggler_limit must be sleep or cpu_quota, not '" + text + "'");
}

// Defaults reproduce the seed example's run (Net 10,5,2, SGD 0.01, 10 epochs,
// 100 samples, batch 64, DistributedSampler defaults without set_epoch).
struct TrainConfig {
  std::string model = "10,5,2";
  std::string sync = "allreduce";
  // Every option of the synchroniser `sync` (sync/synchronizer.h).
  sync::OptionValues sync_options = sync::ParseSyncOptions(sync, {});
  std::string comm = "shm_ring";
  nn::Device device = nn::Device::kCpu;
  // With kCuda, the GPU every rank of this process uses (--device=cuda:N); -1:
  // LOCAL_RANK modulo the machine's GPUs (rank_device.h).
  int cuda_device = -1;
  int64_t epochs = 10;
  // A straggler: rank straggler_rank computes straggler_factor times as
  // long, so that every synchroniser meets the same slow rank; -1: none.
  // straggler_limit kSleep: its forward and backward wait the difference
  // after them, whatever the machine's load; kCpuQuota: a cgroup allows the
  // whole process 1 / straggler_factor of a CPU (cpu_quota.h), a slower
  // machine.
  int straggler_rank = -1;
  double straggler_factor = 1.0;
  StragglerLimit straggler_limit = StragglerLimit::kSleep;
  // torch.optim.SGD's settings (dampening stays 0): lr 0.01 without
  // momentum, as the seed example's.
  nn::SgdOptions sgd;
  int64_t batch_size = 64;
  int64_t samples = 100;
  uint64_t seed = 0;  // parameters and synthetic data (torch.manual_seed)
  uint64_t sampler_seed = 0;  // DistributedSampler(seed=...)
  bool shuffle = true;
  bool drop_last = false;
  bool set_epoch = false;      // the seed example never calls sampler.set_epoch
  bool per_rank_data = false;  // synthetic data drawn per rank (seed + rank)
  // "synthetic", "npy" (data_dir's .npy files) or "fashion_mnist" (IDX files
  // in data_dir, default kFashionMnistDir); empty: npy with a data_dir, else
  // synthetic.
  std::string dataset;
  std::string data_dir;
  // fashion_mnist: the first train_subset training images only (0: all).
  int64_t train_subset = 0;
  // Epochs between test-set evaluations into eval.csv (0: none); only data
  // sets with a test split (fashion_mnist) have one.
  int64_t eval_every = 1;
  // Where to write the Chrome trace of every rank (empty: none).
  std::string trace_path;
  std::string init_dir;
  std::string out_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  bool quiet = false;
  // The emulated host this rank runs on (comm/cluster, set by the CLI from
  // its launcher's word), -1 for none: then its eth0 is the host's link,
  // whose traffic summary.json reports.
  int emulated_host = -1;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};

  // The synchroniser `name` with these options (flag-style texts), the
  // others at their defaults; std::invalid_argument as the flags'.
  void UseSync(const std::string& name,
               const std::map<std::string, std::string>& options = {}) {
    sync_options = sync::ParseSyncOptions(name, options);
    sync = name;
  }
};

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_TRAIN_CONFIG_H_
