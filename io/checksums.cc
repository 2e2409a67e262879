#include "io/checksums.h"

#include <errno.h>
#include <fcntl.h>
#include <nettle/base16.h>
#include <nettle/sha2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "io/atomic_file.h"

namespace ringlab::io {
namespace {

namespace fs = std::filesystem;

// The regular files of dir that a list covers, by name, sorted.
std::vector<std::string> ListedFiles(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name == kChecksumsFile || name.find(".tmp-") != std::string::npos) {
      continue;
    }
    if (entry.is_regular_file(error)) names.push_back(name);
  }
  if (error) {
    throw ChecksumError("cannot list " + dir + ": " + error.message());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The list's lines, name -> checksum; a line must be sha256sum's
// "<64 hex digits>  <name>".
std::map<std::string, std::string> ReadList(const std::string& dir) {
  const std::string path = dir + "/" + kChecksumsFile;
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw ChecksumError(path + ": cannot open (" + std::strerror(errno) +
                        "): the checkpoint carries no checksums");
  }
  std::string text;
  char buf[4096];
  ssize_t k;
  while ((k = read(fd, buf, sizeof(buf))) > 0 && text.size() < (1u << 20)) {
    text.append(buf, static_cast<size_t>(k));
  }
  close(fd);
  std::map<std::string, std::string> list;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const bool hex = line.size() > 66 &&
                     line.find_first_not_of("0123456789abcdef") == 64 &&
                     line.compare(64, 2, "  ") == 0;
    if (!hex || line.find('/') != std::string::npos) {
      throw ChecksumError(path + ": not a list of SHA-256 checksums");
    }
    list[line.substr(66)] = line.substr(0, 64);
  }
  return list;
}

}  // namespace

std::string Sha256OfFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat info;
  if (fd < 0 || fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    const int saved = errno;
    if (fd >= 0) close(fd);
    throw ChecksumError(path + ": cannot read" +
                        (fd < 0 ? std::string(": ") + std::strerror(saved)
                                : std::string(" (not a regular file)")));
  }
  sha256_ctx ctx;
  sha256_init(&ctx);
  std::vector<uint8_t> buf(1 << 20);
  ssize_t k;
  while ((k = read(fd, buf.data(), buf.size())) != 0) {
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const int saved = errno;
      close(fd);
      throw ChecksumError(path + ": read error: " + std::strerror(saved));
    }
    sha256_update(&ctx, static_cast<size_t>(k), buf.data());
  }
  close(fd);
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx, sizeof(digest), digest);
  std::string hex(BASE16_ENCODE_LENGTH(sizeof(digest)), '\0');
  base16_encode_update(hex.data(), sizeof(digest), digest);
  return hex;
}

void WriteChecksums(const std::string& dir) {
  std::string list;
  for (const std::string& name : ListedFiles(dir)) {
    list += Sha256OfFile(dir + "/" + name) + "  " + name + "\n";
  }
  WriteFileAtomically(dir + "/" + kChecksumsFile, list);
}

void VerifyChecksums(const std::string& dir) {
  const std::map<std::string, std::string> list = ReadList(dir);
  for (const auto& [name, sum] : list) {
    const std::string path = dir + "/" + name;
    std::error_code error;
    if (!fs::is_regular_file(path, error)) {
      throw ChecksumError(path + " is missing (" + kChecksumsFile +
                          " lists it)");
    }
    if (Sha256OfFile(path) != sum) {
      throw ChecksumError(path +
                          " is not the file that was written: its "
                          "SHA-256 differs from the one in " +
                          kChecksumsFile);
    }
  }
  for (const std::string& name : ListedFiles(dir)) {
    if (list.count(name) == 0) {
      throw ChecksumError(dir + "/" + name + " is not in " + kChecksumsFile +
                          " (a file added since it was written)");
    }
  }
}

}  // namespace ringlab::io
