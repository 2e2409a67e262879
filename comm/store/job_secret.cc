#include "comm/store/job_secret.h"

#include <errno.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <sys/random.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "comm/store/hex.h"

namespace ringlab::comm {
namespace {

const uint8_t* Bytes(const std::string& s) {
  return reinterpret_cast<const uint8_t*>(s.data());
}

}  // namespace

std::string Sha256Digest(const std::string& message) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, message.size(), Bytes(message));
  std::string digest(SHA256_DIGEST_SIZE, '\0');
  sha256_digest(&ctx, digest.size(), reinterpret_cast<uint8_t*>(digest.data()));
  return digest;
}

std::string HmacSha256(const std::string& key, const std::string& message) {
  hmac_sha256_ctx ctx;
  hmac_sha256_set_key(&ctx, key.size(), Bytes(key));
  hmac_sha256_update(&ctx, message.size(), Bytes(message));
  std::string mac(SHA256_DIGEST_SIZE, '\0');
  hmac_sha256_digest(&ctx, mac.size(), reinterpret_cast<uint8_t*>(mac.data()));
  return mac;
}

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  return a.size() == b.size() && memeql_sec(a.data(), b.data(), a.size()) != 0;
}

std::string RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t k = getrandom(bytes.data() + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      throw std::runtime_error(std::string("getrandom: ") +
                               std::strerror(errno));
    }
    got += static_cast<size_t>(k);
  }
  return bytes;
}

std::string GenerateJobSecret() { return RandomBytes(kJobSecretBytes); }

std::string JobSecretToHex(const std::string& secret) {
  return ToHex(secret.data(), secret.size());
}

std::string JobSecretFromHex(const std::string& hex, const std::string& where) {
  const bool digits_ok = IsHex(hex);
  std::string bytes(hex.size() / 2, '\0');
  if (!digits_ok || hex.size() % 2 != 0 || hex.size() < 2 * kJobSecretBytes ||
      hex.size() > 8 * kJobSecretBytes ||
      !FromHex(hex, bytes.data(), bytes.size())) {
    throw std::invalid_argument(
        where +
        " must be 32 to 128 hex digits (128 to 512 random bits, e.g. "
        "from `openssl rand -hex 16`); it has " +
        std::to_string(hex.size()) + " character(s)" +
        (digits_ok ? "" : ", not all hex digits"));
  }
  return bytes;
}

std::string JobTag(const std::string& job_secret, const std::string& purpose) {
  if (job_secret.size() < kJobSecretBytes) {
    throw std::invalid_argument("JobTag: the job has no secret");
  }
  return HmacSha256(job_secret, "ringlab job tag\n" + purpose);
}

}  // namespace ringlab::comm
