// Command-line parsing for every ringlab binary, on top of gflags, with the
// project's error contract (cli/usage_error.h): an unknown flag, a malformed
// value ("--lr=abc") or a stray argument gets one "error: ..." line and exit
// status 2, where gflags alone would print "ERROR: ..." and exit 1. Binaries
// that also take another library's flags (Google Benchmark's --benchmark_*)
// name their prefix and get those arguments back for that library to parse.
#ifndef RINGLAB_CLI_FLAGS_H_
#define RINGLAB_CLI_FLAGS_H_

#include <string>
#include <vector>

#include "cli/usage_error.h"

namespace ringlab::cli {

// Parses argv[1..] into the gflags defined in the binary. --help prints
// `usage` and the flags defined in files whose path contains one of
// help_dirs (e.g. {"train/", "comm/cluster/"}) and exits 0. Arguments that
// begin with one of pass_through (e.g. "--benchmark_") are not parsed: they are
// returned, in order, after argv[0]. Under `bazel run` it first moves to the
// directory the command was typed in, so that relative paths are the user's.
std::vector<char*> ParseFlagsOrExit(
    int argc, char** argv, const std::string& usage,
    const std::vector<std::string>& help_dirs,
    const std::vector<std::string>& pass_through = {});

}  // namespace ringlab::cli

#endif  // RINGLAB_CLI_FLAGS_H_
