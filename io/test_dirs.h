// A fresh, empty directory for a test, under GoogleTest's own temporary
// directory (testing::TempDir(): TEST_TMPDIR under Bazel, /tmp elsewhere),
// so that tests of every package make theirs one way.
#ifndef RINGLAB_IO_TEST_DIRS_H_
#define RINGLAB_IO_TEST_DIRS_H_

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace ringlab::io {

// `name` under the test's temporary directory, emptied (or made) now.
inline std::string FreshTestDir(const std::string& name) {
  std::string root = ::testing::TempDir();
  if (!root.empty() && root.back() != '/') root += '/';
  const std::string dir = root + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace ringlab::io

#endif  // RINGLAB_IO_TEST_DIRS_H_
