#include "train/idx_dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ringlab::train {
namespace {

// A file read in order, decompressed when it is gzip'd (zlib reads plain
// files as they are), so that a header and then only the records wanted are
// read through one open file.
class GzInput {
 public:
  explicit GzInput(const std::string& path) : path_(path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      throw DataError(path + ": no such file");
    }
    if (S_ISDIR(st.st_mode)) throw DataError(path + ": is a directory");
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) throw DataError(path + ": cannot open");
  }
  ~GzInput() { gzclose(file_); }
  GzInput(const GzInput&) = delete;
  GzInput& operator=(const GzInput&) = delete;

  const std::string& path() const { return path_; }

  // The next `most` bytes, fewer where the file ends. A gzip stream that
  // ends early (even within its trailer, so unchecked) is an error.
  std::vector<unsigned char> Read(uint64_t most) {
    std::vector<unsigned char> out;
    unsigned char buffer[1 << 16];
    while (out.size() < most) {
      const uint64_t want =
          std::min<uint64_t>(sizeof(buffer), most - out.size());
      const int n = gzread(file_, buffer, static_cast<unsigned>(want));
      int code = Z_OK;
      const char* why = gzerror(file_, &code);
      if (n < 0 || (n == 0 && code != Z_OK)) {
        throw DataError(path_ + ": cannot decompress (" + why + ")");
      }
      if (n == 0) break;
      out.insert(out.end(), buffer, buffer + n);
    }
    return out;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

uint32_t BigEndian32(const std::vector<unsigned char>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) |
         (uint32_t{b[at + 2]} << 8) | uint32_t{b[at + 3]};
}

// The dimensions in the header of an IDX file of unsigned bytes with `rank`
// dimensions, read from its start.
std::vector<uint32_t> ReadHeader(GzInput& in, int rank) {
  const std::string& path = in.path();
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  const std::vector<unsigned char> b = in.Read(header);
  if (b.size() < header || b[0] != 0 || b[1] != 0 || b[2] != 0x08 ||
      b[3] != rank) {
    throw DataError(path + ": not an IDX file of " + std::to_string(rank) +
                    "-dimensional unsigned bytes");
  }
  std::vector<uint32_t> dims;
  uint64_t elements = 1;
  for (int d = 0; d < rank; ++d) {
    dims.push_back(BigEndian32(b, 4 + 4 * d));
    elements *= dims.back();
    if (elements > (uint64_t{1} << 34)) {
      throw DataError(path + ": dimensions too large");
    }
  }
  return dims;
}

std::string Existing(const std::string& path) {
  struct stat st;
  return stat((path + ".gz").c_str(), &st) == 0 ? path + ".gz" : path;
}

// An IDX header's dimensions, without reading the data.
std::vector<uint32_t> HeaderDimensions(const std::string& path, int rank) {
  GzInput in(path);
  return ReadHeader(in, rank);
}

// An IDX file of unsigned bytes with `rank` dimensions: all of it (a limit of
// 0, or of at least its count), its data filling the file exactly, or its
// first `limit` records, which must be there (what follows them is not read,
// nor decompressed).
struct IdxFile {
  std::vector<uint32_t> dims;       // as its header says
  std::vector<unsigned char> data;  // the records read
  int64_t records = 0;              // how many
};

IdxFile ReadIdx(const std::string& path, int rank, int64_t limit) {
  GzInput in(path);
  IdxFile f;
  f.dims = ReadHeader(in, rank);
  uint64_t record = 1;
  for (int d = 1; d < rank; ++d) record *= f.dims[d];
  const bool whole = limit <= 0 || limit >= int64_t{f.dims[0]};
  f.records = whole ? int64_t{f.dims[0]} : limit;
  const uint64_t wanted = record * static_cast<uint64_t>(f.records);
  // A whole file: one byte more, to see whether anything follows its records.
  f.data = in.Read(whole ? wanted + 1 : wanted);
  const uint64_t have = f.data.size();
  if (whole && have > wanted) {
    throw DataError(path + ": more bytes of data than the " +
                    std::to_string(wanted) + " its header says");
  }
  if (have < wanted) {
    throw DataError(path + ": " + std::to_string(have) +
                    " bytes of data where " + std::to_string(f.records) +
                    " records need " + std::to_string(wanted) + " (truncated)");
  }
  return f;
}

