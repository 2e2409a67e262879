// The synchronisers' conformance suite, as comm/conformance is the backends':
// every registered synchroniser (sync/synchronizer.h), at 1, 2 and 3 ranks,
// through the trainer's CLI with real processes, under the options its
// description gives for a short run:
//  - trains bitwise the same when a rank is killed after a checkpoint and
//    the job is resumed (its state() is complete);
//  - trains bitwise the same run to run (deterministic);
//  - the bytes its trace spans report equal those the communicator counted
//    (losses.csv's bytes_sent), so what it says it sends is what it sends;
//  - refuses ranks that disagree on one of its options, on every rank,
//    naming the option.
// A synchroniser registered later runs it without a line written here.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "sync/synchronizer.h"
#include "train/cli_testing.h"

namespace ringlab::train {
namespace {

using namespace ringlab::train::testing;  // NOLINT: the CLI test helpers

struct Case {
  std::string sync;
  int world;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "--sync=" << c.sync << " at " << c.world << " rank(s)";
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const sync::SyncDescription* d : sync::AllSyncs()) {
    for (int world : {1, 2, 3}) cases.push_back({d->name, world});
  }
  return cases;
}

// --sync=S with its short-run options: 40 steps (10 epochs of 4).
std::string Flags(const Case& c) {
  std::string flags =
      "--quiet --timeout=30 --epochs=10 --batch_size=8 "
      "--samples=" +
      std::to_string(32 * c.world) + " --nprocs=" + std::to_string(c.world) +
      " --sync=" + c.sync;
  for (const auto& [name, value] : sync::FindSync(c.sync).short_run) {
    flags += " --" + name + "=" + value;
  }
  return flags;
}

class SyncConformanceTest : public ::testing::TestWithParam<Case> {};

TEST_P(SyncConformanceTest, ResumesBitwiseAfterARankIsKilled) {
  const Case& c = GetParam();
  const std::string plain = TempDir("plain");
  const CommandResult reference = RunTrain(Flags(c) + " --out_dir=" + plain);
  ASSERT_EQ(reference.status, 0) << reference.err;
  const std::string out = TempDir("resumed");
  const std::string flags =
      Flags(c) + " --out_dir=" + out + " --checkpoint_every=3";
  const CommandResult killed = RunTrain(
      flags + " --fault_point=after_step --fault_after_step=22 --fault_rank=" +
      std::to_string(c.world - 1));
  ASSERT_NE(killed.status, 0) << "the fault did not stop the job";
  const CommandResult resumed = RunTrain(flags + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  ExpectSameEnding(EndingOf(out), EndingOf(plain));
}

TEST_P(SyncConformanceTest, IsDeterministicAndSendsWhatItReports) {
  const Case& c = GetParam();
  std::vector<Ending> endings;
  for (int run = 0; run < 2; ++run) {
    const std::string out = TempDir("run" + std::to_string(run));
    const std::string trace = out + "/trace.json";
    const CommandResult r =
        RunTrain(Flags(c) + " --out_dir=" + out + " --trace=" + trace);
    ASSERT_EQ(r.status, 0) << r.err;
    endings.push_back(EndingOf(out));
    if (run > 0) continue;
    // Rank 0's bytes, as its synchroniser's spans report them and as its
    // communicator counted them, over the run.
    uint64_t reported = 0, counted = 0;
    const nlohmann::json timeline = nlohmann::json::parse(ReadText(trace));
    for (const auto& event : timeline["traceEvents"]) {
      if (event.value("pid", -1) == 0 && event.value("tid", -1) == 1 &&
          event.contains("args")) {
        reported += event["args"].value("bytes", uint64_t{0});
      }
    }
    const std::string csv = ReadText(out + "/losses.csv");
    size_t at = csv.find('\n');
    while (at != std::string::npos && at + 1 < csv.size()) {
      const size_t end = csv.find('\n', at + 1);
      const std::string line = csv.substr(at + 1, end - at - 1);
      if (line.rfind("0,", 0) == 0) {
        counted += std::stoull(line.substr(line.rfind(',') + 1));
      }
      at = end;
    }
    EXPECT_EQ(reported, counted) << "rank 0's spans against its communicator";
  }
  ExpectSameEnding(endings[1], endings[0]);
}

// A different valid value of the option: the next integer, half the float,
// the other boolean, another choice.
std::string OtherValue(const sync::OptionSpec& spec) {
  const sync::OptionValues defaults({spec});
  switch (spec.type) {
    case sync::OptionType::kInt: {
      const int64_t v = defaults.Int(spec.name);
      return std::to_string(v < spec.int_max ? v + 1 : v - 1);
    }
    case sync::OptionType::kFloat:
      return std::to_string(defaults.Float(spec.name) * 0.5 +
                            spec.float_min * 0.5 + 0.25);
    case sync::OptionType::kBool:
      return defaults.Bool(spec.name) ? "false" : "true";
    case sync::OptionType::kChoice:
      for (const std::string& choice : spec.choices) {
        if (choice != spec.default_text) return choice;
      }
  }
  return spec.default_text;
}

TEST_P(SyncConformanceTest, RanksThatDisagreeOnAnOptionRefuseToStart) {
  const Case& c = GetParam();
  if (c.world < 2) GTEST_SKIP() << "one rank agrees with itself";
  const sync::SyncDescription& d = sync::FindSync(c.sync);
  const sync::OptionSpec* option = nullptr;
  for (const sync::OptionSpec& spec : d.options) {
    if (spec.type != sync::OptionType::kChoice && option == nullptr) {
      option = &spec;
    }
  }
  if (option == nullptr) GTEST_SKIP() << c.sync << " has no option to differ";
  ByHand job;
  job.world = c.world;
  const std::string other = OtherValue(*option);
  job.args = [&](int rank) {
    return std::string("--quiet --timeout=10 --sync=") + c.sync +
           (rank == 1 ? " --" + option->name + "=" + other : "");
  };
  const auto ranks = RunRanksByHand("disagree", job);
  ASSERT_EQ(static_cast<int>(ranks.size()), c.world);
  for (int rank = 0; rank < c.world; ++rank) {
    EXPECT_EQ(ranks[rank].status, 2)
        << "rank " << rank << ": " << ranks[rank].err;
    EXPECT_NE(ranks[rank].err.find("on --" + option->name), std::string::npos)
        << "rank " << rank << ": " << ranks[rank].err;
  }
}

INSTANTIATE_TEST_SUITE_P(EverySynchronizer, SyncConformanceTest,
                         ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.sync + "_" +
                                  std::to_string(info.param.world) + "_ranks";
                         });

}  // namespace
}  // namespace ringlab::train
