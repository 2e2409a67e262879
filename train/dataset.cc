#include "train/dataset.h"

#include <sys/stat.h>

#include <stdexcept>

#include "io/npy.h"

namespace ringlab::train {
namespace {

bool FileExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

struct DataFiles {
  std::string x, y;
};

// data_rank{rank}.npy + targets_rank{rank}.npy when present, else the shared
// data.npy + targets.npy.
DataFiles FindDataFiles(const std::string& data_dir, int rank) {
  DataFiles files{data_dir + "/data_rank" + std::to_string(rank) + ".npy",
                  data_dir + "/targets_rank" + std::to_string(rank) + ".npy"};
  if (!FileExists(files.x)) {
    // Per-rank files for some ranks and a shared set for others would train
    // ranks on unrelated data without a word: refuse the mix.
    if (FileExists(data_dir + "/data_rank0.npy")) {
      throw std::invalid_argument("--data_dir " + data_dir +
                                  " has per-rank data sets but no " + files.x);
    }
    files = {data_dir + "/data.npy", data_dir + "/targets.npy"};
  }
  if (!FileExists(files.x)) {
    throw std::invalid_argument("--data_dir " + data_dir +
                                ": neither data.npy nor data_rank" +
                                std::to_string(rank) + ".npy exists");
  }
  return files;
}

}  // namespace

namespace {

void CheckLabels(const std::vector<int64_t>& labels, int classes,
                 const std::string& path) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw std::invalid_argument(
          path + ": label " + std::to_string(labels[i]) + " at index " +
          std::to_string(i) + " is not a class of the model (0.." +
          std::to_string(classes - 1) + ")");
    }
  }
}

}  // namespace

int64_t CheckNpyDataset(const std::string& data_dir, int rank, int features,
                        int classes) {
  const DataFiles files = FindDataFiles(data_dir, rank);
  try {
    const io::NpyHeader x = io::ReadNpyHeader(files.x);
    if (x.dtype != io::NpyDtype::kFloat32 || x.shape.size() != 2 ||
        x.shape[1] != features) {
      throw std::invalid_argument(files.x + ": expected float32 of shape (n, " +
                                  std::to_string(features) + "), found " +
                                  io::NpyDtypeName(x.dtype) + " " +
                                  io::ShapeToString(x.shape));
    }
    if (x.shape[0] == 0) {
      throw std::invalid_argument(files.x + " holds no samples");
    }
    // Read within the size their header gives, which must be the file's
    // (io/npy.h): a label file is never read past what it says it holds.
    const std::vector<int64_t> y = io::ReadInt64Vector(files.y);
    if (static_cast<int64_t>(y.size()) != x.shape[0]) {
      throw std::invalid_argument(files.y + ": " + std::to_string(y.size()) +
                                  " labels for " + std::to_string(x.shape[0]) +
                                  " samples in " + files.x);
    }
    CheckLabels(y, classes, files.y);
    return x.shape[0];
  } catch (const io::NpyError& e) {
    throw std::invalid_argument(e.what());
  }
}

void Dataset::Gather(const std::vector<int64_t>& indices, size_t begin,
                     size_t end, std::vector<float>* batch_x,
                     std::vector<int64_t>* batch_y) const {
  batch_x->resize((end - begin) * features);
  batch_y->resize(end - begin);
  for (size_t i = begin; i < end; ++i) {
    const int64_t row = indices[i];
    std::copy(x.begin() + row * features, x.begin() + (row + 1) * features,
              batch_x->begin() + (i - begin) * features);
    (*batch_y)[i - begin] = y[row];
  }
}

Dataset MakeSyntheticDataset(int64_t size, int features, int classes,
                             torch_compat::TorchGenerator& generator) {
  Dataset data;
  data.size = size;
  data.features = features;
  data.source = "synthetic";
  data.x.resize(size * features);
  for (float& value : data.x) value = generator.Uniform(0.0f, 1.0f);
  data.y.resize(size);
  for (int64_t& label : data.y) label = generator.RandInt(classes);
  return data;
}

Dataset LoadDataset(const std::string& data_dir, int rank, int features,
                    int classes) {
  const DataFiles files = FindDataFiles(data_dir, rank);
  const std::string& x_path = files.x;
  const std::string& y_path = files.y;
  Dataset data;
  int64_t rows = 0;
  int64_t cols = 0;
  try {
    data.x = io::ReadFloatMatrix(x_path, &rows, &cols, features);
    data.y = io::ReadInt64Vector(y_path);
  } catch (const io::NpyError& e) {
    throw std::invalid_argument(e.what());
  }
  if (static_cast<int64_t>(data.y.size()) != rows) {
    throw std::invalid_argument(y_path + ": " + std::to_string(data.y.size()) +
                                " labels for " + std::to_string(rows) +
                                " samples in " + x_path);
  }
  CheckLabels(data.y, classes, y_path);
  data.size = rows;
  data.features = features;
  data.source = x_path + ", " + y_path;
  return data;
}

}  // namespace ringlab::train
