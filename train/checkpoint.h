// Checkpoints that make a killed run resumable bit for bit, taken
// collectively: each rank writes its part (its parameters, one .npy per
// state_dict tensor, its synchroniser's state, one sync.<name>.npy per
// tensor, with SGD's momentum buffers as sync.sgd_momentum_buffer.npy when
// the run has momentum, its per-step history, the step it reached, its rank and
// its job's description, so that a part is resumed only by its own rank of its
// own job) into <dir>/step_<N>/rank<r>/ through a temporary directory renamed
// into place, with the SHA-256 of every file (SHA256SUMS, io/checksums.h,
// checked when it is read back), every file and directory fsynced before the
// rename; once every rank's part is on disk (the trainer's barrier), rank 0
// moves <dir>/latest to N, fsynced, and only then removes the steps before N. A
// rank writes step N's part only after the barrier of the checkpoint before it,
// so while latest is N no rank is still writing or reading a step before N, and
// pruning never touches one that any rank may use. A crash at any point leaves
// latest at a complete checkpoint; a resumed run first removes what the crash
// left beyond it.
#ifndef RINGLAB_TRAIN_CHECKPOINT_H_
#define RINGLAB_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nn/mlp.h"
#include "sync/sync_tensor.h"
#include "train/step_record.h"

namespace ringlab::train {

struct RankCheckpoint {
  int64_t next_step = 0;  // steps already taken
  std::vector<float> params;
  // The synchroniser's tensors (Synchronizer::state()): written from, and
  // read back into, the vectors they point to.
  std::vector<sync::SyncTensor> sync_state;
  std::vector<StepRecord> history;
  // The job's description (train/job_checks.h JobDescription): a part is
  // read back only into the job that wrote it.
  std::string job;
};

// Writes this rank's part of the checkpoint taken after next_step steps,
// durably (fsynced). before_rename, when set, runs once the files are on
// disk and before they are renamed into place (tests kill the rank there).
void WriteRankCheckpoint(const std::string& dir, int rank,
                         const nn::MlpLayout& layout,
                         const RankCheckpoint& checkpoint,
                         const std::function<void()>& before_rename = {});
// Rank 0, once every rank's part of next_step is on disk: atomically and
// durably marks it as the latest.
void MarkLatestCheckpoint(const std::string& dir, int64_t next_step);
// Rank 0, after MarkLatestCheckpoint(dir, next_step): removes the steps
// before it (no rank can still be writing or reading them) and what rank 0's
// own crashed writes left at the top. Steps after it are being written.
void PruneCheckpointsBefore(const std::string& dir, int64_t next_step);
// Rank 0 of a resumed run, before any rank writes: removes the steps after
// the latest (parts of a checkpoint that never completed) and temporaries a
// crash left, so that nothing half-written can later be taken for whole.
void RemoveUnfinishedCheckpoints(const std::string& dir, int64_t latest);
// What job the checkpoints belong to ("name=value" lines), so that --resume
// refuses another job's; empty when there is none.
void WriteJobDescription(const std::string& dir, const std::string& text);
std::string ReadJobDescription(const std::string& dir);
// The latest checkpoint's step, or nothing when there is none. Throws
// std::invalid_argument for a latest file that holds anything but a step
// number and a newline.
std::optional<int64_t> LatestCheckpoint(const std::string& dir);

// Where a fresh run's checkpoints go until its first is complete.
std::string StagingDir(const std::string& dir);
// Rank 0: <dir>.next, holding a complete checkpoint, takes <dir>'s place
// (the old one is removed), durably; also finishes a promotion a crash
// interrupted. Does nothing when <dir>.next holds no complete checkpoint.
void PromoteStagedCheckpoints(const std::string& dir);
// The directory a --resume reads: <dir>.next where a crash left it holding a
// complete checkpoint (it is promoted before the ranks read it), else <dir>.
std::string ResumableCheckpointDir(const std::string& dir);
// Reads this rank's part, the synchroniser's tensors into sync_state's
// vectors (each of the size it has); throws std::invalid_argument naming what
// is wrong (a missing part: "the checkpoint of step N in <dir> is incomplete:
// rank R's part ... is missing"; a part or step directory that is a symbolic
// link; another rank's part; a part whose job description differs from
// `job`, naming the first line that differs; a tensor of another size).
RankCheckpoint ReadRankCheckpoint(
    const std::string& dir, int rank, const nn::MlpLayout& layout,
    int64_t next_step, const std::string& job,
    const std::vector<sync::SyncTensor>& sync_state = {});

// The first line where two job descriptions differ, as "<theirs>, this run
// <ours>" ("nothing" for a missing line); empty when they are the same.
std::string FirstJobDifference(const std::string& theirs,
                               const std::string& ours);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_CHECKPOINT_H_
