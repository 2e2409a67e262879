#include "train/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ringlab::train {
namespace {

// The first number in a file ("max" and unreadable: nothing).
std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

std::optional<uint64_t> MemAvailable(const std::string& root) {
  std::ifstream in(root + "/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

// What this process's cgroup still allows, where it sets a limit.
std::optional<uint64_t> CgroupRoom(const std::string& root) {
  std::ifstream self(root + "/proc/self/cgroup");
  std::string line, v2_path;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
  }
  const std::string v2 = root + "/sys/fs/cgroup" + v2_path;
  auto limit = ReadNumber(v2 + "/memory.max");
  auto usage = ReadNumber(v2 + "/memory.current");
  if (!limit) {  // cgroup v1
    limit = ReadNumber(root + "/sys/fs/cgroup/memory/memory.limit_in_bytes");
    usage = ReadNumber(root + "/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (!limit || *limit >= (uint64_t{1} << 60)) return std::nullopt;
  const uint64_t used = usage.value_or(0);
  return *limit > used ? *limit - used : 0;
}

}  // namespace

MemoryNeed EstimateMemory(const nn::MlpLayout& layout, int64_t batch_size,
                          int64_t dataset_size) {
  MemoryNeed need;
  need.model = 3 * layout.num_params() * uint64_t{sizeof(float)};
  uint64_t widths = 0;
  for (int w : layout.widths()) widths += static_cast<uint64_t>(w);
  // A batch is never larger than the data set (the last one of an epoch
  // holds what is left).
  const int64_t batch =
      std::min(batch_size, std::max<int64_t>(dataset_size, 1));
  need.activations = 2 * static_cast<uint64_t>(batch) * widths * sizeof(float);
  need.data = static_cast<uint64_t>(dataset_size) *
              (static_cast<uint64_t>(layout.in_features()) * sizeof(float) +
               sizeof(int64_t));
  return need;
}

std::optional<uint64_t> AvailableMemory(const std::string& root) {
  std::optional<uint64_t> available = MemAvailable(root);
  if (const auto room = CgroupRoom(root)) {
    available = available ? std::min(*available, *room) : *room;
  }
  return available;
}

std::string Bytes(uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1000 && unit < 4) {
    value /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text),
                value < 10 && unit > 0 ? "%.1f %s" : "%.0f %s", value,
                units[unit]);
  return text;
}

void CheckMemoryFits(const MemoryNeed& need, int ranks, uint64_t available) {
  const uint64_t total = need.per_rank() * static_cast<uint64_t>(ranks);
  if (total <= available) return;
  throw std::invalid_argument(
      "the job needs at least " + Bytes(total) + " of memory (" +
      std::to_string(ranks) + " rank(s) x " + Bytes(need.per_rank()) +
      ": parameters, gradients and their initial copy " + Bytes(need.model) +
      ", activations " + Bytes(need.activations) + ", data set " +
      Bytes(need.data) + "), but " + Bytes(available) +
      " is available; choose a smaller --model, --batch_size or --nprocs");
}

}  // namespace ringlab::train
