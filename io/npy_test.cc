#include "io/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ringlab::io {
namespace {

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string Path(const std::string& name) { return TmpDir() + "/" + name; }

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), bytes.size());
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A v1.0 file with the given header dict (padded like NumPy) and data bytes.
std::string MakeNpy(const std::string& dict, const std::string& data,
                    int major = 1) {
  std::string h = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out =
      std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  const uint32_t n = h.size();
  out += static_cast<char>(n & 0xFF);
  out += static_cast<char>((n >> 8) & 0xFF);
  if (major != 1) {
    out += static_cast<char>((n >> 16) & 0xFF);
    out += static_cast<char>(n >> 24);
  }
  return out + h + data;
}

std::string Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// Expects NpyError whose message names the file and contains `problem`.
void ExpectBad(const std::string& name, const std::string& bytes,
               const std::string& problem) {
  const std::string path = Path(name);
  WriteBytes(path, bytes);
  try {
    std::vector<int64_t> shape;
    ReadNpyFloat32(path, &shape);
    ADD_FAILURE() << name << ": no error";
  } catch (const NpyError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(problem), std::string::npos)
        << name << ": \"" << msg << "\" lacks \"" << problem << "\"";
  }
}

TEST(NpyTest, RoundTripFloatAndInt) {
  const std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  WriteNpyFloat32(Path("f.npy"), {2, 3}, f.data());
  std::vector<int64_t> shape;
  EXPECT_EQ(ReadNpyFloat32(Path("f.npy"), &shape), f);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
  const std::vector<int64_t> i = {1, -2, int64_t{1} << 40};
  WriteNpyInt64(Path("i.npy"), {3}, i.data());
  EXPECT_EQ(ReadInt64Vector(Path("i.npy")), i);
  // Scalars and empty arrays.
  WriteNpyFloat32(Path("scalar.npy"), {}, f.data());
  EXPECT_EQ(ReadNpyFloat32(Path("scalar.npy"), &shape),
            std::vector<float>{1.5f});
  EXPECT_TRUE(shape.empty());
  WriteNpyFloat32(Path("empty.npy"), {0, 4}, nullptr);
  EXPECT_TRUE(ReadNpyFloat32(Path("empty.npy"), &shape).empty());
  EXPECT_EQ(shape, (std::vector<int64_t>{0, 4}));
  // Header is NumPy-style: 64-byte aligned data, ends in '\n'.
  const std::string bytes = ReadBytes(Path("f.npy"));
  EXPECT_EQ(bytes.size(), 128u + 24u);
  EXPECT_EQ(bytes[127], '\n');
  EXPECT_NE(bytes.find("'shape': (2, 3)"), std::string::npos);
  EXPECT_NE(ReadBytes(Path("i.npy")).find("'shape': (3,)"), std::string::npos);
}

// The header alone: what the file holds, checked against its size, without
// reading the data.
TEST(NpyTest, HeaderOnlyReadChecksTheFileSize) {
  const std::vector<float> f(6, 0.5f);
  WriteNpyFloat32(Path("h.npy"), {2, 3}, f.data());
  const NpyHeader h = ReadNpyHeader(Path("h.npy"));
  EXPECT_EQ(h.dtype, NpyDtype::kFloat32);
  EXPECT_EQ(h.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.data_offset, 128u);
  const std::string bytes = ReadBytes(Path("h.npy"));
  std::ofstream(Path("cut.npy"), std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 4));
  EXPECT_THROW(ReadNpyHeader(Path("cut.npy")), NpyError);
  std::ofstream(Path("long.npy"), std::ios::binary) << bytes << "xx";
  EXPECT_THROW(ReadNpyHeader(Path("long.npy")), NpyError);
  std::ofstream(Path("stub.npy"), std::ios::binary) << bytes.substr(0, 20);
  EXPECT_THROW(ReadNpyHeader(Path("stub.npy")), NpyError);
  EXPECT_THROW(ReadNpyHeader(Path("missing.npy")), NpyError);
  EXPECT_THROW(ReadNpyHeader(TmpDir()), NpyError);
}

