#include "train/checkpointing.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sync/synchronizer.h"
#include "train/job_checks.h"
#include "train/mlp_buffers.h"

namespace ringlab::train {

namespace fs = std::filesystem;

// Rank 0, while no other rank touches the checkpoints: a fresh run removes
// older ones (they must not be resumed into it) and describes its job; a
// resumed one removes what a crash left beyond the latest.
void PrepareCheckpoints(const TrainConfig& config, const std::string& job) {
  const std::string dir = config.out_dir + "/checkpoints";
  // A run that crashed after its first checkpoint, before promoting it: its
  // checkpoints are the newest (and what --resume resumed from).
  PromoteStagedCheckpoints(dir);
  std::error_code error;
  fs::remove_all(StagingDir(dir), error);  // a staging nothing completed
  if (config.resume) {
    if (const auto latest = LatestCheckpoint(dir)) {
      RemoveUnfinishedCheckpoints(dir, *latest);
    }
    return;
  }
  if (const auto previous = LatestCheckpoint(dir); previous && !config.quiet) {
    std::printf(
        "ringlab train: the previous run's checkpoint (step %lld) stays in "
        "%s %s\n",
        static_cast<long long>(*previous), dir.c_str(),
        config.checkpoint_every > 0
            ? "until this run's first checkpoint is complete"
            : "(this run takes none)");
    std::fflush(stdout);
  }
  if (config.checkpoint_every > 0) {
    WriteJobDescription(StagingDir(dir), job);
  }
}

namespace {

// The optimiser's momentum buffers, when the run has momentum, travel as one
// more state tensor (sync.sgd_momentum_buffer.npy) beside the synchroniser's:
// the state a resumed run reads is the same list the checkpoint wrote.
std::vector<sync::SyncTensor> StateWithMomentum(
    const TrainConfig& config, const std::vector<sync::SyncTensor>& sync_state,
    size_t num_params, std::vector<float>* momentum) {
  std::vector<sync::SyncTensor> state = sync_state;
  if (config.sgd.momentum != 0.0f) {
    momentum->assign(num_params, 0.0f);
    state.push_back({"sgd_momentum_buffer", momentum});
  }
  return state;
}

}  // namespace

// Collective: every rank's part of the checkpoint after `step` goes to disk,
// then rank 0 moves latest to it, then removes the steps before it.
void TakeCheckpoint(const TrainConfig& config, const FaultInjection& faults,
                    const nn::MlpLayout& layout, const nn::Mlp& model,
                    const std::vector<sync::SyncTensor>& sync_state,
                    const std::vector<StepRecord>& history,
                    const std::string& job, int64_t step,
                    comm::Communicator& comm, bool* staged) {
  const std::string main = config.out_dir + "/checkpoints";
  const std::string dir = *staged ? StagingDir(main) : main;
  const int rank = comm.rank();
  RankCheckpoint checkpoint;
  checkpoint.next_step = step + 1;
  checkpoint.params.resize(layout.num_params());
  model.GetParams(checkpoint.params.data());
  std::vector<float> momentum;
  checkpoint.sync_state =
      StateWithMomentum(config, sync_state, layout.num_params(), &momentum);
  // Every step before a checkpoint took an SGD step, which made the buffers.
  if (!momentum.empty() && !model.GetMomentum(momentum.data())) {
    throw std::logic_error(
        "a checkpoint of a run with momentum before any step");
  }
  checkpoint.history = history;
  checkpoint.job = job;
  WriteRankCheckpoint(dir, rank, layout, checkpoint,
                      [&] { MaybeFault(faults, rank, step, "part_written"); });
  MaybeFault(faults, rank, step, "part_renamed");
  comm.Barrier();  // every rank's part is on disk
  MaybeFault(faults, rank, step, "before_latest");
  if (rank == 0) {
    MarkLatestCheckpoint(dir, step + 1);
    MaybeFault(faults, rank, step, "before_prune");
    PruneCheckpointsBefore(dir, step + 1);
    if (*staged) {
      MaybeFault(faults, rank, step, "before_promote");
      PromoteStagedCheckpoints(main);
    }
  }
  // No rank writes the next checkpoint's part before the staging directory
  // has taken its place.
  if (*staged) comm.Barrier();
  *staged = false;
}

// Where training starts: the latest checkpoint's parameters and history
// when resuming, else rank 0's initial parameters (DDP's constructor
// broadcasts them). Returns the first step to take.
int64_t StartingPoint(const TrainConfig& config, const nn::MlpLayout& layout,
                      const std::vector<float>& params, const std::string& job,
                      comm::Communicator& comm, nn::Mlp& model,
                      const std::vector<sync::SyncTensor>& sync_state,
                      std::vector<StepRecord>* history) {
  const std::string dir = config.out_dir + "/checkpoints";
  const std::optional<int64_t> latest =
      config.resume ? LatestCheckpoint(dir) : std::nullopt;
  if (!latest) {
    model.SetParams(params.data());
    MlpBuffers buffers(model);
    sync::BroadcastParams(comm, buffers, /*root=*/0);
    return 0;
  }
  std::vector<float> momentum;
  RankCheckpoint checkpoint = ReadRankCheckpoint(
      dir, comm.rank(), layout, *latest, job,
      StateWithMomentum(config, sync_state, layout.num_params(), &momentum));
  model.SetParams(checkpoint.params.data());
  if (!momentum.empty()) model.SetMomentum(momentum.data());
  *history = std::move(checkpoint.history);
  return *latest;
}

}  // namespace ringlab::train
