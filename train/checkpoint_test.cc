#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "io/dirs.h"
#include "io/test_dirs.h"

namespace ringlab::train {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointTest, RoundTripIsBitwise) {
  const std::string dir = io::FreshTestDir("roundtrip");
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

  const RankCheckpoint loaded = ReadRankCheckpoint(dir, 1, layout, 2, "");
  ASSERT_EQ(loaded.params.size(), saved.params.size());
  EXPECT_EQ(0, std::memcmp(loaded.params.data(), saved.params.data(),
                           saved.params.size() * sizeof(float)));
  ASSERT_EQ(loaded.history.size(), 2u);
  EXPECT_EQ(loaded.history[1].loss, saved.history[1].loss);  // %.9g: exact
  EXPECT_EQ(loaded.history[1].step, 1);
}

TEST(CheckpointTest, MissingRankOrShortHistoryIsAnError) {
  const std::string dir = io::FreshTestDir("missing");
  const nn::MlpLayout layout({3, 2});
  RankCheckpoint saved;
  saved.next_step = 3;  // but only one record
  saved.params.assign(layout.num_params(), 1.0f);
  saved.history = {{0, 0, 1, 1, 1, 1}};
  WriteRankCheckpoint(dir, 0, layout, saved);
  EXPECT_THROW(ReadRankCheckpoint(dir, 1, layout, 3, ""),
               std::invalid_argument);
  EXPECT_THROW(ReadRankCheckpoint(dir, 0, layout, 3, ""),
               std::invalid_argument);
  // Another model's shapes.
  saved.history.resize(3);
  WriteRankCheckpoint(dir, 0, layout, saved);
  EXPECT_THROW(ReadRankCheckpoint(dir, 0, nn::MlpLayout({4, 2}), 3, ""),
               std::invalid_argument);
}

RankCheckpoint Part(const nn::MlpLayout& layout, int64_t next_step) {
  RankCheckpoint part;
  part.next_step = next_step;
  part.params.assign(layout.num_params(), 0.5f);
  part.history.resize(next_step);
  return part;
}

// Rank 0 prunes after moving latest to N while another rank, with no
// collective in between, already writes N + 1 (param_avg, none): what is
// being written survives, only steps before N go.
TEST(CheckpointTest, PruningKeepsTheStepsBeingWritten) {
  const std::string dir = io::FreshTestDir("prune");
  const nn::MlpLayout layout({3, 2});
  for (int rank = 0; rank < 2; ++rank) {
    WriteRankCheckpoint(dir, rank, layout, Part(layout, 1));
    WriteRankCheckpoint(dir, rank, layout, Part(layout, 2));
  }
  MarkLatestCheckpoint(dir, 1);
  // Rank 1 is ahead: its part of step 3 is in place, and a temporary
  // directory of a part being written is there too; at the top, a
  // temporary that a crashed write of rank 0's left.
  WriteRankCheckpoint(dir, 1, layout, Part(layout, 3));
  fs::create_directories(dir + "/step_00000003/rank1.tmp-0123456789abcdef");
  std::ofstream(dir + "/latest.tmp-0123456789abcdef") << "2\n";
  MarkLatestCheckpoint(dir, 2);
  PruneCheckpointsBefore(dir, 2);
  EXPECT_FALSE(fs::exists(dir + "/step_00000001"));
  EXPECT_FALSE(fs::exists(dir + "/latest.tmp-0123456789abcdef"));
  EXPECT_TRUE(fs::exists(dir + "/step_00000002/rank0/fc1.weight.npy"));
  EXPECT_TRUE(fs::exists(dir + "/step_00000002/rank1/fc1.weight.npy"));
  EXPECT_TRUE(fs::exists(dir + "/step_00000003/rank1/fc1.weight.npy"));
  EXPECT_TRUE(fs::exists(dir + "/step_00000003/rank1.tmp-0123456789abcdef"));
  EXPECT_EQ(LatestCheckpoint(dir), std::optional<int64_t>(2));
  EXPECT_EQ(ReadRankCheckpoint(dir, 1, layout, 2, "").next_step, 2);
}

