#include "io/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace ringlab::io {
namespace {

// The pid the lock file names, 0 when it names none.
int64_t Holder(int fd) {
  char text[32] = {};
  const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  return n > 0 ? std::strtoll(text, nullptr, 10) : 0;
}

// Opens and locks path's current file. A holder removes the file as it
// lets go, so a lock taken on a file no longer at path (opened before its
// holder removed it) is no lock: false, try again.
bool LockCurrentFile(const std::string& dir, const std::string& path, int* fd) {
  // No O_TRUNC: a holder's pid must survive a refused opener.
  *fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (*fd < 0) {
    throw std::invalid_argument("cannot open " + path + ": " +
                                std::strerror(errno));
  }
  if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const int64_t holder = err == EWOULDBLOCK ? Holder(*fd) : 0;
    close(*fd);
    *fd = -1;
    if (err != EWOULDBLOCK) {
      throw std::invalid_argument("cannot lock " + path + ": " +
                                  std::strerror(err));
    }
    throw DirectoryInUse(
        dir + " is in use by another job (" +
            (holder > 0 ? "pid " + std::to_string(holder) : "a process") +
            " holds " + path + ")",
        holder);
  }
  struct stat held {
  }, named{};
  if (fstat(*fd, &held) == 0 && stat(path.c_str(), &named) == 0 &&
      held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
    return true;
  }
  close(*fd);
  *fd = -1;
  return false;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir)
    : path_(dir + "/" + kFileName) {
  for (int attempt = 0; !LockCurrentFile(dir, path_, &fd_); ++attempt) {
    if (attempt == 100) {  // other jobs keep taking and letting go of it
      throw DirectoryInUse(dir + " is in use by other jobs (" + path_ +
                               " is removed and made again meanwhile)",
                           0);
    }
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) !=
                                    static_cast<ssize_t>(pid.size())) {
    // The lock holds without the note; only the message would lack a pid.
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ < 0) return;
  // Removed while still held: the directory is left as the job found it
  // (a refused job, too, leaves no file behind), and an opener that had the
  // old file sees it is gone (LockCurrentFile).
  unlink(path_.c_str());
  close(fd_);
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

}  // namespace ringlab::io
