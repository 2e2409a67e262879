#include "io/regular_file.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "io/test_dirs.h"

namespace ringlab::io {
namespace {

TEST(RegularFileTest, ReadsWhatTheFileHasAndNoMore) {
  const std::string path = FreshTestDir("regular_file_read") + "/f";
  std::ofstream(path) << "0123456789";
  const RegularFile file(path);
  ASSERT_EQ(file.refusal(), RegularFile::Refusal::kNone);
  EXPECT_EQ(file.size(), 10u);
  std::string bytes, error;
  ASSERT_TRUE(file.ReadAt(3, 4, &bytes, &error));
  EXPECT_EQ(bytes, "3456");
  ASSERT_TRUE(file.ReadAt(8, 100, &bytes, &error));
  EXPECT_EQ(bytes, "89");
  ASSERT_TRUE(file.ReadAt(10, 100, &bytes, &error));
  EXPECT_EQ(bytes, "");
}

// A FIFO nobody writes would block a plain open for ever: it is refused.
TEST(RegularFileTest, RefusesWhatIsNotARegularFileWithoutBlocking) {
  const std::string dir = FreshTestDir("regular_file_refusals");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(RegularFile(fifo).refusal(), RegularFile::Refusal::kNotRegular);
  EXPECT_EQ(RegularFile("/dev/zero").refusal(),
            RegularFile::Refusal::kNotRegular);
  EXPECT_EQ(RegularFile(dir).refusal(), RegularFile::Refusal::kDirectory);
  const RegularFile missing(dir + "/missing");
  EXPECT_EQ(missing.refusal(), RegularFile::Refusal::kCannotOpen);
  EXPECT_EQ(missing.Why(), "cannot open: No such file or directory");
}

}  // namespace
}  // namespace ringlab::io
