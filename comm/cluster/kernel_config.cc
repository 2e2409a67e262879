#include "comm/cluster/kernel_config.h"

#include <sys/utsname.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ringlab::comm::cluster {
namespace {

std::string Release() {
  utsname name{};
  return uname(&name) == 0 ? name.release : "";
}

std::optional<std::string> ReadGzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return std::nullopt;
  std::string text;
  char buffer[16384];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof(buffer))) > 0) {
    text.append(buffer, static_cast<size_t>(n));
  }
  const bool failed = n < 0;
  gzclose(file);
  if (failed) return std::nullopt;
  return text;
}

}  // namespace

std::optional<std::string> KernelOption(const std::string& text,
                                        const std::string& option) {
  std::istringstream lines(text);
  bool any = false;
  for (std::string line; std::getline(lines, line);) {
    any =
        any || line.rfind("CONFIG_", 0) == 0 || line.rfind("# CONFIG_", 0) == 0;
    if (line.rfind(option + "=", 0) == 0) {
      return line.substr(option.size() + 1);
    }
  }
  if (!any) return std::nullopt;
  return std::string();
}

std::optional<std::string> RunningKernelConfig() {
  if (auto text = ReadGzip("/proc/config.gz")) return text;
  std::ifstream in("/boot/config-" + Release());
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<bool> KernelHasNetem() {
  const std::optional<std::string> config = RunningKernelConfig();
  if (!config) return std::nullopt;
  const std::optional<std::string> value =
      KernelOption(*config, "CONFIG_NET_SCH_NETEM");
  if (!value) return std::nullopt;
  if (*value == "y") return true;
  if (*value != "m") return false;
  // A module: there where it is loaded or installed; else the kernel may
  // still load it from elsewhere (a container without /lib/modules), so
  // only the hosts' setup can tell.
  std::error_code error;
  if (std::filesystem::exists("/sys/module/sch_netem", error) ||
      std::filesystem::exists("/lib/modules/" + Release(), error)) {
    return true;
  }
  return std::nullopt;
}

}  // namespace ringlab::comm::cluster
