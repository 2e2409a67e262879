// What every allreduce sweep of the benchmarks shares: how many iterations a
// message size gets, the sizes of a sweep, and the exact-sum inputs whose
// results are checked element by element (allreduce_bench, and the ranks as
// threads of gpu_threads_bench).
#ifndef RINGLAB_BENCH_SWEEP_H_
#define RINGLAB_BENCH_SWEEP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/testing/exact_sum.h"

namespace ringlab::bench {

// Iterations per message size: about the same bytes per size (256 MiB / 4),
// at least 5, at most `cap`. Fixed in advance, so that every rank runs the
// same sequence and no rank can decide to run one more.
int64_t IterationsFor(int64_t bytes, int64_t cap);

// The message sizes of a sweep: min_bytes (at least 4), then times `factor`
// up to max_bytes.
std::vector<int64_t> SweepSizes(int64_t min_bytes, int64_t max_bytes,
                                int64_t factor = 4);

// Element i of rank r's input: small integers, as nccl-tests chooses them, so
// that every sum is exact and a result is either exactly right or wrong; the
// conformance suite's inputs (comm/testing/exact_sum.h).
using comm::testing::ExactSumInput;

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_SWEEP_H_
