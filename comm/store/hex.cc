#include "comm/store/hex.h"

namespace ringlab::comm {
namespace {

// 0..15 for a hex digit, -1 for anything else.
int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string ToHex(const void* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

bool FromHex(const std::string& hex, void* data, size_t size) {
  if (hex.size() != 2 * size) return false;
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    const int high = DigitValue(hex[2 * i]), low = DigitValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    p[i] = static_cast<unsigned char>(high << 4 | low);
  }
  return true;
}

}  // namespace ringlab::comm
