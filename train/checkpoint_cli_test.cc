// Checkpoints as a user meets them, with real processes: under every
// synchroniser, whatever the checkpoint period, a run goes to its end and
// leaves one complete checkpoint; a rank killed at any point, then --resume,
// ends exactly (bitwise) where the uninterrupted run ends; and --resume
// refuses a checkpoint that lacks a rank's part.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "train/cli_testing.h"

namespace {

namespace fs = std::filesystem;
using namespace ringlab::train::testing;  // NOLINT: the CLI test helpers

// diloco's outer steps (every 5th step) fall between checkpoints (every 1,
// 2, 3 or 5): a resumed run needs its outer parameters and momentum;
// powersgd's errors, Q matrices, step and seed generator likewise; SGD with
// momentum its buffers.
const char* const kSyncs[] = {
    "--sync=allreduce",
    "--sync=allreduce --momentum=0.9 --nesterov --weight_decay=0.001",
    "--sync=diloco --inner_steps=5 --momentum=0.5",
    "--sync=param_avg",
    "--sync=none",
    "--sync=post_local_sgd --avg_warmup=6",
    "--sync=diloco --inner_steps=5",
    "--sync=powersgd --powersgd_start_iter=4",
    "--sync=powersgd --powersgd_start_iter=4 --powersgd_batched"};

// The checkpoints directory holds `latest` = step, that step with every
// rank's part complete, and (when `only`) nothing else.
void ExpectCompleteCheckpoint(const std::string& out, int64_t step, int world,
                              bool only) {
  const std::string dir = out + "/checkpoints";
  EXPECT_EQ(std::atoll(ReadText(dir + "/latest").c_str()), step);
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld",
                static_cast<long long>(step));
  for (int rank = 0; rank < world; ++rank) {
    const std::string part = dir + "/" + name + "/rank" + std::to_string(rank);
    for (const std::string& file :
         {std::string("history.csv"), std::string("next_step")}) {
      EXPECT_TRUE(fs::exists(part + "/" + file)) << part << "/" << file;
    }
    for (const std::string& tensor : kTensors) {
      EXPECT_TRUE(fs::exists(part + "/" + tensor + ".npy")) << part;
    }
  }
  if (!only) return;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    EXPECT_TRUE(n == "latest" || n == "job.txt" || n == name) << n;
  }
  for (const auto& entry : fs::directory_iterator(dir + "/" + name)) {
    const std::string n = entry.path().filename().string();
    EXPECT_TRUE(n.rfind("rank", 0) == 0 && n.find(".tmp-") == n.npos) << n;
  }
}

// Every synchroniser x --checkpoint_every in {1, 2, 3, 5} x --avg_period in
// {1, 4} (for those that average periodically), 50 steps on 2 ranks: each run
// goes to its end, trains exactly what the run without checkpoints trains, and
// leaves its last checkpoint complete. (param_avg with --checkpoint_every=1
// used to fail every time: rank 0 pruned the step rank 1 was already writing.)
TEST(CheckpointCliTest, EverySynchroniserAndPeriodRunsToTheEnd) {
  for (const char* sync : kSyncs) {
    const bool periodic = std::strstr(sync, "param_avg") != nullptr ||
                          std::strstr(sync, "post_local_sgd") != nullptr;
    for (int avg_period : {1, 4}) {
      if (!periodic && avg_period != 4) continue;
      const std::string period =
          periodic ? " --avg_period=" + std::to_string(avg_period) : "";
      const std::string flags =
          std::string("--quiet --timeout=30 --epochs=50 ") + sync + period +
          " --out_dir=";
      const std::string plain = TempDir("plain");
      const CommandResult reference = RunTrain(flags + plain);
      ASSERT_EQ(reference.status, 0) << reference.err;
      const Ending expected = EndingOf(plain);
      ASSERT_EQ(expected.losses.size(), 100u);
      for (int every : {1, 2, 3, 5}) {
        SCOPED_TRACE(std::string(sync) +
                     " --avg_period=" + std::to_string(avg_period) +
                     " --checkpoint_every=" + std::to_string(every));
        const std::string out = TempDir("matrix");
        const CommandResult run = RunTrain(
            flags + out + " --checkpoint_every=" + std::to_string(every));
        ASSERT_EQ(run.status, 0) << run.err;
        EXPECT_EQ(run.err, "");
        ExpectSameEnding(EndingOf(out), expected);
        ExpectCompleteCheckpoint(out, 49 / every * every, 2, /*only=*/true);
      }
    }
  }
}

