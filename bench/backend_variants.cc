#include "bench/backend_variants.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace ringlab::bench {
namespace {

// The environment variable an option sets, "" for none.
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

std::unique_ptr<comm::Communicator> CreateVariant(
    const std::string& spec, const comm::RankContext& context,
    const comm::CommOptions& options) {
  const std::vector<std::string> parts = SplitList(spec, ':');
  std::vector<std::string> set;
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    const std::string var = VariableOf(parts[i].substr(0, eq));
    if (var.empty() || eq == std::string::npos) {
      for (const std::string& v : set) unsetenv(v.c_str());
      throw std::invalid_argument("unknown backend option '" + parts[i] +
                                  "' in " + spec);
    }
    setenv(var.c_str(), parts[i].substr(eq + 1).c_str(), 1);
    set.push_back(var);
  }
  std::unique_ptr<comm::Communicator> c;
  try {
    c = comm::CreateCommunicator(parts.at(0), context, options);
  } catch (...) {
    for (const std::string& v : set) unsetenv(v.c_str());
    throw;
  }
  for (const std::string& v : set) unsetenv(v.c_str());
  return c;
}

}  // namespace ringlab::bench
