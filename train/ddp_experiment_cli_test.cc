// What the Fashion-MNIST experiment relies on, run as a user runs //train:train
// on a small IDX data set written here: --dataset=fashion_mnist reads it (and
// refuses what does not fit), eval.csv holds the evaluations it was asked for,
// DDP's buckets change no result bit whether or not they overlap backward,
// and --trace writes a Chrome trace whose allreduce bytes are what the ranks
// reported sending.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "train/cli_testing.h"

namespace {

namespace fs = std::filesystem;
using namespace ringlab::train::testing;  // NOLINT: the CLI test helpers

void WriteGzip(const std::string& path, const std::vector<unsigned char>& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())),
            static_cast<int>(b.size()));
  gzclose(f);
}

std::vector<unsigned char> IdxHeader(std::vector<uint32_t> dims) {
  std::vector<unsigned char> b = {0, 0, 0x08,
                                  static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back((d >> s) & 0xff);
  }
  return b;
}

// n 28x28 images whose pixels depend on the label (so there is something to
// learn), in Fashion-MNIST's file names.
void WriteSplit(const std::string& dir, const std::string& kind, uint32_t n) {
  std::vector<unsigned char> images = IdxHeader({n, 28, 28});
  std::vector<unsigned char> labels = IdxHeader({n});
  uint32_t state = 12345 + n;
  for (uint32_t i = 0; i < n; ++i) {
    const unsigned char label = static_cast<unsigned char>((i * 7) % 10);
    labels.push_back(label);
    for (int p = 0; p < 784; ++p) {
      state = state * 1664525u + 1013904223u;
      const bool lit = p / 79 == label;  // a band per class
      images.push_back(
          static_cast<unsigned char>((state >> 24) / 4 + (lit ? 190 : 0)));
    }
  }
  WriteGzip(dir + "/" + kind + "-images-idx3-ubyte.gz", images);
  WriteGzip(dir + "/" + kind + "-labels-idx1-ubyte.gz", labels);
}

const std::string& SmallFashionMnist() {
  static const std::string dir = [] {
    const std::string d = TempDir("small_fashion_mnist");
    WriteSplit(d, "train", 200);
    WriteSplit(d, "t10k", 50);
    return d;
  }();
  return dir;
}

std::string Job(const std::string& out, const std::string& extra = "") {
  return "--dataset=fashion_mnist --data_dir=" + SmallFashionMnist() +
         " --model=784,32,16,10 --epochs=4 --batch_size=16 --lr=0.1 "
         "--set_epoch=true --quiet --out_dir=" +
         out + " " + extra;
}

std::string Bytes(const std::string& path) { return ReadText(path); }

TEST(DdpExperimentCliTest, FashionMnistFlagsRefuseWhatDoesNotFit) {
  const std::string dir = SmallFashionMnist();
  ExpectUsageError(
      RunTrain("--dataset=fashion_mnist --data_dir=" + dir + " --model=10,5,2"),
      "784,...,10");
  ExpectUsageError(RunTrain("--dataset=imagenet"), "--dataset=imagenet");
  ExpectUsageError(RunTrain("--dataset=npy"), "--data_dir");
  ExpectUsageError(RunTrain("--dataset=fashion_mnist --model=784,10 "
                            "--data_dir=/nonexistent"),
                   "/nonexistent");
  const std::string empty = TempDir("empty_fashion");
  ExpectUsageError(RunTrain("--dataset=fashion_mnist --model=784,10 "
                            "--data_dir=" +
                            empty),
                   "train-images-idx3-ubyte");
  ExpectUsageError(RunTrain("--bucket_cap_mb=0"), "--bucket_cap_mb");
  ExpectUsageError(RunTrain("--eval_every=-1"), "--eval_every");
  ExpectUsageError(RunTrain("--trace=/nonexistent/dir/t.json"), "--trace");
  // A directory nobody can make a file in (not even root): the run is
  // refused before it trains, not after (it used to train to the end, then
  // exit 1 with no outputs written).
  ExpectUsageError(RunTrain("--trace=/proc/t.json"), "--trace=/proc/t.json");
}

