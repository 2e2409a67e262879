#include "bench/backend_variants.h"

#include <map>
#include <sstream>
#include <stdexcept>

#include "comm/backend.h"
#include "comm/tuning_env.h"

namespace ringlab::bench {
namespace {

// The setting `option` stands for in a spec of `family` (a backend, or the
// settings prefix it shares, e.g. ipc_ring's): the backend's or the
// family's own settings first, then the front's (comm.*); nullptr for none.
const comm::TuningSetting* SettingOf(const std::string& family,
                                     const std::string& option) {
  if (const comm::BackendDescription* backend = comm::FindBackend(family)) {
    for (const comm::TuningSetting& s : backend->tuning) {
      if (s.option == option) return comm::FindTuningSetting(s.name);
    }
  }
  const comm::TuningSetting* front = nullptr;
  for (const comm::TuningSetting& s : comm::TuningSettings()) {
    if (s.option != option) continue;
    if (s.name.rfind(family + ".", 0) == 0) {
      return comm::FindTuningSetting(s.name);
    }
    if (s.name.rfind("comm.", 0) == 0) front = comm::FindTuningSetting(s.name);
  }
  return front;
}

}  // namespace

std::vector<std::string> SplitList(const std::string& s, char separator) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, separator)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

comm::BackendTuning VariantTuning(const std::string& spec,
                                  const comm::BackendTuning& base) {
  const std::vector<std::string> parts = SplitList(spec, ':');
  std::map<std::string, std::string> variables;
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    const comm::TuningSetting* setting =
        eq == std::string::npos
            ? nullptr
            : SettingOf(parts.at(0), parts[i].substr(0, eq));
    if (setting == nullptr) {
      throw std::invalid_argument("unknown backend option '" + parts[i] +
                                  "' in " + spec);
    }
    variables[setting->variable] = parts[i].substr(eq + 1);
  }
  try {
    return comm::OverrideTuning(base, [&](const char* name) -> const char* {
      const auto it = variables.find(name);
      return it == variables.end() ? nullptr : it->second.c_str();
    });
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(spec + ": " + e.what());
  }
}

std::unique_ptr<comm::Communicator> CreateVariant(
    const std::string& spec, const comm::RankContext& context,
    const comm::CommOptions& options) {
  comm::CommOptions variant = options;
  variant.tuning = VariantTuning(spec, options.tuning);
  return comm::CreateCommunicator(SplitList(spec, ':').at(0), context, variant);
}

}  // namespace ringlab::bench