// Where a trial kills a rank: a point of the trainer's (--fault_point) in a
// step; the checkpoint stages only fire in a checkpoint's step.
struct Fault {
  const char* point;
  int rank;
  int64_t step;
};

std::string Describe(const Fault& f) {
  return std::string("--fault_point=") + f.point +
         " --fault_rank=" + std::to_string(f.rank) +
         " --fault_after_step=" + std::to_string(f.step);
}

// The seed of the random trials: RINGLAB_TEST_SEED to replay a failure.
uint64_t TrialSeed() {
  if (const char* seed = std::getenv("RINGLAB_TEST_SEED")) {
    return std::strtoull(seed, nullptr, 10);
  }
  return std::random_device{}();
}

// 40 steps (4 per epoch), a checkpoint every 3: a rank killed at a random
// point of a random step, then --resume, ends with every loss and every
// rank's final parameters bitwise equal to the uninterrupted run's. After
// the kill, latest always names a complete checkpoint.
TEST(CheckpointCliTest, ARankKilledAnywhereResumesBitwise) {
  const uint64_t seed = TrialSeed();
  SCOPED_TRACE("RINGLAB_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const char* const points[] = {"after_step", "part_written", "part_renamed",
                                "before_latest", "before_prune"};
  for (const char* sync : kSyncs) {
    const std::string flags = std::string(
                                  "--quiet --timeout=30 --epochs=10 "
                                  "--batch_size=16 "
                                  "--checkpoint_every=3 ") +
                              sync + " --out_dir=";
    const std::string plain = TempDir("uninterrupted");
    ASSERT_EQ(RunTrain(flags + plain).status, 0);
    const Ending expected = EndingOf(plain);
    ASSERT_EQ(expected.losses.size(), 80u);
    for (int trial = 0; trial < 6; ++trial) {
      Fault f{points[rng() % 5], static_cast<int>(rng() % 2), 0};
      if (std::string(f.point) == "before_prune") f.rank = 0;  // rank 0's
      // After a first checkpoint (after step 2); in a checkpoint's step
      // for the checkpoint's stages.
      f.step = std::string(f.point) == "after_step"
                   ? static_cast<int64_t>(2 + rng() % 37)
                   : static_cast<int64_t>(3 * (2 + rng() % 12) - 1);
      SCOPED_TRACE(std::string(sync) + " " + Describe(f));
      const std::string out = TempDir("killed");
      const CommandResult killed = RunTrain(flags + out + " " + Describe(f));
      ASSERT_EQ(killed.status, 128 + SIGKILL) << killed.err;
      const int64_t latest =
          std::atoll(ReadText(out + "/checkpoints/latest").c_str());
      EXPECT_GE(latest, 3);
      ExpectCompleteCheckpoint(out, latest, 2, /*only=*/false);
      const CommandResult resumed = RunTrain(flags + out + " --resume");
      ASSERT_EQ(resumed.status, 0) << resumed.err;
      ExpectSameEnding(EndingOf(out), expected);
    }
  }
}

