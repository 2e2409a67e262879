// The training loop one rank runs: data, PyTorch-identical initialisation, the
// start-up agreement check and rank 0's broadcast (as DDP's constructor), the
// DistributedSampler's batches, forward/backward, the synchroniser, SGD,
// checkpoints, and rank 0's outputs (losses.csv, final/*.npy, config.json).
#ifndef RINGLAB_TRAIN_TRAINER_H_
#define RINGLAB_TRAIN_TRAINER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/store.h"
#include "nn/mlp.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"
#include "train/synchronizer.h"

namespace ringlab::train {

// Defaults reproduce the document's run (Net 10,5,2, SGD 0.01, 10 epochs, 100
// samples, batch 64, DistributedSampler defaults without set_epoch).
struct TrainConfig {
  std::string model = "10,5,2";
  std::string sync = "allreduce";
  std::string comm = "shm_ring";
  nn::Device device = nn::Device::kCpu;
  int64_t epochs = 10;
  float lr = 0.01f;
  int64_t batch_size = 64;
  int64_t samples = 100;
  uint64_t seed = 0;  // parameters and synthetic data (torch.manual_seed)
  uint64_t sampler_seed = 0;  // DistributedSampler(seed=...)
  bool shuffle = true;
  bool drop_last = false;
  bool set_epoch = false;      // the document never calls sampler.set_epoch
  bool per_rank_data = false;  // synthetic data drawn per rank (seed + rank)
  // "synthetic", "npy" (data_dir's .npy files) or "fashion_mnist" (IDX files
  // in data_dir, default kFashionMnistDir); empty: npy with a data_dir, else
  // synthetic.
  std::string dataset;
  std::string data_dir;
  // Epochs between test-set evaluations into eval.csv (0: none); only data
  // sets with a test split (fashion_mnist) have one.
  int64_t eval_every = 1;
  // Where to write the Chrome trace of every rank (empty: none).
  std::string trace_path;
  std::string init_dir;
  std::string out_dir;
  SyncOptions sync_options;
  int64_t checkpoint_every = 0;
  bool resume = false;
  bool quiet = false;
  // Testing: rank fault_rank kills itself with SIGKILL at fault_point of
  // this step, as a crashed process would stop: "after_step" (after the
  // step and its checkpoint), or inside the step's checkpoint:
  // "part_written" (its files on disk, not yet renamed into place),
  // "part_renamed" (its part in place, before the barrier), "before_latest"
  // (after the barrier) and "before_prune" (rank 0: latest moved, older
  // steps still there).
  int64_t fault_after_step = -1;
  int fault_rank = 0;
  std::string fault_point = "after_step";
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// Checks what can be checked before any rank starts (flags, each integer
// within bounds that keep all arithmetic on it exact, the data files of
// every rank in [0, world_size) or, with data_rank >= 0, of that rank only,
// --out_dir writable, the checkpoint to resume); throws std::invalid_argument
// with a message fit for "error: ...".
void ValidateConfig(const TrainConfig& config, int world_size,
                    int data_rank = -1);

struct TrainResult {
  std::vector<float> final_params;      // this rank's, on the host
  std::vector<StepRecord> history;      // this rank's
  std::vector<EvalRecord> evaluations;  // rank 0's, of this run's epochs
  std::string trace_events;             // this rank's, with --trace
};

// Runs one rank to the end. Rank 0 writes the outputs when out_dir is set.
// Throws std::invalid_argument for bad input (files, disagreeing ranks) and
// comm::CommError / std::runtime_error for failures.
TrainResult RunRank(const TrainConfig& config, comm::Communicator& comm,
                    comm::Store* store);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_TRAINER_H_