TEST(NpyTest, ReadsVersion2And3AndPythonSpacing) {
  WriteBytes(
      Path("v2.npy"),
      MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
              Floats({1, 2}), 2));
  std::vector<int64_t> shape;
  EXPECT_EQ(ReadNpyFloat32(Path("v2.npy"), &shape), (std::vector<float>{1, 2}));
  WriteBytes(
      Path("v3.npy"),
      MakeNpy("{\"shape\":(1,2),\"descr\":\"<f4\",\"fortran_order\":False}",
              Floats({3, 4}), 3));
  EXPECT_EQ(ReadNpyFloat32(Path("v3.npy"), &shape), (std::vector<float>{3, 4}));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 2}));
}

TEST(NpyTest, BadFiles) {
  const std::string ok_dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  ExpectBad("magic.npy", "PK\x03\x04 this is a zip", "bad magic");
  ExpectBad("empty_file.npy", "", "bad magic");
  std::string v9 = MakeNpy(ok_dict, Floats({1, 2}));
  v9[6] = 9;
  ExpectBad("version.npy", v9, "unsupported .npy format version 9.0");
  ExpectBad("short_len.npy", std::string("\x93NUMPY\x01\x00\x05", 9),
            "truncated header");
  std::string huge_len =
      std::string("\x93NUMPY\x02\x00", 8) + "\xff\xff\xff\x7f";
  ExpectBad("huge_len.npy", huge_len, "exceeds the limit");
  std::string long_len = MakeNpy(ok_dict, "");
  long_len[8] = '\xff';
  long_len[9] = '\xff';
  ExpectBad("header_past_end.npy", long_len, "truncated header");
  ExpectBad("dtype.npy",
            MakeNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                    Floats({1, 2, 3, 4})),
            "unsupported dtype '<f8'");
  ExpectBad("bigendian.npy",
            MakeNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
                    Floats({1, 2})),
            "unsupported dtype '>f4'");
  ExpectBad("int_as_float.npy",
            MakeNpy("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                    Floats({1, 2})),
            "dtype is int64, expected float32");
  ExpectBad("fortran.npy",
            MakeNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
                    Floats({1, 2})),
            "fortran_order=True");
  ExpectBad("truncated.npy", MakeNpy(ok_dict, Floats({1})), "truncated data");
  ExpectBad("trailing.npy", MakeNpy(ok_dict, Floats({1, 2, 3})),
            "trailing garbage");
  ExpectBad("garbage_header.npy", MakeNpy("{'descr': '<f4', lol", ""),
            "malformed header");
  ExpectBad("not_dict.npy", MakeNpy("[1, 2, 3]", ""), "malformed header");
  ExpectBad("missing_key.npy",
            MakeNpy("{'descr': '<f4', 'shape': (2,), }", Floats({1, 2})),
            "lacks one of");
  ExpectBad("extra_key.npy",
            MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "
                    "'x': 1}",
                    Floats({1, 2})),
            "unexpected key 'x'");
  ExpectBad(
      "neg_shape.npy",
      MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
              Floats({1, 2})),
      "malformed header");
  ExpectBad("overflow_shape.npy",
            MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': "
                    "(4294967296, 4294967296), }",
                    ""),
            "too large");
  ExpectBad("overflow_dim.npy",
            MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': "
                    "(99999999999999999999999,), }",
                    ""),
            "dimension too large");
  ExpectBad("nul.npy", MakeNpy(std::string("{'descr'\0", 9), ""), "NUL");
  // Missing file.
  try {
    std::vector<int64_t> shape;
    ReadNpyFloat32(Path("does_not_exist.npy"), &shape);
    ADD_FAILURE();
  } catch (const NpyError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}

// Every prefix of a valid file and every single-byte corruption of its header
// gives an NpyError or a valid array, never a crash.
TEST(NpyTest, TruncationsAndCorruptionsNeverCrash) {
  const std::vector<float> f = {1, 2, 3, 4, 5, 6};
  WriteNpyFloat32(Path("src.npy"), {3, 2}, f.data());
  const std::string good = ReadBytes(Path("src.npy"));
  int errors = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    try {
      ParseNpy("prefix", good.substr(0, n));
    } catch (const NpyError&) {
      ++errors;
    }
  }
  EXPECT_EQ(errors, static_cast<int>(good.size()));
  for (size_t i = 0; i < 64; ++i) {
    for (int c : {0, 0x20, 0x27, 0x28, 0x29, 0x2c, 0x31, 0x39, 0x7b, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(c);
      try {
        ParseNpy("corrupt", bad);
      } catch (const NpyError&) {
      }
    }
  }
}