// A resumed run first removes what the crash left beyond the latest
// complete checkpoint: parts of a later step, temporaries of any writer.
TEST(CheckpointTest, ResumingRemovesWhatACrashLeftBeyondTheLatest) {
  namespace fs = std::filesystem;
  const std::string dir = io::FreshTestDir("unfinished");
  const nn::MlpLayout layout({3, 2});
  for (int rank = 0; rank < 2; ++rank) {
    WriteRankCheckpoint(dir, rank, layout, Part(layout, 4));
  }
  MarkLatestCheckpoint(dir, 4);
  WriteRankCheckpoint(dir, 1, layout, Part(layout, 6));  // rank 0 never did
  fs::create_directories(dir + "/step_00000004/rank0.tmp-00000000000000aa");
  fs::create_directories(dir + "/step_00000008/rank1.tmp-00000000000000bb");
  RemoveUnfinishedCheckpoints(dir, 4);
  EXPECT_FALSE(fs::exists(dir + "/step_00000006"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000008"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000004/rank0.tmp-00000000000000aa"));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(ReadRankCheckpoint(dir, rank, layout, 4, "").next_step, 4);
  }
}

TEST(CheckpointTest, AMissingPartIsNamedAsAnIncompleteCheckpoint) {
  const std::string dir = io::FreshTestDir("incomplete");
  const nn::MlpLayout layout({3, 2});
  WriteRankCheckpoint(dir, 0, layout, Part(layout, 5));
  MarkLatestCheckpoint(dir, 5);
  try {
    ReadRankCheckpoint(dir, 1, layout, 5, "");
    ADD_FAILURE() << "read a part that is not there";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "the checkpoint of step 5 in " + dir +
                                         " is incomplete: rank 1's part (" +
                                         dir +
                                         "/step_00000005/rank1) is missing");
  }
}

// A same-size edit of a part's .npy went unnoticed (its header and size
// still fit): every part carries its files' SHA-256, and a changed byte is
// refused naming the file.
TEST(CheckpointTest, ADamagedPartIsRefusedNamingTheFile) {
  const std::string dir = io::FreshTestDir("damaged");
  const nn::MlpLayout layout({3, 2});
  WriteRankCheckpoint(dir, 0, layout, Part(layout, 2));
  MarkLatestCheckpoint(dir, 2);
  const std::string weight = dir + "/step_00000002/rank0/fc1.weight.npy";
  ASSERT_TRUE(std::filesystem::exists(weight));
  {
    std::fstream file(weight, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-1, std::ios::end);
    file.put('\x7f');  // the last float's top byte: the same size
  }
  try {
    ReadRankCheckpoint(dir, 0, layout, 2, "");
    ADD_FAILURE() << "read a damaged part";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(weight + " is not the file that was "
                                                  "written"),
              std::string::npos)
        << e.what();
  }
}

// What a crash may not undo: every file of a part, and the part's directory,
// are fsynced before the rename that makes them the part, and the step's
// directory after it (a skipped fsync went unseen by every test).
TEST(CheckpointTest, EveryFileIsDurableBeforeThePartIsRenamedIntoPlace) {
  const std::string dir = io::FreshTestDir("durable");
  const nn::MlpLayout layout({3, 2});
  std::vector<io::DurabilityEvent> events;
  io::ObserveDurability(
      [&](const io::DurabilityEvent& e) { events.push_back(e); });
  WriteRankCheckpoint(dir, 0, layout, Part(layout, 2));
  io::ObserveDurability({});
  const std::string part = dir + "/step_00000002/rank0";
  auto at = [&](const std::string& call, auto match) {
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].call == call && match(events[i])) return int(i);
    }
    return -1;
  };
  const int publish =
      at("rename", [&](const auto& e) { return e.path == part; });
  ASSERT_GE(publish, 0) << "the part was not renamed into place";
  const std::string temporary = events[publish].from;
  // Each file renamed into the temporary directory was fsynced first.
  int files = 0;
  for (int i = 0; i < publish; ++i) {
    if (events[i].call != "rename") continue;
    ++files;
    const std::string from = events[i].from;
    const int synced =
        at("fsync", [&](const auto& e) { return e.path == from; });
    EXPECT_TRUE(synced >= 0 && synced < i) << from << " renamed unsynced";
  }
  EXPECT_EQ(files, 7);  // 2 tensors, history, next_step, rank, job, sums
  const int dir_synced =
      at("fsync", [&](const auto& e) { return e.path == temporary; });
  EXPECT_TRUE(dir_synced >= 0 && dir_synced < publish)
      << "the part's directory was not fsynced before its rename";
  const int step_synced = at(
      "fsync", [&](const auto& e) { return e.path == dir + "/step_00000002"; });
  EXPECT_GT(step_synced, publish) << "the step's entry was not made durable";
}

