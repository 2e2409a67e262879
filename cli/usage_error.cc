#include "cli/usage_error.h"

#include <cstdio>
#include <cstdlib>

namespace ringlab::cli {

void ExitWithUsageError(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(2);
}

}  // namespace ringlab::cli
