#include "comm/tuning.h"

#include <set>
#include <stdexcept>

#include "comm/backend.h"

namespace ringlab::comm {

std::optional<uint64_t> BackendTuning::Get(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

uint64_t BackendTuning::GetOr(const TuningSetting& setting) const {
  if (const std::optional<uint64_t> value = Get(setting.name)) return *value;
  if (!setting.fallback) {
    throw std::logic_error(setting.name + " has no fallback: use Get");
  }
  return *setting.fallback;
}

const TuningSetting& CheckCallsSetting() {
  static const auto* setting = new TuningSetting{
      "comm.check_calls",
      "RINGLAB_CHECK_CALLS",
      "check",
      0,
      1,
      1,
      "1: check that every rank makes the same call before each collective "
      "of a backend that cannot tell (one small allreduce); 0: do not"};
  return *setting;
}

std::vector<TuningSetting> TuningSettings() {
  std::vector<TuningSetting> settings = {CheckCallsSetting()};
  std::set<std::string> seen = {CheckCallsSetting().name};
  for (const BackendDescription* backend : RegisteredBackends()) {
    for (const TuningSetting& setting : backend->tuning) {
      if (seen.insert(setting.name).second) settings.push_back(setting);
    }
  }
  return settings;
}

const TuningSetting* FindTuningSetting(const std::string& name) {
  if (name == CheckCallsSetting().name) return &CheckCallsSetting();
  for (const BackendDescription* backend : RegisteredBackends()) {
    for (const TuningSetting& setting : backend->tuning) {
      if (setting.name == name) return &setting;
    }
  }
  return nullptr;
}

void ValidateTuningValue(const TuningSetting& setting, uint64_t value) {
  if (value >= setting.min && value <= setting.max) return;
  throw std::invalid_argument(setting.name + " = " + std::to_string(value) +
                              " is outside [" + std::to_string(setting.min) +
                              ", " + std::to_string(setting.max) + "] (" +
                              setting.variable + ")");
}

void ValidateTuning(const BackendTuning& tuning) {
  for (const auto& [name, value] : tuning.values()) {
    const TuningSetting* setting = FindTuningSetting(name);
    if (setting == nullptr) {
      throw std::invalid_argument("no backend in this binary has a setting " +
                                  name);
    }
    ValidateTuningValue(*setting, value);
  }
}

}  // namespace ringlab::comm