// The same with kill -9 from outside, at a random moment of a longer run of
// ranks started by hand (no launcher stops the survivor: it fails by
// itself). The moment may fall before the first checkpoint (then --resume
// has nothing to resume, and says so) or after the run (nothing to resume).
TEST(CheckpointCliTest, KillNineFromOutsideAtARandomMomentResumesBitwise) {
  const uint64_t seed = TrialSeed();
  SCOPED_TRACE("RINGLAB_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const char* sync : kSyncs) {
    const std::string flags = std::string(
                                  "--quiet --timeout=30 --epochs=60 "
                                  "--batch_size=16 "
                                  "--checkpoint_every=3 ") +
                              sync + " --out_dir=";
    const std::string plain = TempDir("uninterrupted");
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(RunTrain(flags + plain).status, 0);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    const Ending expected = EndingOf(plain);
    const std::string out = TempDir("killed_from_outside");
    const int victim = static_cast<int>(rng() % 2);
    // The fault injected: a moment within the run's length, not a wait for
    // anything (the ranks are children of their `timeout` wrappers).
    const double delay_s =
        static_cast<double>(rng() % std::max<int64_t>(took.count(), 1)) / 1000;
    SCOPED_TRACE(std::string(sync) + ": rank " + std::to_string(victim) +
                 " killed after " + std::to_string(delay_s) + " s");
    ByHand job;
    job.secret_in_env = true;  // rank 0 may die: it publishes no file
    job.args = [&](int) { return flags + out; };
    const std::string pid = "$pid" + std::to_string(victim);
    job.after_start = "sleep " + std::to_string(delay_s) +
                      "; kill -9 $(cat /proc/" + pid + "/task/" + pid +
                      "/children) 2>/dev/null";
    const auto ranks = RunRanksByHand("killed_from_outside", job);
    ASSERT_EQ(ranks.size(), 2u);
    if (ranks[victim].status == 0) {  // it had finished
      ExpectSameEnding(EndingOf(out), expected);
      continue;
    }
    EXPECT_EQ(ranks[victim].status, 128 + SIGKILL) << ranks[victim].err;
    const CommandResult resumed = RunTrain(flags + out + " --resume");
    if (!fs::exists(out + "/checkpoints/latest")) {
      ExpectUsageError(resumed, "--resume: no checkpoint");
      continue;
    }
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    ExpectSameEnding(EndingOf(out), expected);
  }
}

