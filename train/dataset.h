// The training data: n samples of f float features with int64 class labels,
// either synthetic and seeded (torch.rand features, torch.randint labels, drawn
// after the parameters from the same generator, as a PyTorch script would) or
// loaded from .npy files shared by all ranks or given per rank.
#ifndef RINGLAB_TRAIN_DATASET_H_
#define RINGLAB_TRAIN_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "torch_compat/generator.h"

namespace ringlab::train {

struct Dataset {
  int64_t size = 0;
  int features = 0;
  std::vector<float> x;    // [size, features], row-major
  std::vector<int64_t> y;  // [size]
  std::string source;      // for messages: "synthetic" or the file paths

  // Copies the rows `indices[begin, end)` into batch_x / batch_y.
  void Gather(const std::vector<int64_t>& indices, size_t begin, size_t end,
              std::vector<float>* batch_x, std::vector<int64_t>* batch_y) const;
};

// size samples, features U[0, 1) then labels in [0, classes).
Dataset MakeSyntheticDataset(int64_t size, int features, int classes,
                             torch_compat::TorchGenerator& generator);

// From data_dir: data_rank{rank}.npy + targets_rank{rank}.npy when present
// (each rank its own data set), else data.npy + targets.npy shared by all.
// Checks dtypes, shapes (x: [n, features], y: [n]) and that every label is in
// [0, classes); throws std::invalid_argument naming the file otherwise.
Dataset LoadDataset(const std::string& data_dir, int rank, int features,
                    int classes);

// What LoadDataset checks, reading the features' header only (dtype, shape,
// size) and the labels (small: one int64 per sample) in full: the number of
// samples. For a launcher, before any rank reads the data.
int64_t CheckNpyDataset(const std::string& data_dir, int rank, int features,
                        int classes);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_DATASET_H_
