// Directories made and made durable: mkdir -p that says why it failed, and an
// fsync of a directory so that the entries created, renamed or removed in it
// survive a crash (what checkpoints and atomic directory swaps need).
#ifndef RINGLAB_IO_DIRS_H_
#define RINGLAB_IO_DIRS_H_

#include <string>

namespace ringlab::io {

// mkdir -p; throws std::invalid_argument("cannot create directory ...").
void MakeDirs(const std::string& path);

// Throws std::runtime_error("cannot fsync directory ...").
void FsyncDirectory(const std::string& path);

}  // namespace ringlab::io

#endif  // RINGLAB_IO_DIRS_H_
