// When and how the trainer checkpoints (on top of checkpoint.h's files): rank
// 0 prepares the directory before the ranks agree, every rank writes its part
// and meets the others at a barrier before rank 0 moves latest, and a resumed
// run starts from the latest complete checkpoint instead of rank 0's
// broadcast initial parameters.
#ifndef RINGLAB_TRAIN_CHECKPOINTING_H_
#define RINGLAB_TRAIN_CHECKPOINTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "nn/mlp.h"
#include "train/checkpoint.h"
#include "train/fault_injection.h"
#include "train/train_config.h"

namespace ringlab::train {

// Rank 0, while no other rank touches the checkpoints: a fresh run
// describes its job (`job`, JobDescription) in the staging directory and leaves
// the previous run's checkpoints in place until its own first one is complete
// (saying so on stdout unless quiet); a resumed one first promotes what a crash
// left staged, then removes what it left beyond the latest.
void PrepareCheckpoints(const TrainConfig& config, const std::string& job);

// Collective: every rank's part of the checkpoint after `step` (bound to its
// rank and to `job`) goes to disk, then rank 0 moves latest to it, then removes
// the steps before it. *staged (true for a fresh run until its first
// checkpoint) says the checkpoint goes to the staging directory, which then
// takes the previous checkpoints' place before any rank goes on; it is false
// afterwards.
void TakeCheckpoint(const TrainConfig& config, const FaultInjection& faults,
                    const nn::MlpLayout& layout, const nn::Mlp& model,
                    const std::vector<sync::SyncTensor>& sync_state,
                    const std::vector<StepRecord>& history,
                    const std::string& job, int64_t step,
                    comm::Communicator& comm, bool* staged);

// Where training starts: the latest checkpoint's parameters, synchroniser
// state (read into sync_state's vectors) and history when resuming (a part
// of another rank or job is refused), else
// `params`, rank 0's broadcast to all (as DDP's constructor does). Returns
// the first step to take.
int64_t StartingPoint(const TrainConfig& config, const nn::MlpLayout& layout,
                      const std::vector<float>& params, const std::string& job,
                      comm::Communicator& comm, nn::Mlp& model,
                      const std::vector<sync::SyncTensor>& sync_state,
                      std::vector<StepRecord>* history);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_CHECKPOINTING_H_
