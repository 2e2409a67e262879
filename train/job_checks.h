// Validating a job once, at the edge: what the launcher checks before any
// rank starts (every setting within bounds that keep all arithmetic on it
// exact, the data files, --out_dir writable, the checkpoint to resume), what
// every rank checks of the others at start-up (that all run the same job, as
// DDP's constructor checks the model), and the job's description that a
// checkpoint must match to be resumed.
#ifndef RINGLAB_TRAIN_JOB_CHECKS_H_
#define RINGLAB_TRAIN_JOB_CHECKS_H_

#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "train/train_config.h"

namespace ringlab::train {

enum class ValidationScope {
  // Before any rank starts: also the inputs, from their headers only (every
  // rank's data files, the init dir's tensors) and the checkpoint to resume.
  kLaunch,
  // A rank starting (under any launcher): the settings and --out_dir; the
  // rank checks its inputs as it reads them, once (RunRank).
  kRank,
};

// Checks the settings (each integer within bounds that keep all arithmetic on
// it exact), --out_dir writable and, at launch, the inputs. Throws
// std::invalid_argument with a message fit for "error: ...".
void ValidateConfig(const TrainConfig& config, int world_size,
                    ValidationScope scope = ValidationScope::kLaunch);

// --resume: the latest checkpoint must be this job's (`job`, its
// JobDescription) and, with every_part, hold every rank's part, each this
// job's and its rank's (a rank reads its own as it resumes).
void CheckResumable(const TrainConfig& config, int world_size,
                    const std::string& job, bool every_part = true);

// Collective, like DDP's constructor: every rank checks that all run the same
// job on data sets of the same size, and all fail together, with the same
// message (std::invalid_argument), when one does not.
void CheckRanksAgree(const TrainConfig& config, int64_t dataset_size,
                     comm::Communicator& comm);

// What a checkpoint must have been written by to be resumed: the shared
// settings except --resume, --epochs and --checkpoint_every (a resumed run
// may train longer, checkpointing differently), plus what decides each
// rank's numbers ("name=value" lines), and the SHA-256 of each data and
// initial-parameter file the run reads.
std::string JobDescription(const TrainConfig& c, int world_size,
                           int64_t dataset_size);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_JOB_CHECKS_H_
