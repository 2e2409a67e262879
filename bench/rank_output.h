// Benchmarks run as several ranks with the same command line; only rank 0
// reports. Google Benchmark's --benchmark_out=FILE would have every rank open
// (and truncate) the same file, so the other ranks drop it before parsing.
#ifndef RINGLAB_BENCH_RANK_OUTPUT_H_
#define RINGLAB_BENCH_RANK_OUTPUT_H_

#include <cstdlib>
#include <cstring>

namespace ringlab::bench {

// This process's rank as its launcher set it (ours, torchrun-style, mpirun),
// 0 when not launched as a rank.
inline int RankFromEnvironment() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

// Removes --benchmark_out and --benchmark_out_format from argv on ranks
// other than 0.
inline void DropFileOutputUnlessRankZero(int* argc, char** argv) {
  if (RankFromEnvironment() == 0) return;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_out", 15) == 0) continue;
    argv[kept++] = argv[i];
  }
  *argc = kept;
}

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_RANK_OUTPUT_H_
