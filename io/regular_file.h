// A regular file opened for reading, the one way ringlab's readers of
// untrusted files open them (.npy data, checkpoints' SHA256SUMS): the open
// never blocks (a FIFO is refused, not waited on), what is checked (a
// regular file, its size) is the descriptor that is read, and reads are
// bounded by the caller. Closed when the object goes.
#ifndef RINGLAB_IO_REGULAR_FILE_H_
#define RINGLAB_IO_REGULAR_FILE_H_

#include <cstdint>
#include <string>

namespace ringlab::io {

class RegularFile {
 public:
  // Why a path was not opened.
  enum class Refusal { kNone, kCannotOpen, kDirectory, kNotRegular };

  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  Refusal refusal() const { return refusal_; }
  // "cannot open: <strerror>", "is a directory", "is not a regular file (a
  // pipe, a device or a socket)"; "" when open.
  std::string Why() const;
  uint64_t size() const { return size_; }

  // Up to n bytes from offset, as many as the file has, into *out; false
  // with *error (strerror) on a read error.
  bool ReadAt(uint64_t offset, uint64_t n, std::string* out,
              std::string* error) const;

 private:
  int fd_ = -1;
  Refusal refusal_ = Refusal::kNone;
  int open_errno_ = 0;
  uint64_t size_ = 0;
};

}  // namespace ringlab::io

#endif  // RINGLAB_IO_REGULAR_FILE_H_
