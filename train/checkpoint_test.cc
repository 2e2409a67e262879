#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace ringlab::train {
namespace {

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root ? root : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CheckpointTest, RoundTripIsBitwise) {
  const std::string dir = TempDir("roundtrip");
  const nn::MlpLayout layout({3, 2});
  RankCheckpoint saved;
  saved.next_step = 2;
  saved.params = {0.1f, -0.2f, 1e-30f, 3.4e38f, -0.0f, 7.0f, 1.0f / 3, 2.5f};
  saved.history = {{0, 0, 0.693147182f, 1.25f, 0.5f, 188},
                   {0, 1, 0.123456791f, 1.0f, 0.25f, 188}};
  WriteRankCheckpoint(dir, 1, layout, saved);
  EXPECT_FALSE(LatestCheckpoint(dir).has_value());
  MarkLatestCheckpoint(dir, 2);
  ASSERT_EQ(LatestCheckpoint(dir), std::optional<int64_t>(2));

  const RankCheckpoint loaded = ReadRankCheckpoint(dir, 1, layout, 2);
  ASSERT_EQ(loaded.params.size(), saved.params.size());
  EXPECT_EQ(0, std::memcmp(loaded.params.data(), saved.params.data(),
                           saved.params.size() * sizeof(float)));
  ASSERT_EQ(loaded.history.size(), 2u);
  EXPECT_EQ(loaded.history[1].loss, saved.history[1].loss);  // %.9g: exact
  EXPECT_EQ(loaded.history[1].step, 1);
}

TEST(CheckpointTest, MissingRankOrShortHistoryIsAnError) {
  const std::string dir = TempDir("missing");
  const nn::MlpLayout layout({3, 2});
  RankCheckpoint saved;
  saved.next_step = 3;  // but only one record
  saved.params.assign(layout.num_params(), 1.0f);
  saved.history = {{0, 0, 1, 1, 1, 1}};
  WriteRankCheckpoint(dir, 0, layout, saved);
  EXPECT_THROW(ReadRankCheckpoint(dir, 1, layout, 3), std::invalid_argument);
  EXPECT_THROW(ReadRankCheckpoint(dir, 0, layout, 3), std::invalid_argument);
  // Another model's shapes.
  saved.history.resize(3);
  WriteRankCheckpoint(dir, 0, layout, saved);
  EXPECT_THROW(ReadRankCheckpoint(dir, 0, nn::MlpLayout({4, 2}), 3),
               std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::train
