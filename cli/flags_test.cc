// The command-line contract every binary shares: good flags in all of
// gflags' spellings are set; anything else exits 2 with one "error:" line;
// pass-through arguments come back untouched; --help exits 0.
#include "cli/flags.h"

#include <gflags/gflags.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

DEFINE_int32(count, 1, "a number");
DEFINE_double(rate, 0.5, "a real number");
DEFINE_string(name, "x", "a string");
DEFINE_bool(loud, false, "a boolean");

namespace ringlab::cli {
namespace {

// argv from words (argv[0] first), kept alive for the parser.
class Args {
 public:
  explicit Args(std::vector<std::string> words) : words_(std::move(words)) {
    for (std::string& w : words_) argv_.push_back(w.data());
  }
  int argc() { return static_cast<int>(argv_.size()); }
  char** argv() { return argv_.data(); }

 private:
  std::vector<std::string> words_;
  std::vector<char*> argv_;
};

std::vector<char*> Parse(std::vector<std::string> words,
                         const std::vector<std::string>& pass = {}) {
  static std::vector<Args> kept;  // the returned pointers point into these
  kept.emplace_back(std::move(words));
  return ParseFlagsOrExit(kept.back().argc(), kept.back().argv(), "usage",
                          {"cli/"}, pass);
}

class FlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FLAGS_count = 1;
    FLAGS_rate = 0.5;
    FLAGS_name = "x";
    FLAGS_loud = false;
  }
};

TEST_F(FlagsTest, SetsFlagsInEverySpelling) {
  const auto rest =
      Parse({"bin", "--count=3", "-rate", "2.5", "--name", "y z", "--loud"});
  EXPECT_EQ(rest.size(), 1u);
  EXPECT_EQ(FLAGS_count, 3);
  EXPECT_EQ(FLAGS_rate, 2.5);
  EXPECT_EQ(FLAGS_name, "y z");
  EXPECT_TRUE(FLAGS_loud);
  Parse({"bin", "--noloud", "--name="});
  EXPECT_FALSE(FLAGS_loud);
  EXPECT_EQ(FLAGS_name, "");
}

TEST_F(FlagsTest, PassThroughArgumentsComeBackInOrder) {
  const auto rest = Parse(
      {"bin", "--benchmark_filter=a", "--count=2", "--benchmark_out=f.json"},
      {"--benchmark_"});
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(std::string(rest[0]), "bin");
  EXPECT_EQ(std::string(rest[1]), "--benchmark_filter=a");
  EXPECT_EQ(std::string(rest[2]), "--benchmark_out=f.json");
  EXPECT_EQ(FLAGS_count, 2);
}

using FlagsDeathTest = FlagsTest;

TEST_F(FlagsDeathTest, BadInputExitsTwoWithOneErrorLine) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"bin", "--nope=1"}, "^error: unknown flag --nope \\(see --help\\)\n$"},
      {{"bin", "--count=abc"},
       "^error: invalid value 'abc' for --count \\(expected int32\\)\n$"},
      {{"bin", "--rate=1x"}, "^error: invalid value '1x' for --rate"},
      {{"bin", "stray"}, "^error: unexpected argument 'stray'"},
      {{"bin", "--count"}, "^error: flag --count needs a value\n$"},
      {{"bin", "--flagfile=/etc/passwd"},
       "^error: --flagfile is not supported"},
      {{"bin", "--benchmark_filter=a"},
       "^error: unknown flag --benchmark_filter"},
      {{"bin", "--noname"}, "^error: unknown flag --noname"},
  };
  for (const auto& [words, message] : cases) {
    EXPECT_EXIT(Parse(words), ::testing::ExitedWithCode(2), message)
        << words[1];
  }
}

TEST_F(FlagsDeathTest, HelpPrintsUsageAndExitsZero) {
  for (const char* help : {"--help", "-h", "--helpfull"}) {
    EXPECT_EXIT(
        {
          Parse({"bin", help});
          std::exit(1);
        },
        ::testing::ExitedWithCode(0), "")
        << help;
  }
}

// Sets BUILD_WORKING_DIRECTORY for a test; the process's directory and the
// variable are restored however the test ends.
class TypedIn {
 public:
  explicit TypedIn(const char* dir) {
    if (getcwd(before_, sizeof(before_)) == nullptr) before_[0] = '\0';
    setenv("BUILD_WORKING_DIRECTORY", dir, 1);
  }
  ~TypedIn() {
    unsetenv("BUILD_WORKING_DIRECTORY");
    if (before_[0] != '\0' && chdir(before_) != 0) abort();
  }

 private:
  char before_[PATH_MAX];
};

// Under `bazel run` (BUILD_WORKING_DIRECTORY set) a relative path means the
// directory the command was typed in, not the runfiles tree it started in.
TEST_F(FlagsTest, BazelRunWorksWhereTheCommandWasTyped) {
  char after[PATH_MAX], typed_in[PATH_MAX];
  ASSERT_NE(realpath(::testing::TempDir().c_str(), typed_in), nullptr);
  TypedIn guard(typed_in);
  Parse({"bin"});
  ASSERT_NE(getcwd(after, sizeof(after)), nullptr);
  EXPECT_EQ(std::string(after), std::string(typed_in));
}

TEST_F(FlagsDeathTest, AnUnenterableTypedInDirectoryIsOneErrorLine) {
  EXPECT_EXIT(
      {
        TypedIn guard("/nonexistent/dir");
        Parse({"bin"});
      },
      ::testing::ExitedWithCode(2),
      "^error: BUILD_WORKING_DIRECTORY=/nonexistent/dir cannot be entered\n$");
}

TEST(UsageErrorDeathTest, PrintsOneLineAndExitsTwo) {
  EXPECT_EXIT(ExitWithUsageError("bad thing"), ::testing::ExitedWithCode(2),
              "^error: bad thing\n$");
}

}  // namespace
}  // namespace ringlab::cli
