#include "io/dirs.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace ringlab::io {

void MakeDirs(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error || !std::filesystem::is_directory(path)) {
    throw std::invalid_argument("cannot create directory " + path + ": " +
                                (error ? error.message() : "not a directory"));
  }
}

void FsyncDirectory(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    throw std::runtime_error("cannot fsync directory " + path + ": " +
                             std::strerror(error));
  }
  close(fd);
}

}  // namespace ringlab::io
