// Bytes as hex text and back: every byte value, and what is refused.
#include "comm/store/hex.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

TEST(HexTest, RoundTripsEveryByte) {
  unsigned char bytes[256];
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<unsigned char>(i);
  const std::string hex = ToHex(bytes, sizeof(bytes));
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(hex.size() - 4), "feff");
  unsigned char back[256] = {};
  ASSERT_TRUE(FromHex(hex, back, sizeof(back)));
  EXPECT_EQ(std::string(reinterpret_cast<char*>(back), 256),
            std::string(reinterpret_cast<char*>(bytes), 256));
}

TEST(HexTest, RefusesWrongLengthAndNonDigits) {
  uint32_t value = 0;
  EXPECT_FALSE(FromHex("0102", &value, sizeof(value)));
  EXPECT_FALSE(FromHex("010203040", &value, sizeof(value)));
  EXPECT_FALSE(FromHex("0102030g", &value, sizeof(value)));
  EXPECT_FALSE(FromHex(" 1020304", &value, sizeof(value)));
  EXPECT_TRUE(FromHex("0A0b0C0d", &value, sizeof(value)));
  EXPECT_EQ(ToHex(&value, sizeof(value)), "0a0b0c0d");
}

TEST(HexTest, IsHexAcceptsDigitsOfEitherCase) {
  EXPECT_TRUE(IsHex("0123456789abcdefABCDEF"));
  EXPECT_TRUE(IsHex(""));
  EXPECT_FALSE(IsHex("0x10"));
  EXPECT_FALSE(IsHex("ab cd"));
}

}  // namespace
}  // namespace ringlab::comm
