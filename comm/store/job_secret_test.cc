#include "comm/store/job_secret.h"

#include <stdexcept>
#include <string>

#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

// FIPS 180-4's examples, and the padding's edge: 55, 56 and 64 bytes.
TEST(JobSecretTest, Sha256MatchesTheStandard) {
  EXPECT_EQ(JobSecretToHex(Sha256Digest("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(JobSecretToHex(Sha256Digest("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(JobSecretToHex(Sha256Digest(
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(JobSecretToHex(Sha256Digest(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(JobSecretToHex(Sha256Digest(std::string(55, 'a'))),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(JobSecretToHex(Sha256Digest(std::string(56, 'a'))),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(JobSecretToHex(Sha256Digest(std::string(64, 'a'))),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

// RFC 4231's test cases 1, 2 and 6 (a key longer than a block).
TEST(JobSecretTest, HmacSha256MatchesTheRfc) {
  EXPECT_EQ(JobSecretToHex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(JobSecretToHex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(JobSecretToHex(HmacSha256(
                std::string(131, '\xaa'),
                "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(JobSecretTest, FreshSecretsAre128RandomBits) {
  const std::string a = GenerateJobSecret();
  const std::string b = GenerateJobSecret();
  EXPECT_EQ(a.size(), kJobSecretBytes);
  EXPECT_NE(a, b);
  EXPECT_EQ(JobSecretFromHex(JobSecretToHex(a), "x"), a);
}

TEST(JobSecretTest, HexIsCheckedWithoutEchoingIt) {
  const std::string good(32, 'a');
  EXPECT_EQ(JobSecretFromHex(good, "V").size(), 16u);
  EXPECT_EQ(JobSecretFromHex(std::string(128, 'F'), "V").size(), 64u);
  for (const std::string& bad :
       {std::string(30, 'a'), std::string(33, 'a'), std::string(130, 'a'),
        std::string(31, 'a') + "g", std::string("")}) {
    try {
      JobSecretFromHex(bad, "RINGLAB_JOB_SECRET");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("RINGLAB_JOB_SECRET must be", 0), 0u) << what;
      if (!bad.empty()) {
        EXPECT_EQ(what.find(bad), std::string::npos) << what;
      }
    }
  }
}

TEST(JobSecretTest, TagsDependOnSecretAndPurpose) {
  const std::string s1 = GenerateJobSecret(), s2 = GenerateJobSecret();
  EXPECT_EQ(JobTag(s1, "segment a"), JobTag(s1, "segment a"));
  EXPECT_NE(JobTag(s1, "segment a"), JobTag(s1, "segment b"));
  EXPECT_NE(JobTag(s1, "segment a"), JobTag(s2, "segment a"));
  EXPECT_EQ(JobTag(s1, "x").size(), kHmacBytes);
  EXPECT_THROW(JobTag("", "x"), std::invalid_argument);
}

TEST(JobSecretTest, ConstantTimeEqualComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  // Every position counts, the first as the last (a comparison that skipped
  // the first byte passed a test that differed only in the last).
  EXPECT_FALSE(ConstantTimeEqual("xbc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("axc", "abc"));
  const std::string tag(32, '\x5a');
  for (size_t i = 0; i < tag.size(); ++i) {
    std::string other = tag;
    other[i] ^= 0x01;  // one bit
    EXPECT_FALSE(ConstantTimeEqual(tag, other)) << "byte " << i;
  }
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEqual("abcd", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("", "a"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
}

}  // namespace
}  // namespace ringlab::comm
