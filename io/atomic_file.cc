#include "io/atomic_file.h"

#include <errno.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "io/dirs.h"

namespace ringlab::io {

std::string RandomHex() {
  uint64_t bits = 0;
  if (getrandom(&bits, sizeof(bits), 0) != sizeof(bits)) {
    bits = static_cast<uint64_t>(getpid()) * 0x9E3779B97F4A7C15ull;
  }
  char text[20];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(bits));
  return text;
}

void WriteFileAtomically(const std::string& path, const std::string& head,
                         const void* data, size_t size) {
  const std::string temporary = path + ".tmp-" + RandomHex();
  FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    throw std::runtime_error("cannot write " + path + ": cannot create " +
                             temporary + ": " + std::strerror(errno));
  }
  bool ok = std::fwrite(head.data(), 1, head.size(), file) == head.size();
  if (ok && size > 0) ok = std::fwrite(data, 1, size, file) == size;
  ok = ok && std::fflush(file) == 0 && Fsync(fileno(file), temporary);
  int error = ok ? 0 : errno;
  if (std::fclose(file) != 0 && ok) {
    ok = false;
    error = errno;
  }
  if (ok && !RenameFile(temporary, path)) {
    ok = false;
    error = errno;
  }
  if (!ok) {
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot write " + path + ": " +
                             std::strerror(error));
  }
}

}  // namespace ringlab::io
