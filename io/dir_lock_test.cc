// The one-job-per-directory lock: a second locker is refused naming the
// holder's pid, in another process as in this one; the lock goes with the
// holder, however it ends, and the file stays.
#include "io/dir_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "io/test_dirs.h"

namespace ringlab::io {
namespace {

TEST(DirectoryLockTest, ASecondLockerIsRefusedNamingTheHolder) {
  const std::string dir = FreshTestDir("lock");
  {
    DirectoryLock first(dir);
    try {
      DirectoryLock second(dir);
      ADD_FAILURE() << "locked twice";
    } catch (const DirectoryInUse& e) {
      EXPECT_EQ(e.holder(), getpid());
      EXPECT_NE(std::string(e.what()).find("is in use by another job (pid " +
                                           std::to_string(getpid())),
                std::string::npos)
          << e.what();
    }
    // Another process is refused too (flock is per open file).
    const pid_t child = fork();
    if (child == 0) {
      try {
        DirectoryLock theirs(dir);
      } catch (const DirectoryInUse& e) {
        _exit(e.holder() == getppid() ? 0 : 2);
      }
      _exit(1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  // Released with the first, which removed its file: a refused job leaves
  // no file behind either.
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + DirectoryLock::kFileName));
  DirectoryLock again(dir);
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + DirectoryLock::kFileName));
}

// A file removed by its holder as it let go is no lock for whoever opened
// it before: many lockers racing never hold the directory two at a time.
TEST(DirectoryLockTest, LockersRacingAReleaseNeverHoldItTogether) {
  const std::string dir = FreshTestDir("lock_race");
  int holders[2];
  ASSERT_EQ(pipe(holders), 0);
  std::vector<pid_t> children;
  for (int c = 0; c < 8; ++c) {
    const pid_t child = fork();
    if (child == 0) {
      for (int i = 0; i < 200; ++i) {
        try {
          DirectoryLock mine(dir);
          // Holding: the file at the path names this process.
          const std::string named = std::to_string(getpid()) + "\n";
          std::FILE* f =
              std::fopen((dir + "/" + DirectoryLock::kFileName).c_str(), "r");
          char text[32] = {};
          if (f == nullptr || std::fread(text, 1, sizeof(text) - 1, f) == 0 ||
              named != text) {
            (void)!write(holders[1], "x", 1);
          }
          if (f != nullptr) std::fclose(f);
        } catch (const DirectoryInUse&) {
        }
      }
      _exit(0);
    }
    children.push_back(child);
  }
  for (const pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  close(holders[1]);
  char c;
  EXPECT_EQ(read(holders[0], &c, 1), 0) << "two processes held the lock";
}

TEST(DirectoryLockTest, AKilledHolderLeavesItFree) {
  const std::string dir = FreshTestDir("lock_killed");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    DirectoryLock mine(dir);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_THROW(DirectoryLock{dir}, DirectoryInUse);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  DirectoryLock after(dir);
}

TEST(DirectoryLockTest, AMissingDirectoryIsAnError) {
  EXPECT_THROW(DirectoryLock(FreshTestDir("lock_gone") + "/no/such"),
               std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::io
