// The error contract of every ringlab binary's command line: bad input gets
// one "error: <message>" line on stderr and exit status 2. A header of its own
// (no gflags) so that binaries without flags can refuse arguments the same
// way.
#ifndef RINGLAB_CLI_USAGE_ERROR_H_
#define RINGLAB_CLI_USAGE_ERROR_H_

#include <string>

namespace ringlab::cli {

// Prints "error: <message>" to stderr and exits with status 2.
[[noreturn]] void ExitWithUsageError(const std::string& message);

}  // namespace ringlab::cli

#endif  // RINGLAB_CLI_USAGE_ERROR_H_
