// Directories made and made durable: mkdir -p that says why it failed, an
// fsync of a directory so that the entries created, renamed or removed in it
// survive a crash (what checkpoints and atomic directory swaps need), and a
// rename. Each fsync and rename ringlab's writers make (these, and
// io/atomic_file.h's) is told to an observer a test may set, so that the
// order durability needs, fsync before the rename that publishes, is seen
// and not assumed.
#ifndef RINGLAB_IO_DIRS_H_
#define RINGLAB_IO_DIRS_H_

#include <functional>
#include <string>

namespace ringlab::io {

// mkdir -p; throws std::invalid_argument("cannot create directory ...").
void MakeDirs(const std::string& path);

// Throws std::runtime_error("cannot fsync directory ...").
void FsyncDirectory(const std::string& path);

// Whether a file can be made in dir, by making one (.ringlab-write-probe)
// and removing it: permissions, a read-only mount, a full inode table all
// answer here, before any work starts, and not when outputs are written.
// "" when it can, else why not (strerror).
std::string WhyNotWritable(const std::string& dir);

// rename(2); throws std::runtime_error("cannot rename <from> to <to>: ...").
void Rename(const std::string& from, const std::string& to);

// The system calls themselves, each told to the observer when it succeeds
// (so that a writer that skips one is seen to): fsync(2) of fd, open on
// path; rename(2). False with errno set when the call fails.
bool Fsync(int fd, const std::string& path);
bool RenameFile(const std::string& from, const std::string& to);

// What a durable write did: "fsync" (of a file or directory; path is it) or
// "rename" (path is the new name, from the old).
struct DurabilityEvent {
  std::string call;
  std::string path;
  std::string from;  // for a rename
};
// Tests only: every later fsync and rename of this process's writers is
// told to `observer` (none: pass {}). Not synchronised: set it while no
// other thread writes.
void ObserveDurability(std::function<void(const DurabilityEvent&)> observer);

}  // namespace ringlab::io

#endif  // RINGLAB_IO_DIRS_H_
