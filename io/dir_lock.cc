#include "io/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace ringlab::io {
namespace {

// The pid the lock file names, 0 when it names none.
int64_t Holder(int fd) {
  char text[32] = {};
  const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  return n > 0 ? std::strtoll(text, nullptr, 10) : 0;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  // No O_TRUNC: a holder's pid must survive a refused opener.
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) {
    throw std::invalid_argument("cannot open " + path + ": " +
                                std::strerror(errno));
  }
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const int64_t holder = err == EWOULDBLOCK ? Holder(fd_) : 0;
    close(fd_);
    fd_ = -1;
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
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) !=
                                    static_cast<ssize_t>(pid.size())) {
    // The lock holds without the note; only the message would lack a pid.
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock; the file stays
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept : fd_(other.fd_) {
  other.fd_ = -1;
}

}  // namespace ringlab::io
