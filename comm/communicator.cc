#include "comm/communicator.h"

#include <algorithm>
#include <map>
#include <mutex>

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
  return factory(context, options);
}

}  // namespace ringlab::comm
