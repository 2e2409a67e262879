#include "train/idx_dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "io/test_dirs.h"

namespace ringlab::train {
namespace {

// Where this test's files go (made once per process).
const std::string& Root() {
  static const std::string root = io::FreshTestDir("idx");
  return root;
}

std::vector<unsigned char> Idx(std::vector<uint32_t> dims,
                               const std::vector<unsigned char>& data) {
  std::vector<unsigned char> b = {0, 0, 0x08,
                                  static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back((d >> s) & 0xff);
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string Write(const std::string& name, const std::vector<unsigned char>& b,
                  bool gzip) {
  const std::string path = Root() + "/" + name;
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return path;
}

// Two 2x3 images; pixel values chosen so that x / 255 is checked exactly.
const std::vector<unsigned char> kPixels = {0,  1,  127, 128, 254, 255,
                                            10, 20, 30,  40,  50,  60};

TEST(IdxDatasetTest, ReadsGzippedAndPlainFilesAsTorchvisionDoes) {
  for (bool gzip : {true, false}) {
    const std::string tag = gzip ? "gz" : "plain";
    const auto images = Write("img_" + tag, Idx({2, 2, 3}, kPixels), gzip);
    const auto labels = Write("lab_" + tag, Idx({2}, {7, 3}), gzip);
    const LabelledImages d = ReadIdxImages(images, labels, 10);
    EXPECT_EQ(d.count, 2);
    EXPECT_EQ(d.features, 6);
    ASSERT_EQ(d.pixels.size(), kPixels.size());
    for (size_t i = 0; i < kPixels.size(); ++i) {
      // torchvision: img.float().div(255), one float division.
      EXPECT_EQ(d.pixels[i], static_cast<float>(kPixels[i]) / 255.0f) << i;
    }
    EXPECT_EQ(d.labels, (std::vector<int64_t>{7, 3}));
  }
}

void ExpectError(const std::string& images, const std::string& labels,
                 const std::string& fragment, int64_t limit = 0) {
  try {
    ReadIdxImages(images, labels, 10, limit);
    ADD_FAILURE() << "accepted; wanted an error with '" << fragment << "'";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << e.what();
  }
}

TEST(IdxDatasetTest, EveryDefectIsAnErrorNamingTheFile) {
  const auto good_images = Write("good_img", Idx({2, 2, 3}, kPixels), true);
  const auto good_labels = Write("good_lab", Idx({2}, {7, 3}), true);
  std::vector<unsigned char> truncated = Idx({2, 2, 3}, kPixels);
  truncated.pop_back();
  std::vector<unsigned char> not_idx = Idx({2, 2, 3}, kPixels);
  not_idx[2] = 0x0d;  // floats, not bytes
  ExpectError(Root() + "/missing", good_labels, "missing: no such file");
  ExpectError(Root(), good_labels, "is a directory");
  ExpectError(Write("trunc", truncated, true), good_labels, "(truncated)");
  ExpectError(Write("trail", Idx({1, 2, 3}, kPixels), false), good_labels,
              "more bytes of data than the 6 its header says");
  ExpectError(Write("notidx", not_idx, true), good_labels,
              "not an IDX file of 3-dimensional");
  ExpectError(good_images, Write("lab1", Idx({1}, {7}), true),
              "1 labels for the 2 images");
  ExpectError(good_images, Write("lab11", Idx({2}, {7, 10}), true),
              "label 10 of image 1 is not below 10");
  ExpectError(good_images, good_images, "not an IDX file of 1-dimensional");
  // A gzip stream cut short.
  std::string cut = Write("cut", Idx({2, 2, 3}, kPixels), true);
  std::ifstream in(cut, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(cut, std::ios::binary).write(bytes.data(), bytes.size() - 12);
  ExpectError(cut, good_labels, Root() + "/cut");
  // Cut within its 8-byte trailer: every record is there, its CRC is not.
  std::string trailer = Write("trailer", Idx({2, 2, 3}, kPixels), true);
  std::ofstream(trailer, std::ios::binary)
      .write(bytes.data(), bytes.size() - 4);
  ExpectError(trailer, good_labels, Root() + "/trailer: cannot decompress");
}

// A limit reads the first images only: what follows them may be cut short or
// never checked, but the images read must be there.
TEST(IdxDatasetTest, ALimitReadsTheFirstImagesOnly) {
  std::vector<unsigned char> short_tail = Idx({2, 2, 3}, kPixels);
  short_tail.resize(short_tail.size() - 2);  // the second image cut short
  const auto labels = Write("lim_lab", Idx({2}, {7, 3}), true);
  for (bool gzip : {true, false}) {
    const auto images =
        Write(std::string("lim_img") + (gzip ? ".gz" : ""), short_tail, gzip);
    const LabelledImages first = ReadIdxImages(images, labels, 10, 1);
    EXPECT_EQ(first.count, 1);
    EXPECT_EQ(first.pixels.size(), 6u);
    EXPECT_EQ(first.pixels[3], 128.0f / 255.0f);
    EXPECT_EQ(first.labels, (std::vector<int64_t>{7}));
    EXPECT_THROW(ReadIdxImages(images, labels, 10, 2), DataError);
    EXPECT_THROW(ReadIdxImages(images, labels, 10), DataError);
  }
  // More than the file holds: all of it, checked as a whole.
  const auto whole = Write("lim_whole", Idx({2, 2, 3}, kPixels), true);
  EXPECT_EQ(ReadIdxImages(whole, labels, 10, 5).count, 2);
  std::vector<unsigned char> trailing = Idx({2, 2, 3}, kPixels);
  trailing.push_back(0);
  const auto trail = Write("lim_trail", trailing, true);
  EXPECT_EQ(ReadIdxImages(trail, labels, 10, 1).count, 1);
  for (int64_t limit : {2, 5}) {
    ExpectError(trail, labels, "more bytes of data than the 12 its header says",
                limit);
  }
  // No records: a limit reads the none there are.
  const auto none = Write("lim_none", Idx({0, 2, 3}, {}), true);
  const auto no_labels = Write("lim_none_lab", Idx({0}, {}), true);
  EXPECT_EQ(ReadIdxImages(none, no_labels, 10, 3).count, 0);
  // The counts in the headers must still agree.
  EXPECT_THROW(
      ReadIdxImages(whole, Write("lim_lab1", Idx({1}, {7}), true), 10, 1),
      DataError);
}

// Debian's dataset-fashion-mnist, where installed (tools/setup.sh does).
TEST(IdxDatasetTest, DebiansFashionMnist) {
  struct stat st;
  if (stat(kFashionMnistDir, &st) != 0) {
    GTEST_SKIP() << kFashionMnistDir
                 << " missing (apt-get install dataset-fashion-mnist)";
  }
  const ImageDataSet set = ReadFashionMnist(kFashionMnistDir);
  EXPECT_EQ(set.train.count, 60000);
  EXPECT_EQ(set.test.count, 10000);
  EXPECT_EQ(set.train.features, 784);
  EXPECT_EQ(set.train.labels[0], 9);  // an ankle boot, as in every copy
  EXPECT_EQ(set.test.labels[0], 9);
  std::vector<int> per_class(10);
  for (int64_t l : set.train.labels) ++per_class[l];
  for (int n : per_class) EXPECT_EQ(n, 6000);  // balanced, as published
  const ImageDataSet part = ReadFashionMnist(kFashionMnistDir, 3200);
  ASSERT_EQ(part.train.count, 3200);
  EXPECT_EQ(part.test.count, 10000);
  EXPECT_TRUE(std::equal(part.train.pixels.begin(), part.train.pixels.end(),
                         set.train.pixels.begin()));
  const ImageDataSetShape shape = ReadFashionMnistShape(kFashionMnistDir);
  EXPECT_EQ(shape.train_count, 60000);
  EXPECT_EQ(shape.test_count, 10000);
  EXPECT_EQ(shape.features, 784);
}

// The header-only check sees what a header says, and refuses what is not one.
TEST(IdxDatasetTest, ShapeFromHeadersOnly) {
  const std::string dir = Root() + "/shape";
  mkdir(dir.c_str(), 0755);
  const auto labels = Idx({2}, {1, 2});
  // Data cut short: the header is all a shape check reads.
  Write("shape/train-images-idx3-ubyte.gz", Idx({2, 2, 3}, {1, 2}), true);
  Write("shape/train-labels-idx1-ubyte.gz", labels, true);
  Write("shape/t10k-images-idx3-ubyte", Idx({2, 2, 3}, kPixels), false);
  Write("shape/t10k-labels-idx1-ubyte", labels, false);
  const ImageDataSetShape shape = ReadFashionMnistShape(dir);
  EXPECT_EQ(shape.train_count, 2);
  EXPECT_EQ(shape.test_count, 2);
  EXPECT_EQ(shape.features, 6);
  Write("shape/t10k-labels-idx1-ubyte", Idx({3}, {1, 2, 3}), false);
  EXPECT_THROW(ReadFashionMnistShape(dir), DataError);
  Write("shape/t10k-labels-idx1-ubyte", {0, 0, 8}, false);
  try {
    ReadFashionMnistShape(dir);
    ADD_FAILURE() << "accepted a 3-byte header";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("t10k-labels"), std::string::npos);
  }
}

}  // namespace
}  // namespace ringlab::train
