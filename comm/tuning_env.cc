#include "comm/tuning_env.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ringlab::comm {
namespace {

// Digits only: strtoull alone would take "-1" (as 2^64 - 1), " 12" and "0x10".
uint64_t ParseNumber(const char* variable, const char* text) {
  const std::string value(text);
  bool digits = !value.empty();
  for (char c : value)
    digits = digits && std::isdigit(static_cast<unsigned char>(c));
  errno = 0;
  const unsigned long long n = digits ? std::strtoull(text, nullptr, 10) : 0;
  if (!digits || errno == ERANGE) {
    throw std::invalid_argument(std::string(variable) + "='" + value +
                                "' is not a whole number");
  }
  return static_cast<uint64_t>(n);
}

}  // namespace

BackendTuning OverrideTuning(const BackendTuning& base,
                             const EnvironmentLookup& lookup) {
  BackendTuning tuning = base;
  for (const TuningSetting& setting : TuningSettings()) {
    const char* text = lookup(setting.variable.c_str());
    if (text == nullptr || *text == '\0') continue;
    const uint64_t value = ParseNumber(setting.variable.c_str(), text);
    ValidateTuningValue(setting, value);
    tuning.Set(setting.name, value);
  }
  return tuning;
}

BackendTuning TuningFromEnvironment(const EnvironmentLookup& lookup) {
  return OverrideTuning(BackendTuning{}, lookup);
}

BackendTuning TuningFromEnvironment() {
  return TuningFromEnvironment(
      [](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace ringlab::comm