// A corrupt body only a rank finds, as it reads the images: each of the
// three ranks finds it, and the user reads it once (it used to be three
// "[rank N] error:" lines and "rank 0 exited with status 2").
TEST(DdpExperimentCliTest, ACorruptBodyEveryRankFindsIsOneErrorLine) {
  const std::string dir = TempDir("corrupt_fashion");
  WriteSplit(dir, "t10k", 50);
  std::vector<unsigned char> images = IdxHeader({40, 28, 28});
  images.resize(images.size() + 40 * 784, 7);
  std::vector<unsigned char> labels = IdxHeader({40});
  labels.resize(labels.size() + 40, 3);
  labels.back() = 12;  // not a class
  WriteGzip(dir + "/train-images-idx3-ubyte.gz", images);
  WriteGzip(dir + "/train-labels-idx1-ubyte.gz", labels);
  ExpectUsageError(RunTrain("--dataset=fashion_mnist --model=784,10 --nprocs=3 "
                            "--epochs=1 --data_dir=" +
                            dir),
                   "(and 2 ranks reported the same)");
}

// The same job with overlap on and off, with one bucket per tensor and with
// one bucket for all, over shm_ring and gloo: every loss and every final
// parameter bit equal (2 ranks: a + b is commutative, so any bucketing sums
// the same; overlap only changes when, not what).
TEST(DdpExperimentCliTest, BucketsAndOverlapChangeNoResultBit) {
  std::vector<std::string> runs;
  for (const char* comm : {"shm_ring", "gloo"}) {
    for (const char* extra : {"--overlap=true", "--overlap=false",
                              "--overlap=true --bucket_cap_mb=0.0001",
                              "--overlap=false --bucket_cap_mb=0.0001",
                              "--overlap=true --bucket_cap_mb=1000"}) {
      const std::string out = TempDir("buckets_" + std::to_string(runs.size()));
      const CommandResult run =
          RunTrain(Job(out, std::string("--comm=") + comm + " " + extra));
      ASSERT_EQ(run.status, 0) << comm << " " << extra << "\n" << run.err;
      runs.push_back(out);
    }
  }
  const auto reference_losses = Losses(runs[0]);
  ASSERT_EQ(reference_losses.size(), 2u * 4 * 7);  // 2 ranks, 4 epochs, 7 steps
  for (const std::string& out : runs) {
    EXPECT_EQ(Losses(out), reference_losses) << out;
    for (const char* t : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                          "fc3.weight", "fc3.bias"}) {
      EXPECT_EQ(Bytes(out + "/final/" + t + ".npy"),
                Bytes(runs[0] + "/final/" + t + ".npy"))
          << out << " " << t;
    }
  }
}

// --sync=barrier trains as none, bit for bit, and its ranks meet once a
// step: each rank's wait ends only after the other's began.
TEST(DdpExperimentCliTest, BarrierTrainsAsNoneWithTheRanksMeetingEachStep) {
  const std::string none = TempDir("sync_none");
  const std::string barrier = TempDir("sync_barrier");
  ASSERT_EQ(RunTrain(Job(none, "--sync=none")).status, 0);
  const std::string trace = barrier + "/t.json";
  ASSERT_EQ(RunTrain(Job(barrier, "--sync=barrier --trace=" + trace)).status,
            0);
  EXPECT_EQ(Losses(barrier), Losses(none));
  const nlohmann::json json = nlohmann::json::parse(ReadText(trace));
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> waits;
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("name") != "wait for barrier") continue;
    EXPECT_EQ(e.at("cat"), "exposed_comm");
    const int64_t ts = e.at("ts");
    waits[e.at("pid")].emplace_back(ts, ts + e.at("dur").get<int64_t>());
  }
  ASSERT_EQ(waits[0].size(), 4u * 7);  // 4 epochs of 7 steps
  ASSERT_EQ(waits[1].size(), waits[0].size());
  for (size_t i = 0; i < waits[0].size(); ++i) {
    // Microseconds, truncated: 1 of slack.
    EXPECT_GE(waits[0][i].second + 1, waits[1][i].first) << "step " << i;
    EXPECT_GE(waits[1][i].second + 1, waits[0][i].first) << "step " << i;
  }
}

