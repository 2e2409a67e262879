// Command lines of the benchmark binaries: their own flags through cli's
// parser and Google Benchmark's --benchmark_* flags through Benchmark's, both
// under the project's contract (cli/usage_error.h): a --benchmark_ flag
// Benchmark cannot parse is an error too, not silently ignored. On ranks other
// than 0, --benchmark_out* is dropped first (rank_output.h).
#ifndef RINGLAB_BENCH_BENCHMARK_FLAGS_H_
#define RINGLAB_BENCH_BENCHMARK_FLAGS_H_

#include <string>

namespace ringlab::bench {

// Parses argv, then hands the --benchmark_* arguments to
// benchmark::Initialize. --help prints `usage`, the flags defined under
// bench/ and a line on Benchmark's flags, and exits 0.
void ParseBenchmarkFlagsOrExit(int argc, char** argv, const std::string& usage);

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_BENCHMARK_FLAGS_H_
