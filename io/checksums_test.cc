#include "io/checksums.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "io/test_dirs.h"

namespace ringlab::io {
namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The values sha256sum(1) gives ("abc" is FIPS 180-2's first example).
TEST(ChecksumsTest, Sha256IsTheStandardOne) {
  const std::string dir = FreshTestDir("sha_known");
  Write(dir + "/abc", "abc");
  EXPECT_EQ(Sha256OfFile(dir + "/abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Write(dir + "/empty", "");
  EXPECT_EQ(Sha256OfFile(dir + "/empty"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_THROW(Sha256OfFile(dir + "/absent"), ChecksumError);
  EXPECT_THROW(Sha256OfFile(dir), ChecksumError);
}

// What a checkpoint's reader must refuse, each naming the file.
TEST(ChecksumsTest, EveryChangeSinceTheWriteIsRefusedByName) {
  const std::string dir = FreshTestDir("sums");
  Write(dir + "/a.npy", "first part");
  Write(dir + "/b.csv", "second part");
  WriteChecksums(dir);
  VerifyChecksums(dir);
  auto refusal = [&] {
    try {
      VerifyChecksums(dir);
    } catch (const ChecksumError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  Write(dir + "/a.npy", "First part");  // the same size, one byte changed
  EXPECT_NE(refusal().find("a.npy is not the file that was written"),
            std::string::npos)
      << refusal();
  Write(dir + "/a.npy", "first part");
  VerifyChecksums(dir);
  std::remove((dir + "/b.csv").c_str());
  EXPECT_NE(refusal().find("b.csv is missing"), std::string::npos);
  Write(dir + "/b.csv", "second part");
  Write(dir + "/c.npy", "planted");
  EXPECT_NE(refusal().find("c.npy is not in SHA256SUMS"), std::string::npos);
  std::remove((dir + "/c.npy").c_str());
  Write(dir + "/SHA256SUMS", "nonsense\n");
  EXPECT_NE(refusal().find("not a list of SHA-256 checksums"),
            std::string::npos);
  std::remove((dir + "/SHA256SUMS").c_str());
  EXPECT_NE(refusal().find("carries no checksums"), std::string::npos);
}

// The list is sha256sum's own format: the tool checks it as it is.
TEST(ChecksumsTest, Sha256sumAcceptsTheList) {
  if (std::system("command -v sha256sum >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no sha256sum on this machine";
  }
  const std::string dir = FreshTestDir("sums_tool");
  Write(dir + "/x.npy", std::string(100000, 'x'));
  WriteChecksums(dir);
  EXPECT_EQ(std::system(
                ("cd " + dir + " && sha256sum --quiet -c SHA256SUMS").c_str()),
            0);
}

}  // namespace
}  // namespace ringlab::io
