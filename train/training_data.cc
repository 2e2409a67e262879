#include "train/training_data.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "io/npy.h"
#include "nn/init.h"
#include "nn/params_io.h"
#include "train/idx_dataset.h"

namespace ringlab::train {
namespace {

Dataset FromImages(LabelledImages images, std::string source) {
  Dataset data;
  data.size = images.count;
  data.features = static_cast<int>(images.features);
  data.x = std::move(images.pixels);
  data.y = std::move(images.labels);
  data.source = std::move(source);
  return data;
}

}  // namespace

std::string DatasetKind(const TrainConfig& c) {
  if (!c.dataset.empty()) return c.dataset;
  return c.data_dir.empty() ? "synthetic" : "npy";
}

std::string DataDir(const TrainConfig& c) {
  if (DatasetKind(c) == "fashion_mnist" && c.data_dir.empty()) {
    return kFashionMnistDir;
  }
  return c.data_dir;
}

TrainingData LoadTrainingData(const TrainConfig& config,
                              const nn::MlpLayout& layout, int rank,
                              torch_compat::TorchGenerator& generator) {
  const std::string kind = DatasetKind(config);
  if (kind == "fashion_mnist") {
    const std::string dir = DataDir(config);
    ImageDataSet set = ReadFashionMnist(dir, config.train_subset);
    return {
        FromImages(std::move(set.train), "fashion_mnist:" + dir),
        FromImages(std::move(set.test), "fashion_mnist:" + dir + " (test)")};
  }
  if (kind == "npy") {
    return {LoadDataset(config.data_dir, rank, layout.in_features(),
                        layout.num_classes()),
            {}};
  }
  return {MakeSyntheticDataset(config.samples, layout.in_features(),
                               layout.num_classes(), generator),
          {}};
}

std::vector<float> LoadInitDir(const std::string& dir,
                               const nn::MlpLayout& layout) {
  std::vector<float> params(layout.num_params());
  try {
    nn::LoadParams(dir, layout, params.data());
  } catch (const io::NpyError& e) {
    throw std::invalid_argument(e.what());
  }
  return params;
}

std::vector<float> InitialParams(const TrainConfig& config,
                                 const nn::MlpLayout& layout,
                                 torch_compat::TorchGenerator& generator) {
  std::vector<float> params(layout.num_params());
  // Drawn even when --init_dir replaces them: the synthetic data drawn next
  // from the same generator must not depend on where the parameters came from.
  nn::InitLikeTorch(layout, generator, params.data());
  if (!config.init_dir.empty()) params = LoadInitDir(config.init_dir, layout);
  return params;
}

}  // namespace ringlab::train