// What --resume reads must be this rank's part of this job's checkpoint:
// swapped parts (each rank would continue the other's model), a part of a
// run with another seed, a part reached through a symbolic link were
// resumed from silently.
std::string ReadError(const std::string& dir, int rank,
                      const nn::MlpLayout& layout, int64_t step,
                      const std::string& job) {
  try {
    ReadRankCheckpoint(dir, rank, layout, step, job);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(read)";
}

TEST(CheckpointTest, APartIsReadOnlyByItsOwnRank) {
  const std::string dir = io::FreshTestDir("swapped");
  const nn::MlpLayout layout({3, 2});
  for (int rank = 0; rank < 2; ++rank) {
    WriteRankCheckpoint(dir, rank, layout, Part(layout, 2));
  }
  const std::string step = dir + "/step_00000002";
  fs::rename(step + "/rank0", step + "/aside");
  fs::rename(step + "/rank1", step + "/rank0");
  fs::rename(step + "/aside", step + "/rank1");
  EXPECT_EQ(ReadError(dir, 0, layout, 2, ""),
            step +
                "/rank0 holds rank 1's part, not rank 0's: parts are "
                "never resumed by another rank");
  EXPECT_NE(ReadError(dir, 1, layout, 2, "").find("holds rank 0's part"),
            std::string::npos);
}

TEST(CheckpointTest, APartOfAnotherJobIsRefusedNamingWhatDiffers) {
  const std::string dir = io::FreshTestDir("another_job");
  const nn::MlpLayout layout({3, 2});
  RankCheckpoint part = Part(layout, 2);
  part.job = "--lr=0.01\n--seed=0\n";
  WriteRankCheckpoint(dir, 0, layout, part);
  EXPECT_EQ(ReadRankCheckpoint(dir, 0, layout, 2, part.job).job, part.job);
  EXPECT_EQ(ReadError(dir, 0, layout, 2, "--lr=0.01\n--seed=1\n"),
            dir +
                "/step_00000002/rank0 is another job's part (it has "
                "--seed=0, this run --seed=1)");
  EXPECT_NE(ReadError(dir, 0, layout, 2, "--lr=0.01\n")
                .find("(it has --seed=0, this run nothing)"),
            std::string::npos);
}

TEST(CheckpointTest, APartOrStepThatIsASymbolicLinkIsNotFollowed) {
  const std::string dir = io::FreshTestDir("symlinked");
  const std::string other = io::FreshTestDir("symlinked_other");
  const nn::MlpLayout layout({3, 2});
  WriteRankCheckpoint(other, 0, layout, Part(layout, 2));
  fs::create_directories(dir + "/step_00000002");
  fs::create_directory_symlink(other + "/step_00000002/rank0",
                               dir + "/step_00000002/rank0");
  EXPECT_EQ(ReadError(dir, 0, layout, 2, ""),
            dir +
                "/step_00000002/rank0 is a symbolic link: a checkpoint's "
                "step directories and parts are never followed");
  fs::remove_all(dir + "/step_00000002");
  fs::create_directory_symlink(other + "/step_00000002",
                               dir + "/step_00000002");
  EXPECT_NE(ReadError(dir, 0, layout, 2, "").find("is a symbolic link"),
            std::string::npos);
}

}  // namespace
}  // namespace ringlab::train
