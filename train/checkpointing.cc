#include "train/checkpointing.h"

#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "train/job_checks.h"

namespace ringlab::train {

namespace fs = std::filesystem;

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
void TakeCheckpoint(const TrainConfig& config, const FaultInjection& faults,
                    const nn::MlpLayout& layout, const nn::Mlp& model,
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
                      [&] { MaybeFault(faults, rank, step, "part_written"); });
  MaybeFault(faults, rank, step, "part_renamed");
  comm.Barrier();  // every rank's part is on disk
  MaybeFault(faults, rank, step, "before_latest");
  if (rank != 0) return;
  MarkLatestCheckpoint(dir, step + 1);
  MaybeFault(faults, rank, step, "before_prune");
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

}  // namespace ringlab::train
