// The one-job-per-directory lock: a second locker is refused naming the
// holder's pid, in another process as in this one; the lock goes with the
// holder, however it ends, and the file stays.
#include "io/dir_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

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
  DirectoryLock again(dir);  // released with the first
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + DirectoryLock::kFileName));
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
