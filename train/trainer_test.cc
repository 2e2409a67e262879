// The trainer against PyTorch and against itself, with real processes: two
// ranks over shm_ring, forked by comm's multi-process harness.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "comm/communicator.h"
#include "comm/testing/multi_process.h"
#include "nn/init.h"
#include "nn/npy.h"
#include "nn/torch_rng.h"

namespace ringlab::train {
namespace {

constexpr char kReference[] = "experiments/seed_ddp/reference";
const std::vector<std::string> kTensors = {"fc1.weight", "fc1.bias",
                                           "fc2.weight", "fc2.bias"};

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root ? root : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// The document's run on PyTorch's exported data and initial parameters.
TrainConfig ReferenceConfig(const std::string& out_dir) {
  TrainConfig config;
  config.data_dir = kReference;
  config.init_dir = std::string(kReference) + "/init";
  config.out_dir = out_dir;
  config.quiet = true;
  config.timeout = std::chrono::seconds(10);
  return config;
}

// Runs the config on `world` ranks over shm_ring; `adjust` may change it per
// rank.
std::vector<comm::testing::RankResult> Train(
    int world, const TrainConfig& config,
    std::function<void(int rank, TrainConfig*)> adjust = nullptr) {
  return comm::testing::RunRanks(
      world,
      [&](const comm::RankContext& context) {
        TrainConfig mine = config;
        if (adjust) adjust(context.rank, &mine);
        comm::CommOptions options;
        options.timeout = mine.timeout;
        auto communicator =
            comm::CreateCommunicator("shm_ring", context, options);
        RunRank(mine, *communicator, context.store);
      },
      std::chrono::seconds(60));
}

bool AllSucceeded(const std::vector<comm::testing::RankResult>& results) {
  for (const auto& r : results) {
    if (r.exit_code != 0) return false;
  }
  return true;
}

std::vector<float> Load(const std::string& dir, const std::string& name) {
  return nn::ReadNpyFloat32(dir + "/" + name + ".npy", nullptr);
}

struct LossRow {
  int rank;
  int step;
  double loss;
};

std::vector<LossRow> ReadLosses(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::vector<LossRow> rows;
  while (std::getline(in, line)) {
    LossRow row;
    int epoch;
    if (std::sscanf(line.c_str(), "%d,%d,%d,%lf", &row.rank, &epoch, &row.step,
                    &row.loss) == 4) {
      rows.push_back(row);
    }
  }
  return rows;
}

TEST(TrainerTest, MatchesPyTorchDdpRun) {
  const std::string out = TempDir("pytorch_match");
  const auto results = Train(2, ReferenceConfig(out));
  ASSERT_TRUE(AllSucceeded(results)) << comm::testing::Describe(results);

  // Per-step losses. The linear layers (ordered sums), the 2-rank average and
  // SGD's fused update are bit-exact; softmax/log differ from ATen's
  // vectorised exp/log by an ulp or so, hence 1e-6 relative.
  const auto ours = ReadLosses(out + "/losses.csv");
  const auto theirs = ReadLosses(std::string(kReference) + "/losses.csv");
  ASSERT_EQ(ours.size(), 20u);
  ASSERT_EQ(theirs.size(), 20u);
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i].rank, theirs[i].rank);
    EXPECT_EQ(ours[i].step, theirs[i].step);
    EXPECT_NEAR(ours[i].loss, theirs[i].loss, 1e-6 * std::abs(theirs[i].loss))
        << "rank " << ours[i].rank << " step " << ours[i].step;
  }
  // Final parameters: 10 SGD steps of lr 0.01 on gradients within a few ulp
  // of PyTorch's move parameters by far less than 1e-6 relative.
  for (const std::string& name : kTensors) {
    const auto a = Load(out + "/final", name);
    const auto b = Load(std::string(kReference) + "/final", name);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-6 * std::max(1.0f, std::abs(b[i])))
          << name << "[" << i << "]";
    }
  }
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(TrainerTest, AllReduceKeepsRanksBitwiseEqualAfterEveryStep) {
  // One run per length: after k steps (k = 1..10) every rank's parameters
  // hash the same (summary.json compares all ranks' hashes).
  for (int steps = 1; steps <= 10; ++steps) {
    const std::string out = TempDir("bitwise_" + std::to_string(steps));
    TrainConfig config = ReferenceConfig(out);
    config.epochs = steps;  // one step per epoch
    const auto results = Train(2, config);
    ASSERT_TRUE(AllSucceeded(results)) << comm::testing::Describe(results);
    EXPECT_NE(
        ReadText(out + "/summary.json").find("\"ranks_bitwise_equal\": true"),
        std::string::npos)
        << "after step " << steps - 1;
  }
}

