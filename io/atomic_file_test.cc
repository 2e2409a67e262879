#include "io/atomic_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "io/test_dirs.h"

namespace ringlab::io {
namespace {

TEST(AtomicFileTest, ReplacesTheWholeFileAndLeavesNoTemporary) {
  const std::string dir = FreshTestDir("atomic");
  std::filesystem::create_directories(dir);
  WriteFileAtomically(dir + "/f", "old contents");
  WriteFileAtomically(dir + "/f", "new");
  std::ifstream in(dir + "/f");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "new");
  size_t files = 0;
  for (auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1u);  // no temporary left behind
}

TEST(AtomicFileTest, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const std::string dir = FreshTestDir("atomic_failure");
  std::filesystem::create_directories(dir + "/target_is_a_directory");
  WriteFileAtomically(dir + "/kept", "old");
  // Renaming a file over a non-empty directory fails: the write must report
  // it and clean up after itself.
  std::ofstream(dir + "/target_is_a_directory/x") << "x";
  EXPECT_THROW(WriteFileAtomically(dir + "/target_is_a_directory", "new"),
               std::runtime_error);
  EXPECT_THROW(WriteFileAtomically(dir + "/no_such_dir/f", "new"),
               std::runtime_error);
  size_t files = 0;
  for (auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 2u);  // "kept" and the directory: no temporary
  std::ifstream in(dir + "/kept");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "old");
}

TEST(AtomicFileTest, RandomHexIsSixteenDigitsAndVaries) {
  const std::string a = RandomHex();
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, RandomHex());
}

}  // namespace
}  // namespace ringlab::io
