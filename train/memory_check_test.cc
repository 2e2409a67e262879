// The launcher's memory check: what a rank certainly needs, what the
// machine or its cgroup has, and the refusal that names both.
#include "train/memory_check.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "gtest/gtest.h"
#include "io/test_dirs.h"

namespace ringlab::train {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(MemoryCheckTest, CountsParametersActivationsAndData) {
  const nn::MlpLayout layout({784, 1024, 10});
  const MemoryNeed need = EstimateMemory(layout, 64, 60000);
  EXPECT_EQ(need.model, 3u * layout.num_params() * 4);
  EXPECT_EQ(need.activations, 2u * 64 * (784 + 1024 + 10) * 4);
  EXPECT_EQ(need.data, 60000u * (784 * 4 + 8));
  EXPECT_EQ(need.per_rank(), need.model + need.activations + need.data);
  // A batch larger than the data set is the data set.
  EXPECT_EQ(EstimateMemory(layout, 1'000'000'000, 100).activations,
            2u * 100 * (784 + 1024 + 10) * 4);
}

// A model of 300 million hidden units: 200 GB a rank, most of it a batch's
// activations.
TEST(MemoryCheckTest, AModelThatCannotFitIsRefusedNamingBothFigures) {
  const MemoryNeed need =
      EstimateMemory(nn::MlpLayout::Parse("10,300000000,2"), 64, 100);
  try {
    CheckMemoryFits(need, 2, uint64_t{24} << 30);
    ADD_FAILURE() << "fits";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the job needs at least 401 GB of memory (2 rank(s) x "
                        "200 GB"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("but 26 GB is available"), std::string::npos) << what;
  }
  CheckMemoryFits(EstimateMemory(nn::MlpLayout({10, 5, 2}), 64, 100), 2,
                  uint64_t{1} << 30);
}

TEST(MemoryCheckTest, TheCgroupsLimitWinsWhereItIsTighter) {
  const std::string root = io::FreshTestDir("memory_root");
  Write(root + "/proc/meminfo",
        "MemTotal: 25000000 kB\nMemAvailable: 20000000 kB\n");
  Write(root + "/proc/self/cgroup", "0::/job\n");
  EXPECT_EQ(AvailableMemory(root), std::optional<uint64_t>(20000000ull * 1024));
  Write(root + "/sys/fs/cgroup/job/memory.max", "max\n");
  EXPECT_EQ(AvailableMemory(root), std::optional<uint64_t>(20000000ull * 1024));
  Write(root + "/sys/fs/cgroup/job/memory.max", "1000000000\n");
  Write(root + "/sys/fs/cgroup/job/memory.current", "400000000\n");
  EXPECT_EQ(AvailableMemory(root), std::optional<uint64_t>(600000000));
  EXPECT_FALSE(AvailableMemory(root + "/nothing").has_value());
  EXPECT_TRUE(AvailableMemory().has_value());  // this machine's
}

TEST(MemoryCheckTest, BytesAreWrittenShort) {
  EXPECT_EQ(Bytes(999), "999 B");
  EXPECT_EQ(Bytes(1500), "1.5 KB");
  EXPECT_EQ(Bytes(300000000), "300 MB");
  EXPECT_EQ(Bytes(uint64_t{24} << 30), "26 GB");
}

}  // namespace
}  // namespace ringlab::train
