// What a finished run leaves in --out_dir: losses.csv (every rank's steps),
// final/ (rank 0's parameters, a state_dict's .npy files, as DDP users save
// them), final_rank<r>/ (each other rank's, when the ranks ended with
// different parameters: --sync=none, or param_avg between averages),
// config.json and summary.json. Every file goes through a temporary renamed
// into place.
#ifndef RINGLAB_TRAIN_OUTPUTS_H_
#define RINGLAB_TRAIN_OUTPUTS_H_

#include <string>

#include "comm/communicator.h"
#include "nn/mlp.h"
#include "train/trainer.h"

namespace ringlab::train {

// "%.9g": the shortest text that reads back as the same float.
std::string FloatText(float value);

// Collective, at the end of RunRank: every rank's records and parameters'
// hash go to rank 0, which writes losses.csv, final/, config.json and
// summary.json; when the ranks' parameters differ, each other rank writes
// its own final_rank<r>/. Ends with every rank's files written.
void WriteRunOutputs(const TrainConfig& config, const nn::MlpLayout& layout,
                     const std::string& data_source, const TrainResult& result,
                     comm::Communicator& comm);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_OUTPUTS_H_
