#include "io/checksums.h"

#include <nettle/base16.h>
#include <nettle/sha2.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/regular_file.h"

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
  const RegularFile file(path);
  if (file.refusal() != RegularFile::Refusal::kNone) {
    throw ChecksumError(path + ": " + file.Why() +
                        ": the checkpoint carries no checksums");
  }
  // A list of a checkpoint's few files is far below this; more is no list.
  std::string text, error;
  if (!file.ReadAt(0, 1u << 20, &text, &error)) {
    throw ChecksumError(path + ": read error: " + error);
  }
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
  const RegularFile file(path);
  if (file.refusal() != RegularFile::Refusal::kNone) {
    throw ChecksumError(path + ": cannot read: " + file.Why());
  }
  sha256_ctx ctx;
  sha256_init(&ctx);
  constexpr uint64_t kChunk = 1 << 20;
  std::string chunk, error;
  for (uint64_t offset = 0;; offset += chunk.size()) {
    if (!file.ReadAt(offset, kChunk, &chunk, &error)) {
      throw ChecksumError(path + ": read error: " + error);
    }
    if (chunk.empty()) break;
    sha256_update(&ctx, chunk.size(),
                  reinterpret_cast<const uint8_t*>(chunk.data()));
  }
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
