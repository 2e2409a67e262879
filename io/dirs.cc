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

void Note(const DurabilityEvent& event) {
  if (Observer()) Observer()(event);
}

}  // namespace

void ObserveDurability(std::function<void(const DurabilityEvent&)> observer) {
  Observer() = std::move(observer);
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
  if (fd < 0 || !Fsync(fd, path)) {
    const int error = errno;
    if (fd >= 0) close(fd);
    throw std::runtime_error("cannot fsync directory " + path + ": " +
                             std::strerror(error));
  }
  close(fd);
}

bool Fsync(int fd, const std::string& path) {
  if (fsync(fd) != 0) return false;
  Note({"fsync", path, ""});
  return true;
}

bool RenameFile(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) return false;
  Note({"rename", to, from});
  return true;
}

void Rename(const std::string& from, const std::string& to) {
  if (!RenameFile(from, to)) {
    throw std::runtime_error("cannot rename " + from + " to " + to + ": " +
                             std::strerror(errno));
  }
}

std::string WhyNotWritable(const std::string& dir) {
  const std::string probe = dir + "/.ringlab-write-probe";
  const int fd =
      open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int saved = errno;
  const bool made = fd >= 0 && close(fd) == 0;
  const int err = fd >= 0 ? errno : saved;
  unlink(probe.c_str());
  return made ? "" : std::strerror(err);
}

}  // namespace ringlab::io
