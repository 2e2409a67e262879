#include "train/idx_dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

namespace ringlab::train {
namespace {

// The whole file, decompressed when it is gzip'd (zlib reads plain files
// as they are).
std::vector<unsigned char> ReadAll(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    throw DataError(path + ": no such file");
  }
  if (S_ISDIR(st.st_mode)) throw DataError(path + ": is a directory");
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw DataError(path + ": cannot open");
  std::vector<unsigned char> bytes;
  unsigned char buffer[1 << 16];
  for (;;) {
    const int n = gzread(file, buffer, sizeof(buffer));
    if (n < 0) {
      int code = 0;
      const std::string why = gzerror(file, &code);
      gzclose(file);
      throw DataError(path + ": cannot decompress (" + why + ")");
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  gzclose(file);
  return bytes;
}

uint32_t BigEndian32(const std::vector<unsigned char>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) |
         (uint32_t{b[at + 2]} << 8) | uint32_t{b[at + 3]};
}

// The dimensions of an IDX file of unsigned bytes with `rank` dimensions;
// the data must fill the rest of the file exactly.
std::vector<uint32_t> Dimensions(const std::vector<unsigned char>& b,
                                 const std::string& path, int rank) {
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
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
  const uint64_t have = b.size() - header;
  if (have != elements) {
    throw DataError(path + ": " + std::to_string(have) +
                    " bytes of data where its header says " +
                    std::to_string(elements) +
                    (have < elements ? " (truncated)" : ""));
  }
  return dims;
}

std::string Existing(const std::string& path) {
  struct stat st;
  return stat((path + ".gz").c_str(), &st) == 0 ? path + ".gz" : path;
}

// The first `bytes` bytes of a file (decompressed when gzip'd), or fewer
// when it is shorter.
std::vector<unsigned char> ReadHead(const std::string& path, size_t bytes) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw DataError(path + ": no such file");
  if (S_ISDIR(st.st_mode)) throw DataError(path + ": is a directory");
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw DataError(path + ": cannot open");
  std::vector<unsigned char> head(bytes);
  const int n = gzread(file, head.data(), static_cast<unsigned>(bytes));
  gzclose(file);
  if (n < 0) throw DataError(path + ": cannot decompress");
  head.resize(static_cast<size_t>(n));
  return head;
}

// An IDX header's dimensions, without reading the data.
std::vector<uint32_t> HeaderDimensions(const std::string& path, int rank) {
  const std::vector<unsigned char> head = ReadHead(path, 4 + 4 * rank);
  if (head.size() < 4 + 4 * static_cast<size_t>(rank) || head[0] != 0 ||
      head[1] != 0 || head[2] != 0x08 || head[3] != rank) {
    throw DataError(path + ": not an IDX file of " + std::to_string(rank) +
                    "-dimensional unsigned bytes");
  }
  std::vector<uint32_t> dims;
  for (int d = 0; d < rank; ++d) dims.push_back(BigEndian32(head, 4 + 4 * d));
  return dims;
}

// An IDX file of unsigned bytes with `rank` dimensions: all of it (limit 0),
// its data filling the file exactly, or its first `limit` records, which must
// be there (what follows them is not read, nor decompressed).
struct IdxFile {
  std::vector<uint32_t> dims;        // as its header says
  std::vector<unsigned char> bytes;  // the header, then the records read
  int64_t records = 0;               // how many were read
};

IdxFile ReadIdx(const std::string& path, int rank, int64_t limit) {
  IdxFile f;
  if (limit <= 0) {
    f.bytes = ReadAll(path);
    f.dims = Dimensions(f.bytes, path, rank);
    f.records = f.dims[0];
    return f;
  }
  f.dims = HeaderDimensions(path, rank);
  uint64_t record = 1;
  for (int d = 1; d < rank; ++d) record *= f.dims[d];
  f.records = std::min<int64_t>(limit, f.dims[0]);
  if (record * f.records > (uint64_t{1} << 31)) {  // one gzread's worth
    throw DataError(path + ": dimensions too large");
  }
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  const size_t wanted = header + record * f.records;
  f.bytes = ReadHead(path, wanted);
  if (f.bytes.size() < wanted) {
    throw DataError(path + ": " + std::to_string(f.bytes.size() - header) +
                    " bytes of data where " + std::to_string(f.records) +
                    " records need " + std::to_string(wanted - header) +
                    " (truncated)");
  }
  return f;
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
    if (label_dims[0] != dims[0]) {
      throw DataError(labels + ": " + std::to_string(label_dims[0]) +
                      " labels for the " + std::to_string(dims[0]) +
                      " images of " + images);
    }
    (i == 0 ? shape.train_count : shape.test_count) = dims[0];
    const int64_t features = int64_t{dims[1]} * dims[2];
    if (i == 1 && features != shape.features) {
      throw DataError(dir + ": training images have " +
                      std::to_string(shape.features) + " pixels, test images " +
                      std::to_string(features));
    }
    shape.features = features;
  }
  return shape;
}

LabelledImages ReadIdxImages(const std::string& images_path,
                             const std::string& labels_path, int num_classes,
                             int64_t limit) {
  const IdxFile images = ReadIdx(images_path, 3, limit);
  const IdxFile labels = ReadIdx(labels_path, 1, limit);
  if (labels.dims[0] != images.dims[0]) {
    throw DataError(labels_path + ": " + std::to_string(labels.dims[0]) +
                    " labels for the " + std::to_string(images.dims[0]) +
                    " images of " + images_path);
  }
  LabelledImages out;
  out.count = images.records;
  out.features = int64_t{images.dims[1]} * images.dims[2];
  out.pixels.resize(static_cast<size_t>(out.count * out.features));
  const unsigned char* pixel = images.bytes.data() + 16;
  for (size_t i = 0; i < out.pixels.size(); ++i) {
    out.pixels[i] = static_cast<float>(pixel[i]) / 255.0f;
  }
  out.labels.resize(static_cast<size_t>(out.count));
  for (int64_t i = 0; i < out.count; ++i) {
    out.labels[i] = labels.bytes[8 + i];
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
  if (set.train.features != set.test.features) {
    throw DataError(
        dir + ": training images have " + std::to_string(set.train.features) +
        " pixels, test images " + std::to_string(set.test.features));
  }
  return set;
}

}  // namespace ringlab::train