// A fresh run in an out_dir that holds a finished run's checkpoints leaves
// them until its own first checkpoint is complete: if it dies before (here
// at its first step), the previous run can still be resumed, bitwise (the
// reproduction of a fresh run that deleted them first).
TEST(CheckpointCliTest, AFreshRunKeepsThePreviousCheckpointsUntilItsFirst) {
  const std::string flags =
      "--quiet --timeout=30 --epochs=3 --checkpoint_every=2 --out_dir=";
  const std::string plain = TempDir("previous_plain");
  ASSERT_EQ(RunTrain(flags + plain).status, 0);
  const Ending expected = EndingOf(plain);
  const std::string out = TempDir("previous_kept");
  ASSERT_EQ(RunTrain(flags + out).status, 0);
  const CommandResult fresh = RunTrain(
      "--timeout=30 --epochs=3 --lr=0.02 --fault_after_step=0 "
      "--fault_rank=1 --out_dir=" +
      out);
  EXPECT_EQ(fresh.status, 128 + SIGKILL) << fresh.err;
  EXPECT_NE(fresh.out.find("the previous run's checkpoint (step 2) stays in " +
                           out + "/checkpoints (this run takes none)"),
            std::string::npos)
      << fresh.out;
  ExpectCompleteCheckpoint(out, 2, 2, /*only=*/true);
  const CommandResult resumed = RunTrain(flags + out + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  ExpectSameEnding(EndingOf(out), expected);
}

// A fresh run killed once its first checkpoint is complete in the staging
// directory, before it took the previous checkpoints' place: --resume
// resumes the new run (its checkpoint is the newest), bitwise, and the
// previous run's checkpoints are gone only then.
TEST(CheckpointCliTest, AFreshRunKilledBeforeItsFirstPromotionResumes) {
  const std::string previous =
      "--quiet --timeout=30 --epochs=3 --checkpoint_every=2 --out_dir=";
  const std::string flags =
      "--quiet --timeout=30 --epochs=8 --lr=0.02 --checkpoint_every=2 "
      "--out_dir=";
  const std::string plain = TempDir("promote_plain");
  ASSERT_EQ(RunTrain(flags + plain).status, 0);
  const Ending expected = EndingOf(plain);
  const std::string out = TempDir("promote_killed");
  ASSERT_EQ(RunTrain(previous + out).status, 0);
  const CommandResult killed = RunTrain(
      flags + out +
      " --fault_point=before_promote --fault_rank=0 --fault_after_step=1");
  ASSERT_EQ(killed.status, 128 + SIGKILL) << killed.err;
  EXPECT_TRUE(fs::exists(out + "/checkpoints.next/latest"));
  const CommandResult resumed = RunTrain(flags + out + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  ExpectSameEnding(EndingOf(out), expected);
  EXPECT_FALSE(fs::exists(out + "/checkpoints.next"));
  EXPECT_FALSE(fs::exists(out + "/checkpoints.old"));
  ExpectCompleteCheckpoint(out, 6, 2, /*only=*/true);
}

// Two jobs never share an out_dir: while one runs, a second given its
// out_dir is one error line naming the first's pid, exit 2, and changes
// nothing in it; the first goes on running.
TEST(CheckpointCliTest, ASecondJobOnALockedOutDirTouchesNothing) {
  const std::string out = TempDir("locked");
  const pid_t first = StartTrain(
      "--quiet --timeout=30 --epochs=100000000 "
      "--out_dir=" +
      out);
  ASSERT_GT(first, 0);
  // However this test ends, the first job does not outlive it.
  struct Stopper {
    pid_t pid;
    ~Stopper() {
      if (pid > 0 && kill(pid, 0) == 0) {
        kill(pid, SIGTERM);
        WaitForTrain(pid);
      }
    }
  } stopper{first};
  std::string holder;
  for (int i = 0; i < 1000 && holder.find('\n') == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    holder = ReadText(out + "/.ringlab.lock");
  }
  ASSERT_NE(holder.find('\n'), std::string::npos) << "the first took no lock";
  const auto listing = [&] {
    // A file the first job removes while this lists it is not listed.
    std::vector<std::string> entries;
    std::error_code error;
    for (fs::recursive_directory_iterator it(out, error), end; it != end;
         it.increment(error)) {
      const auto time = fs::last_write_time(it->path(), error);
      if (error) continue;
      entries.push_back(it->path().string() + " " +
                        std::to_string(time.time_since_epoch().count()));
    }
    std::sort(entries.begin(), entries.end());
    return entries;
  };
  // After its lock the first job probes its outputs (a file it writes and
  // removes): the snapshot is taken once the directory holds still.
  std::vector<std::string> before = listing();
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::vector<std::string> now = listing();
    const bool probing = fs::exists(out + "/.ringlab-write-probe");
    if (now == before && !probing) break;
    before = now;
  }
  for (const char* second : {"--epochs=1", "--epochs=1 --checkpoint_every=1",
                             "--epochs=1 --resume"}) {
    SCOPED_TRACE(second);
    ExpectUsageError(
        RunTrain(std::string("--quiet ") + second + " --out_dir=" + out, "", 60,
                 {first}),
        "--out_dir " + out + " is in use by another job (pid " +
            holder.substr(0, holder.find('\n')) + " holds " + out +
            "/.ringlab.lock)");
  }
  EXPECT_EQ(listing(), before);
  EXPECT_EQ(kill(first, 0), 0) << "the first job ended";
  stopper.pid = -1;
  kill(first, SIGTERM);
  EXPECT_NE(WaitForTrain(first), 0);
}

TEST(CheckpointCliTest, ResumeRefusesACheckpointMissingARanksPart) {
  const std::string out = TempDir("incomplete");
  const std::string flags =
      "--quiet --epochs=10 --checkpoint_every=4 --out_dir=" + out;
  ASSERT_EQ(RunTrain(flags).status, 0);
  const std::string part = out + "/checkpoints/step_00000008/rank1";
  ASSERT_TRUE(fs::exists(part));
  fs::remove_all(part);
  ExpectUsageError(RunTrain(flags + " --resume"),
                   "--resume: the checkpoint of step 8 in " + out +
                       "/checkpoints is incomplete: rank 1's part (" + part +
                       ") is missing");
  fs::remove_all(out + "/checkpoints/step_00000008");
  ExpectUsageError(RunTrain(flags + " --resume"), "is incomplete: rank 0's");
}

// Every way a checkpoint can be wrong on --resume is one error line and
// exit 2, naming what is wrong (a symlink loop was an uncaught
// filesystem_error, exit 1; "8junk" in latest was read as 8; a same-size
// edit of a part's .npy was resumed from).
TEST(CheckpointCliTest, EveryResumeErrorIsOneLineAndStatusTwo) {
  const std::string out = TempDir("resume_errors");
  const std::string flags =
      "--quiet --epochs=10 --checkpoint_every=4 --out_dir=" + out;
  ASSERT_EQ(RunTrain(flags).status, 0);
  const std::string dir = out + "/checkpoints";
  const std::string weight = dir + "/step_00000008/rank1/fc1.weight.npy";
  const std::string good = ReadText(weight);
  std::string edited = good;
  edited.back() ^= 0x01;  // one bit of the last float
  WriteText(weight, edited);
  ExpectUsageError(RunTrain(flags + " --resume"),
                   weight + " is not the file that was written");
  WriteText(weight, good);
  WriteText(dir + "/latest", "8junk\n");
  ExpectUsageError(RunTrain(flags + " --resume"), "not a step number");
  WriteText(dir + "/latest", "12\n");
  ExpectUsageError(RunTrain(flags + " --resume"), "is incomplete");
  WriteText(dir + "/latest", "8\n");
  // A symlink loop where each file the launcher reads should be.
  for (const std::string name : {"/job.txt", "/step_00000008/rank1",
                                 "/step_00000008/rank0/history.csv"}) {
    SCOPED_TRACE(name);
    const std::string aside = dir + "/aside";
    fs::rename(dir + name, aside);
    fs::create_symlink(fs::path(dir + name).filename(), dir + name);
    const CommandResult run = RunTrain(flags + " --resume");
    ExpectUsageError(run, "--resume: ");
    fs::remove(dir + name);
    fs::rename(aside, dir + name);
  }
  // Untouched again, it resumes.
  EXPECT_EQ(RunTrain(flags + " --resume").status, 0);
}

// A part belongs to its rank and its job: swapped parts, a part of a run
// with another seed and a job.txt edited to fit this run's --lr were
// resumed from silently; a checkpoints directory that is a symbolic link
// to another run's was followed, and written and pruned there.
TEST(CheckpointCliTest, ResumeRefusesAnotherRanksOrAnotherJobsPart) {
  const std::string out = TempDir("bound"), other = TempDir("bound_other");
  const std::string flags = "--quiet --epochs=10 --checkpoint_every=4";
  ASSERT_EQ(RunTrain(flags + " --out_dir=" + out).status, 0);
  ASSERT_EQ(RunTrain(flags + " --seed=1 --out_dir=" + other).status, 0);
  const std::string resume = flags + " --resume --out_dir=" + out;
  const std::string step = out + "/checkpoints/step_00000008";
  fs::rename(step + "/rank0", step + "/aside");
  fs::rename(step + "/rank1", step + "/rank0");
  fs::rename(step + "/aside", step + "/rank1");
  ExpectUsageError(RunTrain(resume),
                   "--resume: " + step + "/rank0 holds rank 1's part");
  fs::rename(step + "/rank0", step + "/aside");
  fs::rename(step + "/rank1", step + "/rank0");
  fs::rename(step + "/aside", step + "/rank1");

  fs::rename(step + "/rank1", step + "/mine");
  fs::copy(other + "/checkpoints/step_00000008/rank1", step + "/rank1");
  ExpectUsageError(RunTrain(resume),
                   step +
                       "/rank1 is another job's part (it has --seed=1, "
                       "this run --seed=0)");
  fs::remove_all(step + "/rank1");
  fs::rename(step + "/mine", step + "/rank1");

  const std::string job = out + "/checkpoints/job.txt", text = ReadText(job);
  const size_t lr = text.find("--lr=");
  ASSERT_NE(lr, std::string::npos) << text;
  const std::string ours = text.substr(lr, text.find('\n', lr) - lr);
  WriteText(job,
            text.substr(0, lr) + "--lr=0.5" + text.substr(text.find('\n', lr)));
  ExpectUsageError(RunTrain(flags + " --lr=0.5 --resume --out_dir=" + out),
                   step + "/rank0 is another job's part (it has " + ours +
                       ", this run --lr=0.5)");
  WriteText(job, text);

  const std::string linked = TempDir("bound_linked");
  fs::create_directory_symlink(other + "/checkpoints", linked + "/checkpoints");
  const std::string before = ReadText(other + "/checkpoints/latest");
  for (const std::string& run : {flags + " --resume", flags}) {
    ExpectUsageError(RunTrain(run + " --seed=1 --out_dir=" + linked),
                     linked + "/checkpoints is a symbolic link");
  }
  EXPECT_EQ(ReadText(other + "/checkpoints/latest"), before);
  EXPECT_TRUE(fs::exists(other + "/checkpoints/step_00000008/rank1"));
  // Put back as it was written, it resumes.
  EXPECT_EQ(RunTrain(resume).status, 0);
}

// Under any launcher the job's rank 0 holds the out_dir: with a pair of
// ranks started by torchrun's variables training on, a second job given
// their out_dir is refused (one line naming the holder, exit 2, nothing in
// the directory changed), whether started by ringlab's launcher or as rank 0
// of torchrun-style, Open MPI or Slurm variables.
TEST(CheckpointCliTest, AJobStartedByTorchrunsVariablesHoldsItsOutDir) {
  const std::string out = TempDir("locked_by_hand"), dir = TempDir("seconds");
  const std::string train =
      std::string(kTrain) + " --quiet --epochs=1 --timeout=5 --out_dir=" + out;
  const std::vector<std::string> seconds = {
      train, "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " + train,
      "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 "
      "OMPI_COMM_WORLD_LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " +
          train,
      "SLURM_PROCID=0 SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 "
      "SLURM_JOB_ID=7 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " +
          train};
  // Once rank 0 has printed its job line (the ranks have agreed, past
  // their probes of the directory), a listing of it before and after the
  // second jobs.
  const std::string ranks = TempDir("locked_by_hand_ranks");
  std::string after_start = "for i in $(seq 1200); do [ -s " + ranks +
                            "/out0 ] && break; sleep 0.05; done; cp " + out +
                            "/.ringlab.lock " + dir + "/holder; find " + out +
                            " -printf '%p %s %T@\\n' | sort >" + dir +
                            "/before; ";
  for (size_t i = 0; i < seconds.size(); ++i) {
    const std::string n = std::to_string(i);
    after_start +=
        "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR "
        "-u MASTER_PORT " +
        seconds[i] + " >/dev/null 2>" + dir + "/err" + n + "; echo $? >" + dir +
        "/status" + n + "; ";
  }
  after_start += "find " + out + " -printf '%p %s %T@\\n' | sort >" + dir +
                 "/after; kill $pid0 $pid1";
  ByHand job;
  job.args = [&](int) {
    return "--timeout=30 --epochs=100000000 --out_dir=" + out;
  };
  job.after_start = after_start;
  RunRanksByHand("locked_by_hand_ranks", job);
  const std::string holder = ReadText(dir + "/holder");
  for (size_t i = 0; i < seconds.size(); ++i) {
    SCOPED_TRACE(seconds[i]);
    const std::string n = std::to_string(i);
    ExpectUsageError({std::atoi(ReadText(dir + "/status" + n).c_str()), "",
                      ReadText(dir + "/err" + n)},
                     "--out_dir " + out + " is in use by another job (pid " +
                         holder.substr(0, holder.find('\n')) + " holds");
  }
  EXPECT_FALSE(ReadText(dir + "/before").empty());
  EXPECT_EQ(ReadText(dir + "/after"), ReadText(dir + "/before"));
}

}  // namespace