TEST(NpyTest, MatrixAndVectorHelpersCheckRank) {
  const std::vector<float> f = {1, 2, 3, 4, 5, 6};
  WriteNpyFloat32(Path("m.npy"), {3, 2}, f.data());
  int64_t rows = 0, cols = 0;
  EXPECT_EQ(ReadFloatMatrix(Path("m.npy"), &rows, &cols), f);
  EXPECT_EQ(rows, 3);
  EXPECT_EQ(cols, 2);
  EXPECT_THROW(ReadFloatMatrix(Path("m.npy"), &rows, &cols, 5), NpyError);
  WriteNpyFloat32(Path("v.npy"), {6}, f.data());
  EXPECT_THROW(ReadFloatMatrix(Path("v.npy"), &rows, &cols), NpyError);
  const std::vector<int64_t> m = {1, 2, 3, 4};
  WriteNpyInt64(Path("im.npy"), {2, 2}, m.data());
  EXPECT_THROW(ReadInt64Vector(Path("im.npy")), NpyError);
}

// What the writer accepts reads back: both stop at 32 dimensions. A directory
// is named as one, not as a file with bad magic.
TEST(NpyTest, DimensionLimitAndDirectories) {
  const float one = 1.0f;
  WriteNpyFloat32(Path("d32.npy"), std::vector<int64_t>(32, 1), &one);
  std::vector<int64_t> shape;
  EXPECT_EQ(ReadNpyFloat32(Path("d32.npy"), &shape).size(), 1u);
  EXPECT_EQ(shape.size(), 32u);
  EXPECT_THROW(
      WriteNpyFloat32(Path("d33.npy"), std::vector<int64_t>(33, 1), &one),
      NpyError);
  try {
    ReadNpyFloat32(TmpDir(), nullptr);
    ADD_FAILURE() << "reading a directory did not throw";
  } catch (const NpyError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos)
        << e.what();
  }
}

// A FIFO would block a plain open and a link to /dev/zero would read without
// end: both are refused as what they are, at once, by every reader.
TEST(NpyTest, OnlyRegularFilesAreRead) {
  const std::string fifo = Path("fifo.npy");
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string zero = Path("zero.npy");
  std::remove(zero.c_str());
  ASSERT_EQ(symlink("/dev/zero", zero.c_str()), 0);
  for (const std::string& path : {fifo, zero}) {
    for (int reader = 0; reader < 3; ++reader) {
      try {
        if (reader == 0) ReadNpyHeader(path);
        if (reader == 1) ReadNpyFloat32(path, nullptr);
        if (reader == 2) ReadNpyInt64(path, nullptr);
        ADD_FAILURE() << path << " was read by reader " << reader;
      } catch (const NpyError& e) {
        EXPECT_NE(std::string(e.what()).find("is not a regular file"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(NpyTest, WriteIsAtomicAndLeavesNoTemporaries) {
  const std::string dir = Path("atomic");
  mkdir(dir.c_str(), 0755);
  const std::vector<float> a(1000, 1.0f);
  WriteNpyFloat32(dir + "/x.npy", {1000}, a.data());
  WriteNpyFloat32(dir + "/x.npy", {1000}, a.data());
  // Only x.npy remains.
  int files = 0;
  std::unique_ptr<FILE, int (*)(FILE*)> ls(popen(("ls -A " + dir).c_str(), "r"),
                                           pclose);
  char line[256];
  while (fgets(line, sizeof(line), ls.get())) {
    ++files;
    EXPECT_EQ(std::string(line), "x.npy\n");
  }
  EXPECT_EQ(files, 1);
  // A write into a missing directory fails cleanly.
  EXPECT_THROW(WriteNpyFloat32(Path("no/such/dir/x.npy"), {1}, a.data()),
               NpyError);
}

}  // namespace
}  // namespace ringlab::io
