#include "comm/job_secret.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cstring>
#include <stdexcept>

#include "comm/communicator.h"

namespace ringlab::comm {

std::string RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t k = getrandom(bytes.data() + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      throw CommError(std::string("getrandom: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(k);
  }
  return bytes;
}

std::string GenerateJobSecret() { return RandomBytes(kJobSecretBytes); }

std::string JobSecretToHex(const std::string& secret) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * secret.size());
  for (unsigned char c : secret) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

std::string JobSecretFromHex(const std::string& hex, const std::string& where) {
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const bool digits_ok = [&] {
    for (char c : hex) {
      if (value(c) < 0) return false;
    }
    return true;
  }();
  if (!digits_ok || hex.size() % 2 != 0 || hex.size() < 2 * kJobSecretBytes ||
      hex.size() > 8 * kJobSecretBytes) {
    throw std::invalid_argument(
        where +
        " must be 32 to 128 hex digits (128 to 512 random bits, e.g. "
        "from `openssl rand -hex 16`); it has " +
        std::to_string(hex.size()) + " character(s)" +
        (digits_ok ? "" : ", not all hex digits"));
  }
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] =
        static_cast<char>(value(hex[2 * i]) * 16 + value(hex[2 * i + 1]));
  }
  return bytes;
}

std::string HmacSha256(const std::string& key, const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()),
           message.size(), out, &len) == nullptr ||
      len != kHmacBytes) {
    throw CommError("HMAC-SHA256 failed (libcrypto)");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  return a.size() == b.size() &&
         CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string JobTag(const std::string& job_secret, const std::string& purpose) {
  if (job_secret.size() < kJobSecretBytes) {
    throw std::invalid_argument("JobTag: the job has no secret");
  }
  return HmacSha256(job_secret, "ringlab job tag\n" + purpose);
}

}  // namespace ringlab::comm
