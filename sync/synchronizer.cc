#include "sync/synchronizer.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringlab::sync {
namespace {

std::map<std::string, SyncDescription>& Registry() {
  static auto* registry = new std::map<std::string, SyncDescription>();
  return *registry;
}

std::string JoinedNames() {
  std::string names;
  for (const auto& [name, description] : Registry()) {
    names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

const OptionSpec* FindOption(const SyncDescription& description,
                             const std::string& name) {
  for (const OptionSpec& spec : description.options) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

}  // namespace

bool RegisterSync(SyncDescription description) {
  for (const OptionSpec& spec : description.options) {
    for (const auto& [name, other] : Registry()) {
      const OptionSpec* same = FindOption(other, spec.name);
      if (same != nullptr && !SameOption(spec, *same)) {
        throw std::logic_error("sync " + description.name + " declares --" +
                               spec.name + " otherwise than " + name);
      }
    }
  }
  const std::string name = description.name;
  if (!Registry().emplace(name, std::move(description)).second) {
    throw std::logic_error("sync " + name + " registered twice");
  }
  return true;
}

std::vector<const SyncDescription*> AllSyncs() {
  std::vector<const SyncDescription*> all;
  for (const auto& [name, description] : Registry()) {
    all.push_back(&description);
  }
  return all;
}

const SyncDescription& FindSync(const std::string& name) {
  const auto it = Registry().find(name);
  if (it == Registry().end()) {
    throw std::invalid_argument("unknown --sync=" + name +
                                " (expected one of " + JoinedNames() + ")");
  }
  return it->second;
}

std::vector<OptionSpec> AllSyncOptions() {
  std::map<std::string, OptionSpec> options;
  for (const auto& [name, description] : Registry()) {
    for (const OptionSpec& spec : description.options) {
      options.emplace(spec.name, spec);
    }
  }
  std::vector<OptionSpec> all;
  for (auto& [name, spec] : options) all.push_back(std::move(spec));
  return all;
}

std::string SyncsWithOption(const std::string& option) {
  std::string names;
  for (const auto& [name, description] : Registry()) {
    if (FindOption(description, option) != nullptr) {
      names += (names.empty() ? "" : ", ") + name;
    }
  }
  return names;
}

OptionValues ParseSyncOptions(const std::string& name,
                              const std::map<std::string, std::string>& given) {
  const SyncDescription& description = FindSync(name);
  OptionValues values(description.options);
  for (const auto& [option, text] : given) {
    if (FindOption(description, option) == nullptr) {
      const std::string owners = SyncsWithOption(option);
      throw std::invalid_argument(
          owners.empty() ? "--sync=" + name + " has no option --" + option
                         : "--" + option + " is an option of " + owners +
                               ", not of --sync=" + name);
    }
    values.Set(option, text);
  }
  if (description.check) description.check(values);
  return values;
}

void CheckSyncModel(const std::string& name, const OptionValues& options,
                    const ParamLayout& layout) {
  const SyncDescription& description = FindSync(name);
  if (description.check_model) description.check_model(options, layout);
}

std::unique_ptr<Synchronizer> CreateSync(const std::string& name,
                                         const SyncContext& context) {
  const SyncDescription& description = FindSync(name);
  if (description.check) description.check(context.options);
  CheckSyncModel(name, context.options, context.model.layout());
  if (description.needs_host_comm &&
      description.needs_host_comm(context.options) &&
      context.host_comm == nullptr) {
    throw std::invalid_argument("--sync=" + name +
                                " with these options needs the host's "
                                "communicator, and the job has none");
  }
  return description.create(context);
}

void BroadcastParams(comm::Communicator& comm, ModelBuffers& model, int root) {
  const size_t count = model.layout().num_params();
  if (SharesMemory(comm, model)) {
    comm.Broadcast(model.params(), count, root);
    return;
  }
  std::vector<float> host(count);
  model.GetParams(host.data());
  comm.Broadcast(host.data(), count, root);
  model.SetParams(host.data());
}

void RequireHostMemory(const comm::Communicator& comm,
                       const std::string& what) {
  if (comm.memory() != comm::MemoryKind::kHost) {
    throw std::invalid_argument(what + " in host memory: --comm=" +
                                comm.backend() + " reduces device memory");
  }
}

}  // namespace ringlab::sync