// The checks that a data set's files agree, as their headers say: one label
// an image, and as many pixels an image in training as in test.
void CheckOneLabelPerImage(const std::string& images_path, uint32_t images,
                           const std::string& labels_path, uint32_t labels) {
  if (labels != images) {
    throw DataError(labels_path + ": " + std::to_string(labels) +
                    " labels for the " + std::to_string(images) +
                    " images of " + images_path);
  }
}

void CheckSamePixels(const std::string& dir, int64_t train, int64_t test) {
  if (train != test) {
    throw DataError(dir + ": training images have " + std::to_string(train) +
                    " pixels, test images " + std::to_string(test));
  }
}

}  // namespace

ImageDataSetShape ReadFashionMnistShape(const std::string& dir) {
  ImageDataSetShape shape;
  const char* const kinds[2] = {"train", "t10k"};
  for (int i = 0; i < 2; ++i) {
    const std::string images =
        Existing(dir + "/" + kinds[i] + "-images-idx3-ubyte");
    const std::string labels =
        Existing(dir + "/" + kinds[i] + "-labels-idx1-ubyte");
    const std::vector<uint32_t> dims = HeaderDimensions(images, 3);
    const std::vector<uint32_t> label_dims = HeaderDimensions(labels, 1);
    CheckOneLabelPerImage(images, dims[0], labels, label_dims[0]);
    (i == 0 ? shape.train_count : shape.test_count) = dims[0];
    const int64_t features = int64_t{dims[1]} * dims[2];
    if (i == 1) CheckSamePixels(dir, shape.features, features);
    shape.features = features;
  }
  return shape;
}

LabelledImages ReadIdxImages(const std::string& images_path,
                             const std::string& labels_path, int num_classes,
                             int64_t limit) {
  const IdxFile images = ReadIdx(images_path, 3, limit);
  const IdxFile labels = ReadIdx(labels_path, 1, limit);
  CheckOneLabelPerImage(images_path, images.dims[0], labels_path,
                        labels.dims[0]);
  LabelledImages out;
  out.count = images.records;
  out.features = int64_t{images.dims[1]} * images.dims[2];
  out.pixels.resize(static_cast<size_t>(out.count * out.features));
  const unsigned char* pixel = images.data.data();
  for (size_t i = 0; i < out.pixels.size(); ++i) {
    out.pixels[i] = static_cast<float>(pixel[i]) / 255.0f;
  }
  out.labels.resize(static_cast<size_t>(out.count));
  for (int64_t i = 0; i < out.count; ++i) {
    out.labels[i] = labels.data[i];
    if (out.labels[i] >= num_classes) {
      throw DataError(labels_path + ": label " + std::to_string(out.labels[i]) +
                      " of image " + std::to_string(i) + " is not below " +
                      std::to_string(num_classes));
    }
  }
  return out;
}

ImageDataSet ReadFashionMnist(const std::string& dir, int64_t train_limit) {
  ImageDataSet set;
  set.train = ReadIdxImages(Existing(dir + "/train-images-idx3-ubyte"),
                            Existing(dir + "/train-labels-idx1-ubyte"), 10,
                            train_limit);
  set.test = ReadIdxImages(Existing(dir + "/t10k-images-idx3-ubyte"),
                           Existing(dir + "/t10k-labels-idx1-ubyte"), 10);
  CheckSamePixels(dir, set.train.features, set.test.features);
  return set;
}

}  // namespace ringlab::train
