// SHA-256 checksums of the files in a directory, in the SHA256SUMS file
// sha256sum(1) writes and checks (`cd dir && sha256sum -c SHA256SUMS`), so
// that a part of a checkpoint edited or damaged since it was written (a
// same-size edit, a bit flipped on disk) is refused by name rather than
// resumed from. Hashing is Nettle's.
#ifndef RINGLAB_IO_CHECKSUMS_H_
#define RINGLAB_IO_CHECKSUMS_H_

#include <stdexcept>
#include <string>

namespace ringlab::io {

// The list's name in each directory.
inline constexpr char kChecksumsFile[] = "SHA256SUMS";

// A file whose contents are not those its checksum was taken of, a listed
// file missing, a file not listed, or a list that is not one.
class ChecksumError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The SHA-256 of a regular file's bytes, 64 lowercase hex digits. Throws
// ChecksumError when it cannot be read.
std::string Sha256OfFile(const std::string& path);

// Writes dir/SHA256SUMS (atomically, fsynced) listing every regular file in
// dir but itself; temporaries (".tmp-" names) are not listed.
void WriteChecksums(const std::string& dir);

// Checks dir against its SHA256SUMS: every listed file present and with its
// checksum, every regular file listed. Throws ChecksumError naming the first
// file that fails.
void VerifyChecksums(const std::string& dir);

}  // namespace ringlab::io

#endif  // RINGLAB_IO_CHECKSUMS_H_
