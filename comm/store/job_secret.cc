#include "comm/store/job_secret.h"

#include <errno.h>
#include <sys/random.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "comm/communicator.h"

namespace ringlab::comm {
namespace {

// SHA-256 (FIPS 180-4), plain computation: no locks, no global state.
class Sha256 {
 public:
  void Update(const unsigned char* data, size_t n) {
    length_ += n;
    while (n > 0) {
      const size_t take = std::min(n, block_.size() - used_);
      std::memcpy(block_.data() + used_, data, take);
      used_ += take;
      data += take;
      n -= take;
      if (used_ == block_.size()) {
        Compress();
        used_ = 0;
      }
    }
  }
  void Update(const std::string& s) {
    Update(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  }

  std::string Finish() {
    const uint64_t bits = length_ * 8;
    const unsigned char one = 0x80, zero = 0;
    Update(&one, 1);
    while (used_ != 56) Update(&zero, 1);
    unsigned char tail[8];
    for (int i = 0; i < 8; ++i)
      tail[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    Update(tail, 8);
    std::string digest(32, '\0');
    for (int i = 0; i < 8; ++i) {
      for (int b = 0; b < 4; ++b) {
        digest[4 * i + b] = static_cast<char>(state_[i] >> (24 - 8 * b));
      }
    }
    return digest;
  }

 private:
  static uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void Compress() {
    static constexpr uint32_t kK[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
        0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
        0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
        0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
        0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = static_cast<uint32_t>(block_[4 * i]) << 24 |
             static_cast<uint32_t>(block_[4 * i + 1]) << 16 |
             static_cast<uint32_t>(block_[4 * i + 2]) << 8 | block_[4 * i + 3];
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 =
          Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 =
          Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) +
                          ((e & f) ^ (~e & g)) + kK[i] + w[i];
      const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) +
                          ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    const uint32_t out[8] = {a, b, c, d, e, f, g, h};
    for (int i = 0; i < 8; ++i) state_[i] += out[i];
  }

  std::array<uint32_t, 8> state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                    0xa54ff53a, 0x510e527f, 0x9b05688c,
                                    0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  size_t used_ = 0;
  uint64_t length_ = 0;
};

}  // namespace

std::string Sha256Digest(const std::string& message) {
  Sha256 sha;
  sha.Update(message);
  return sha.Finish();
}

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
  // RFC 2104, with SHA-256's 64-byte block.
  std::string block = key.size() > 64 ? Sha256Digest(key) : key;
  block.resize(64, '\0');
  std::string inner_pad(64, '\0'), outer_pad(64, '\0');
  for (size_t i = 0; i < 64; ++i) {
    inner_pad[i] = static_cast<char>(block[i] ^ 0x36);
    outer_pad[i] = static_cast<char>(block[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.Update(inner_pad);
  inner.Update(message);
  Sha256 outer;
  outer.Update(outer_pad);
  outer.Update(inner.Finish());
  return outer.Finish();
}

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  // Every byte is looked at, whatever differs first; volatile keeps the
  // compiler from stopping early.
  volatile unsigned char differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    differ = differ | static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return differ == 0;
}

std::string JobTag(const std::string& job_secret, const std::string& purpose) {
  if (job_secret.size() < kJobSecretBytes) {
    throw std::invalid_argument("JobTag: the job has no secret");
  }
  return HmacSha256(job_secret, "ringlab job tag\n" + purpose);
}

}  // namespace ringlab::comm
