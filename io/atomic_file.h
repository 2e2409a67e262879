// Writing a file so that readers see the old contents or the new, never a
// mix: the bytes go to a temporary beside it (a random name, so concurrent
// writers never share one), are flushed to disk, and the temporary is renamed
// over the target. Used by the .npy writer and the trainer's outputs.
#ifndef RINGLAB_IO_ATOMIC_FILE_H_
#define RINGLAB_IO_ATOMIC_FILE_H_

#include <cstddef>
#include <string>

namespace ringlab::io {

// 16 random hex digits for temporary names.
std::string RandomHex();

// Writes head, then size bytes of data, to path through path + ".tmp-<hex>".
// Throws std::runtime_error("cannot write <path>: <reason>") and removes the
// temporary when any step fails; an existing file at path is left as it was.
void WriteFileAtomically(const std::string& path, const std::string& head,
                         const void* data = nullptr, size_t size = 0);

}  // namespace ringlab::io

#endif  // RINGLAB_IO_ATOMIC_FILE_H_
