// Where a rank's numbers come from, as a PyTorch script makes them: the
// generator seeded, the model's initial parameters drawn (or read from an
// init dir), then the data: synthetic (drawn next from the same generator),
// .npy files, or Fashion-MNIST's IDX files with their test split.
#ifndef RINGLAB_TRAIN_TRAINING_DATA_H_
#define RINGLAB_TRAIN_TRAINING_DATA_H_

#include <string>
#include <vector>

#include "nn/mlp.h"
#include "torch_compat/generator.h"
#include "train/dataset.h"
#include "train/train_config.h"

namespace ringlab::train {

// --dataset, its default resolved: "synthetic", "npy" or "fashion_mnist".
std::string DatasetKind(const TrainConfig& c);
// The data set's directory, its default resolved (fashion_mnist's is
// kFashionMnistDir).
std::string DataDir(const TrainConfig& c);

// The training data and, where the data set has one, the test split (size 0
// otherwise).
struct TrainingData {
  Dataset train;
  Dataset test;
};

// This rank's data, read (or drawn from generator) once; throws
// std::invalid_argument (DataError for IDX files) naming what is wrong.
TrainingData LoadTrainingData(const TrainConfig& config,
                              const nn::MlpLayout& layout, int rank,
                              torch_compat::TorchGenerator& generator);

// The parameters a rank starts from: drawn as torch's init draws them, then
// replaced by init_dir's when given (the draw still happens, so that the
// synthetic data drawn next do not depend on it).
std::vector<float> InitialParams(const TrainConfig& config,
                                 const nn::MlpLayout& layout,
                                 torch_compat::TorchGenerator& generator);

// init_dir's tensors, checked against the layout.
std::vector<float> LoadInitDir(const std::string& dir,
                               const nn::MlpLayout& layout);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_TRAINING_DATA_H_
