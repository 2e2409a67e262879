#include "comm/backend.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace ringlab::comm {
namespace {

// Function-local statics: backends register during static initialisation of
// other translation units, in an order the linker chooses. Descriptions are
// never removed, so pointers to them stay valid.
std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, std::unique_ptr<BackendDescription>>& Registry() {
  static auto* registry =
      new std::map<std::string, std::unique_ptr<BackendDescription>>;
  return *registry;
}

std::string Requirements(const BackendDescription& d) {
  std::string text =
      d.memory == MemoryKind::kDevice ? "GPU memory" : "host memory";
  text += d.spans_hosts ? ", spans hosts" : ", one host";
  if (d.launch == RankLaunch::kThreads) text += ", ranks as threads";
  if (d.launch == RankLaunch::kMpirun) text += ", ranks from mpirun";
  if (d.one_device_per_rank) text += ", one GPU per rank";
  return text;
}

}  // namespace

void Backend::ReduceScatter(const void*, void*, size_t, DataType, ReduceOp) {
  throw std::logic_error(
      "a backend whose description lists reduce_scatter must implement it");
}

void* Backend::AllocateRegistered(size_t) { return nullptr; }

bool Backend::MovesDataOnlyInsideCalls() const { return false; }

void Backend::Progress() {}

void Backend::MaxOverRanks(int64_t*, size_t) {
  throw std::logic_error(
      "a backend that does not check calls must implement MaxOverRanks");
}

bool BackendDescription::Supports(ReduceOp op) const {
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

bool BackendDescription::Supports(DataType type) const {
  return std::find(types.begin(), types.end(), type) != types.end();
}

bool RegisterBackend(BackendDescription description) {
  if (description.name.empty() || !description.create) {
    throw std::logic_error(
        "RegisterBackend: a backend needs a name and a "
        "factory");
  }
  std::lock_guard<std::mutex> lock(RegistryMutex());
  const std::string name = description.name;
  auto owned = std::make_unique<BackendDescription>(std::move(description));
  if (!Registry().emplace(name, std::move(owned)).second) {
    throw std::logic_error("RegisterBackend: '" + name + "' registered twice");
  }
  return true;
}

std::vector<const BackendDescription*> RegisteredBackends() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<const BackendDescription*> all;
  for (const auto& [name, description] : Registry()) {
    all.push_back(description.get());
  }
  return all;
}

std::vector<std::string> RegisteredBackendNames() {
  std::vector<std::string> names;
  for (const BackendDescription* d : RegisteredBackends()) {
    names.push_back(d->name);
  }
  return names;
}

const BackendDescription* FindBackend(const std::string& name) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  const auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : it->second.get();
}

const BackendDescription& BackendNamed(const std::string& name) {
  if (const BackendDescription* d = FindBackend(name)) return *d;
  std::string known;
  for (const std::string& n : RegisteredBackendNames()) {
    known += (known.empty() ? "" : ", ") + n;
  }
  throw std::invalid_argument(
      "unknown communicator '" + name +
      "' (linked into this binary: " + (known.empty() ? "none" : known) + ")");
}

std::string DescribeBackends() {
  std::string text;
  for (const BackendDescription* d : RegisteredBackends()) {
    text +=
        "  " + d->name + ": " + d->summary + " (" + Requirements(*d) + ")\n";
    for (const TuningSetting& s : d->tuning) {
      text += "      " + s.variable + " [" + std::to_string(s.min) + ", " +
              std::to_string(s.max) + "]" +
              (s.fallback ? ", default " + std::to_string(*s.fallback) : "") +
              ": " + s.help + "\n";
    }
  }
  const TuningSetting& check = CheckCallsSetting();
  text += "  every backend that cannot check calls itself:\n      " +
          check.variable + " [0, 1], default 1: " + check.help + "\n";
  return text;
}

}  // namespace ringlab::comm
