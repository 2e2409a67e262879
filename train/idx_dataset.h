// Image data sets in the IDX format of MNIST and Fashion-MNIST (gzip'd or
// not), as Debian's dataset-fashion-mnist installs them under
// /usr/share/datasets/fashion-mnist: train-{images-idx3,labels-idx1}-ubyte.gz
// (60 000 images) and t10k-… (10 000), 28x28 bytes each, labels 0-9. Pixels
// become floats x / 255, as torchvision's ToTensor makes them, so a model sees
// the same inputs as in PyTorch. Every defect of a file (missing, not IDX,
// wrong dimensions, truncated, trailing bytes, images and labels of different
// counts, a label out of range) is a DataError naming the file.
#ifndef RINGLAB_TRAIN_IDX_DATASET_H_
#define RINGLAB_TRAIN_IDX_DATASET_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringlab::train {

class DataError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct LabelledImages {
  int64_t count = 0;
  int64_t features = 0;       // rows * columns
  std::vector<float> pixels;  // count x features, x / 255
  std::vector<int64_t> labels;
};

// One images file and its labels file; labels must be below num_classes.
// With a limit > 0 below their count, only the first `limit` images and
// labels: the rest of the files is neither decompressed nor checked (a small
// subset of Fashion-MNIST then starts a rank in a fraction of the time the
// whole set takes). A larger limit reads and checks all of them.
LabelledImages ReadIdxImages(const std::string& images_path,
                             const std::string& labels_path, int num_classes,
                             int64_t limit = 0);

struct ImageDataSet {
  LabelledImages train, test;
};

inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// What the headers of dir's four files say, reading nothing else (a launcher's
// cheap check before any rank reads the data).
struct ImageDataSetShape {
  int64_t train_count = 0, test_count = 0, features = 0;
};
ImageDataSetShape ReadFashionMnistShape(const std::string& dir);

// dir/train-* and dir/t10k-* (".gz" or not, whichever exists), 10 classes;
// the first train_limit training images only, where it is > 0.
ImageDataSet ReadFashionMnist(const std::string& dir, int64_t train_limit = 0);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_IDX_DATASET_H_
