#include "io/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace ringlab::io {

RegularFile::RegularFile(const std::string& path) {
  fd_ = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    refusal_ = Refusal::kCannotOpen;
    open_errno_ = errno;
    return;
  }
  struct stat info;
  if (fstat(fd_, &info) != 0) {
    refusal_ = Refusal::kCannotOpen;
    open_errno_ = errno;
    close(fd_);
    fd_ = -1;
    return;
  }
  if (!S_ISREG(info.st_mode)) {
    refusal_ =
        S_ISDIR(info.st_mode) ? Refusal::kDirectory : Refusal::kNotRegular;
    close(fd_);
    fd_ = -1;
    return;
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) close(fd_);
}

std::string RegularFile::Why() const {
  switch (refusal_) {
    case Refusal::kNone:
      return "";
    case Refusal::kCannotOpen:
      return std::string("cannot open: ") + std::strerror(open_errno_);
    case Refusal::kDirectory:
      return "is a directory";
    case Refusal::kNotRegular:
      return "is not a regular file (a pipe, a device or a socket)";
  }
  return "";
}

bool RegularFile::ReadAt(uint64_t offset, uint64_t n, std::string* out,
                         std::string* error) const {
  out->assign(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t k = pread(fd_, out->data() + done, n - done,
                            static_cast<off_t>(offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      *error = std::strerror(errno);
      return false;
    }
    if (k == 0) break;
    done += static_cast<size_t>(k);
  }
  out->resize(done);
  return true;
}

}  // namespace ringlab::io
