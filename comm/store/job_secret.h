// The per-job secret that admits a process to a job's rendezvous store, and
// the keyed hashes built on it. The launcher draws 128 random bits with
// getrandom(2) and hands them to its ranks in RINGLAB_JOB_SECRET; torchrun-
// style and mpirun launches set that variable themselves. A store connection
// proves knowledge of the secret with HMAC-SHA256 over fresh nonces, so the
// secret itself never crosses the wire; backends derive tags from it
// (JobTag) that a process outside the job cannot forge, e.g. to recognise
// their own shared-memory segment. SHA-256, HMAC and the constant-time
// comparison are Nettle's (Debian's nettle-dev), not OpenSSL's: ranks forked
// without exec (comm/testing's RunRanks, a program that forks its ranks) hash
// while another thread of their parent (the store's server) may have been
// hashing too, and OpenSSL 3 takes global locks on every HMAC that such a
// child can inherit held, and wait on forever; Nettle allocates nothing and
// holds no locks (tcp_store_test forks ranks while a thread hashes).
#ifndef RINGLAB_COMM_STORE_JOB_SECRET_H_
#define RINGLAB_COMM_STORE_JOB_SECRET_H_

#include <cstddef>
#include <string>

namespace ringlab::comm {

// 128 bits: the least a secret may hold, and what GenerateJobSecret draws.
inline constexpr size_t kJobSecretBytes = 16;
inline constexpr size_t kHmacBytes = 32;

// n bytes from getrandom(2). Throws std::runtime_error when the kernel has
// none.
std::string RandomBytes(size_t n);

// A fresh secret (kJobSecretBytes random bytes).
std::string GenerateJobSecret();

// The secret as it travels in RINGLAB_JOB_SECRET: lowercase hex.
std::string JobSecretToHex(const std::string& secret);
// Parses 32 to 128 hex digits (128 to 512 bits) into raw bytes. Throws
// std::invalid_argument naming `where` (e.g. the variable) otherwise, without
// echoing the text: it may be a mistyped secret.
std::string JobSecretFromHex(const std::string& hex, const std::string& where);

// SHA-256(message): 32 bytes (FIPS 180-4).
std::string Sha256Digest(const std::string& message);

// HMAC-SHA256(key, message): kHmacBytes bytes (RFC 2104).
std::string HmacSha256(const std::string& key, const std::string& message);

// Equality that takes the same time wherever the first difference lies;
// false for different lengths.
bool ConstantTimeEqual(const std::string& a, const std::string& b);

// A tag only processes holding the job's secret can compute (kHmacBytes
// bytes): HMAC(secret, "ringlab job tag\n" + purpose). For backends that must
// recognise something of their own job through a channel others can write,
// e.g. `JobTag(context.job_secret, "shm_ring segment " + name)`.
std::string JobTag(const std::string& job_secret, const std::string& purpose);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_STORE_JOB_SECRET_H_