TEST(DdpExperimentCliTest, EvalCsvEveryNEpochs) {
  const std::string out = TempDir("eval");
  std::ofstream(out + "/eval.csv") << "an earlier run's\n";
  ASSERT_EQ(RunTrain(Job(out, "--eval_every=2")).status, 0);
  std::istringstream lines(ReadText(out + "/eval.csv"));
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "epoch,step,test_loss,test_accuracy,wall_s,bytes_sent");
  std::vector<std::vector<double>> rows;
  while (std::getline(lines, line)) {
    std::vector<double> row;
    std::istringstream fields(line);
    for (std::string f; std::getline(fields, f, ',');)
      row.push_back(std::stod(f));
    ASSERT_EQ(row.size(), 6u) << line;
    rows.push_back(row);
  }
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][0], 2);   // completed epochs
  EXPECT_EQ(rows[0][1], 14);  // 100 samples per rank, batch 16: 7 steps each
  EXPECT_EQ(rows[1][0], 4);
  EXPECT_EQ(rows[1][1], 28);
  for (const auto& row : rows) {
    EXPECT_GT(row[2], 0);
    EXPECT_GE(row[3], 0);
    EXPECT_LE(row[3], 1);
  }
  EXPECT_GT(rows[1][3], 0.5) << "the bands are easy: it learns them";
  EXPECT_GT(rows[1][4], rows[0][4]);  // wall_s grows
  // 14 more steps of allreduce: bytes grow by 14 × 2(N-1)/N × 4 × params.
  const double params = 784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10;
  EXPECT_EQ(rows[1][5] - rows[0][5], 14 * 4 * params);

  ASSERT_EQ(RunTrain(Job(out, "--eval_every=0")).status, 0);
  EXPECT_FALSE(fs::exists(out + "/eval.csv")) << "a stale eval.csv stayed";
}

TEST(DdpExperimentCliTest, TraceShowsEveryPhaseAndTheBytesSent) {
  const std::string out = TempDir("trace");
  const std::string trace = out + "/t.json";
  ASSERT_EQ(
      RunTrain(Job(out, "--trace=" + trace + " --bucket_cap_mb=0.05")).status,
      0);
  const nlohmann::json json = nlohmann::json::parse(ReadText(trace));
  std::map<int, std::set<std::string>> names;
  std::map<int, double> bucket_bytes;
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int pid = e.at("pid");
    std::string name = e.at("name");
    if (name.rfind("allreduce bucket ", 0) == 0) {
      EXPECT_EQ(e.at("tid"), 1);
      bucket_bytes[pid] += e.at("args").at("bytes").get<double>();
      name = "allreduce bucket";
    }
    if (name == "wait for allreduce") {
      EXPECT_EQ(e.at("cat"), "exposed_comm");
    }
    EXPECT_GE(e.at("dur").get<int64_t>(), 0);
    names[pid].insert(name);
  }
  const std::set<std::string> every_rank = {
      "forward",    "backward fc1", "backward fc2",       "backward fc3",
      "load batch", "sgd step",     "wait for allreduce", "allreduce bucket"};
  for (int pid : {0, 1}) {
    for (const std::string& name : every_rank) {
      EXPECT_TRUE(names[pid].count(name)) << "rank " << pid << ": " << name;
    }
  }
  EXPECT_TRUE(names[0].count("evaluation"));
  EXPECT_FALSE(names[1].count("evaluation"));
  // The buckets' bytes are what losses.csv says each rank sent.
  std::map<int, double> reported;
  std::istringstream lines(ReadText(out + "/losses.csv"));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string s; std::getline(fields, s, ',');) f.push_back(s);
    reported[std::stoi(f[0])] += std::stod(f[6]);
  }
  EXPECT_EQ(bucket_bytes, reported);
  EXPECT_GT(bucket_bytes[0], 0);
}

}  // namespace
