#include "comm/communicator.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

namespace ringlab::comm {
namespace {

// Function-local statics: backends register during static initialisation of
// other translation units, in an order the linker chooses.
std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, CommunicatorFactory>& Registry() {
  static auto* registry = new std::map<std::string, CommunicatorFactory>;
  return *registry;
}

}  // namespace

float* Communicator::Allocate(size_t count) {
  if (memory() != MemoryKind::kHost) {
    throw CommError(std::string(backend()) +
                    ": Allocate is not supported for device memory");
  }
  allocations_.push_back(std::make_unique<float[]>(std::max<size_t>(count, 1)));
  return allocations_.back().get();
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "unknown";
}

bool RegisterCommunicator(const std::string& name,
                          CommunicatorFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Registry().emplace(name, std::move(factory)).second;
}

std::vector<std::string> RegisteredCommunicators() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<std::string> names;
  for (const auto& [name, factory] : Registry()) names.push_back(name);
  return names;
}

std::string DescribeHosts(const std::vector<std::string>& hosts,
                          size_t* count) {
  // Hosts in order of their lowest rank, each with its ranks.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < hosts.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& h) { return h.first == hosts[r]; });
    if (it == groups.end()) {
      groups.push_back({hosts[r], {}});
      it = groups.end() - 1;
    }
    it->second.push_back(static_cast<int>(r));
  }
  constexpr size_t kRanksNamed = 4;
  std::string where;
  for (const auto& [host, ranks] : groups) {
    where += where.empty() ? "" : "; ";
    where += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size() && i < kRanksNamed; ++i) {
      where += (i == 0 ? "" : ",") + std::to_string(ranks[i]);
    }
    if (ranks.size() > kRanksNamed) {
      where += " and " + std::to_string(ranks.size() - kRanksNamed) + " more";
    }
    where += " on " + host;
  }
  if (count != nullptr) *count = groups.size();
  return where;
}

void RequireOneHost(const RankContext& context, const std::string& backend) {
  size_t count = 0;
  const std::string where = DescribeHosts(context.hosts, &count);
  if (count <= 1) return;
  throw std::invalid_argument(
      backend + " needs every rank on one host, but this job spans " +
      std::to_string(count) + " hosts (" + where +
      "); use a backend that spans hosts: mpi, nccl or gloo");
}

std::unique_ptr<Communicator> CreateCommunicator(const std::string& name,
                                                 const RankContext& context,
                                                 const CommOptions& options) {
  CommunicatorFactory factory;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(name);
    if (it != Registry().end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const std::string& n : RegisteredCommunicators()) {
      known += (known.empty() ? "" : ", ") + n;
    }
    throw std::invalid_argument("unknown communicator '" + name +
                                "' (linked into this binary: " +
                                (known.empty() ? "none" : known) + ")");
  }
  if (context.world_size < 1 || context.rank < 0 ||
      context.rank >= context.world_size) {
    throw std::invalid_argument(
        "CreateCommunicator: rank " + std::to_string(context.rank) +
        " not in [0, world_size=" + std::to_string(context.world_size) + ")");
  }
  // The one place options enter: every backend gets tuning checked alike.
  ValidateTuning(options.tuning);
  return factory(context, options);
}

}  // namespace ringlab::comm
