#include "comm/job_secret.h"

#include <stdexcept>
#include <string>

#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

// RFC 4231, test case 2.
TEST(JobSecretTest, HmacSha256MatchesTheRfc) {
  EXPECT_EQ(JobSecretToHex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
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
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
}

}  // namespace
}  // namespace ringlab::comm