TEST(TrainerTest, ParamAvgWithPeriodOneEqualsAllReduce) {
  const std::string out_allreduce = TempDir("k1_allreduce");
  const std::string out_avg = TempDir("k1_param_avg");
  ASSERT_TRUE(AllSucceeded(Train(2, ReferenceConfig(out_allreduce))));
  TrainConfig config = ReferenceConfig(out_avg);
  config.sync = "param_avg";
  config.sync_options = {1, 0};
  const auto results = Train(2, config);
  ASSERT_TRUE(AllSucceeded(results)) << comm::testing::Describe(results);
  // avg(p - lr g_r) vs p - lr avg(g_r): the same value rounded differently,
  // a few ulp of parameters of magnitude < 1 after 10 steps.
  for (const std::string& name : kTensors) {
    const auto a = Load(out_allreduce + "/final", name);
    const auto b = Load(out_avg + "/final", name);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-6) << name << "[" << i << "]";
    }
  }
}

TEST(TrainerTest, ResumeAfterACrashIsBitwiseEqualToAnUninterruptedRun) {
  const std::string whole = TempDir("uninterrupted");
  const std::string resumed = TempDir("resumed");
  ASSERT_TRUE(AllSucceeded(Train(2, ReferenceConfig(whole))));

  TrainConfig config = ReferenceConfig(resumed);
  config.checkpoint_every = 3;
  config.fault_after_step = 4;  // after the checkpoint at 3 steps
  config.fault_rank = 1;
  config.timeout = std::chrono::seconds(3);
  const auto crashed = Train(2, config);
  EXPECT_EQ(crashed[1].term_signal, SIGKILL);
  EXPECT_NE(crashed[0].exit_code, 0) << "rank 0 must fail, not hang";
  EXPECT_NE(crashed[0].output.find("rank 1"), std::string::npos)
      << "the survivor's error names the missing rank:\n"
      << crashed[0].output;

  config.fault_after_step = -1;
  config.resume = true;
  const auto results = Train(2, config);
  ASSERT_TRUE(AllSucceeded(results)) << comm::testing::Describe(results);
  for (const std::string& name : kTensors) {
    const auto a = Load(whole + "/final", name);
    const auto b = Load(resumed + "/final", name);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
        << name;
  }
  const auto whole_losses = ReadLosses(whole + "/losses.csv");
  const auto resumed_losses = ReadLosses(resumed + "/losses.csv");
  ASSERT_EQ(whole_losses.size(), resumed_losses.size());
  for (size_t i = 0; i < whole_losses.size(); ++i) {
    EXPECT_EQ(whole_losses[i].loss, resumed_losses[i].loss) << "row " << i;
  }
}

TEST(TrainerTest, RanksThatDisagreeFailTogether) {
  TrainConfig config = ReferenceConfig(TempDir("disagree"));
  config.data_dir.clear();
  config.init_dir.clear();
  const auto results = Train(2, config, [](int rank, TrainConfig* c) {
    if (rank == 1) c->lr = 0.02f;
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("rank 1 disagrees with rank 0 on --lr"),
              std::string::npos)
        << r.output;
  }
}

TEST(TrainerTest, BroadcastGivesEveryRankRankZerosParameters) {
  // Different seeds per rank (as the document's unseeded ranks): after DDP's
  // broadcast and zero epochs, both ranks hold rank 0's initial parameters.
  const std::string out = TempDir("broadcast");
  TrainConfig config = ReferenceConfig(out);
  config.data_dir.clear();
  config.init_dir.clear();
  config.epochs = 0;
  config.per_rank_data = true;
  const auto results = Train(2, config);
  ASSERT_TRUE(AllSucceeded(results)) << comm::testing::Describe(results);
  EXPECT_NE(
      ReadText(out + "/summary.json").find("\"ranks_bitwise_equal\": true"),
      std::string::npos);
  // ... and those are rank 0's: torch.manual_seed(0); Net().
  const nn::MlpLayout layout({10, 5, 2});
  std::vector<float> expected(layout.num_params());
  nn::TorchGenerator generator(0);
  nn::InitLikeTorch(layout, generator, expected.data());
  std::vector<float> final_params;
  for (const std::string& name : kTensors) {
    const auto tensor = Load(out + "/final", name);
    final_params.insert(final_params.end(), tensor.begin(), tensor.end());
  }
  EXPECT_EQ(final_params, expected);
}

}  // namespace
}  // namespace ringlab::train
