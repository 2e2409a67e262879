// Command-line parsing for ringlab's binaries on top of gflags, with the
// project's error contract: an unknown flag, a malformed value ("--lr=abc") or
// a stray argument gets one "error: ..." line and exit status 2, where gflags
// alone would print "ERROR: ..." and exit 1.
#ifndef RINGLAB_TRAIN_FLAG_PARSING_H_
#define RINGLAB_TRAIN_FLAG_PARSING_H_

#include <string>

namespace ringlab::train {

// Parses argv[1..] into the gflags defined in the binary. --help prints the
// usage of the flags defined in files whose path contains help_filter (e.g.
// "train/") and exits 0.
void ParseFlagsOrExit(int argc, char** argv, const std::string& usage,
                      const std::string& help_filter);

// Prints "error: <message>" to stderr and exits with status 2.
[[noreturn]] void ExitWithUsageError(const std::string& message);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_FLAG_PARSING_H_
