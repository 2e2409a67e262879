#include "bench/benchmark_flags.h"

#include <vector>

#include "bench/rank_output.h"
#include "benchmark/benchmark.h"
#include "cli/flags.h"

namespace ringlab::bench {

void ParseBenchmarkFlagsOrExit(int argc, char** argv,
                               const std::string& usage) {
  std::vector<char*> rest = cli::ParseFlagsOrExit(
      argc, argv,
      usage +
          "\n\n  Google Benchmark's flags apply too: --benchmark_filter=REGEX, "
          "--benchmark_out=FILE, --benchmark_out_format=json|csv|console, "
          "--benchmark_min_time=SECONDS, ...",
      "bench/", {"--benchmark_"});
  int count = static_cast<int>(rest.size());
  DropFileOutputUnlessRankZero(&count, rest.data());
  benchmark::Initialize(&count, rest.data());
  // What Benchmark leaves is what it could not parse.
  if (count > 1) {
    cli::ExitWithUsageError("invalid Google Benchmark flag '" +
                            std::string(rest[1]) + "'");
  }
}

}  // namespace ringlab::bench
