#include "comm/store/hex.h"

#include <nettle/base16.h>

#include <cstdint>

namespace ringlab::comm {

bool IsHex(const std::string& text) {
  return text.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
}

std::string ToHex(const void* data, size_t size) {
  std::string out(BASE16_ENCODE_LENGTH(size), '\0');
  base16_encode_update(out.data(), size, static_cast<const uint8_t*>(data));
  return out;
}

bool FromHex(const std::string& hex, void* data, size_t size) {
  // Nettle's decoder skips white space; a handle must be digits only.
  if (hex.size() != 2 * size || !IsHex(hex)) return false;
  base16_decode_ctx ctx;
  base16_decode_init(&ctx);
  size_t written = size;
  return base16_decode_update(&ctx, &written, static_cast<uint8_t*>(data),
                              hex.size(), hex.data()) == 1 &&
         base16_decode_final(&ctx) == 1 && written == size;
}

}  // namespace ringlab::comm
