// One job per directory: an exclusive lock on a directory (flock(2) on a
// file in it, <dir>/.ringlab.lock, which names the holder's pid) held for as
// long as the object lives, so that a second job given the same --out_dir is
// refused before it touches anything instead of pruning the first one's
// checkpoints. The holder removes the file as it lets go, so a directory is
// left as it was found; the kernel releases the lock when the holder exits
// however it exits, so a crashed job never leaves a directory locked (only
// the file, which the next holder takes over).
#ifndef RINGLAB_IO_DIR_LOCK_H_
#define RINGLAB_IO_DIR_LOCK_H_

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ringlab::io {

// The directory is another live process's.
class DirectoryInUse : public std::runtime_error {
 public:
  DirectoryInUse(const std::string& what, int64_t holder)
      : std::runtime_error(what), holder_(holder) {}
  int64_t holder() const { return holder_; }  // its pid, 0 when unknown

 private:
  int64_t holder_;
};

class DirectoryLock {
 public:
  // Locks `dir` (which must exist) without waiting. Throws DirectoryInUse
  // ("<dir> is in use by pid P") when another process holds it, and
  // std::invalid_argument when the lock file cannot be made.
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&&) = delete;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  static constexpr char kFileName[] = ".ringlab.lock";

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace ringlab::io

#endif  // RINGLAB_IO_DIR_LOCK_H_
