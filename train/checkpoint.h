// Checkpoints that make a killed run resumable bit for bit: each rank writes
// its parameters (one .npy per state_dict tensor), its per-step history and
// the step it reached into <dir>/step_<N>/rank<r>/, atomically (a temporary
// directory renamed into place); once every rank has written, rank 0 points
// <dir>/latest at the new step. A crash mid-write leaves the previous
// checkpoint intact.
#ifndef RINGLAB_TRAIN_CHECKPOINT_H_
#define RINGLAB_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nn/mlp.h"

namespace ringlab::train {

// One training step of one rank, as losses.csv reports it.
struct StepRecord {
  int64_t epoch = 0;
  int64_t step = 0;
  float loss = 0;
  double step_ms = 0;
  double comm_ms = 0;
  uint64_t bytes_sent = 0;
};

struct RankCheckpoint {
  int64_t next_step = 0;  // steps already taken
  std::vector<float> params;
  std::vector<StepRecord> history;
};

// Writes this rank's part of the checkpoint taken after next_step steps.
void WriteRankCheckpoint(const std::string& dir, int rank,
                         const nn::MlpLayout& layout,
                         const RankCheckpoint& checkpoint);
// Rank 0, after every rank has written: atomically marks step as the latest,
// then removes the older checkpoints and what crashed writers left behind.
void MarkLatestCheckpoint(const std::string& dir, int64_t next_step);
// What job the checkpoints belong to ("name=value" lines), so that --resume
// refuses another job's; empty when there is none.
void WriteJobDescription(const std::string& dir, const std::string& text);
std::string ReadJobDescription(const std::string& dir);
// The latest checkpoint's step, or nothing when there is none.
std::optional<int64_t> LatestCheckpoint(const std::string& dir);
// Reads this rank's part; throws std::invalid_argument naming what is wrong.
RankCheckpoint ReadRankCheckpoint(const std::string& dir, int rank,
                                  const nn::MlpLayout& layout,
                                  int64_t next_step);

// Filesystem helpers shared by the trainer's outputs.
void MakeDirs(const std::string& path);  // mkdir -p; throws on failure
std::string StepRecordsToCsv(const std::vector<StepRecord>& records, int rank,
                             bool header);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_CHECKPOINT_H_
