#include "bench/backend_variants.h"

#include <map>
#include <sstream>
#include <stdexcept>

#include "comm/tuning_env.h"

namespace ringlab::bench {
namespace {

// The variable an option stands for, "" for none.
std::string VariableOf(const std::string& key) {
  return key == "oneshot"  ? "RINGLAB_SHM_ONESHOT_BYTES"
         : key == "chunk"  ? "RINGLAB_SHM_CHUNK_BYTES"
         : key == "stream" ? "RINGLAB_SHM_STREAM_STORES"
         : key == "stage"  ? "RINGLAB_SHM_STAGE_BYTES"
         : key == "ring"   ? "RINGLAB_SHM_RING_BYTES"
         : key == "check"  ? "RINGLAB_MPI_CHECK_CALLS"
                           : "";
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
    const std::string variable = VariableOf(parts[i].substr(0, eq));
    if (variable.empty() || eq == std::string::npos) {
      throw std::invalid_argument("unknown backend option '" + parts[i] +
                                  "' in " + spec);
    }
    variables[variable] = parts[i].substr(eq + 1);
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
