#include "io/dirs.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ringlab::io {
namespace {

std::function<void(const DurabilityEvent&)>& Observer() {
  static std::function<void(const DurabilityEvent&)> observer;
  return observer;
}

}  // namespace

void ObserveDurability(std::function<void(const DurabilityEvent&)> observer) {
  Observer() = std::move(observer);
}

void NoteDurability(const DurabilityEvent& event) {
  if (Observer()) Observer()(event);
}

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
  NoteDurability({"fsync", path, ""});
}

void Rename(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + from + " to " + to + ": " +
                             std::strerror(errno));
  }
  NoteDurability({"rename", to, from});
}

}  // namespace ringlab::io
