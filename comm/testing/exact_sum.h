// Allreduce inputs whose sums are exact, as nccl-tests chooses them: small
// integers, so every partial sum in any order is representable and the
// expected result is known to 0 ulp; and the check of a result against it.
// Shared by the CPU and GPU backends' tests.
#ifndef RINGLAB_COMM_TESTING_EXACT_SUM_H_
#define RINGLAB_COMM_TESTING_EXACT_SUM_H_

#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include "comm/communicator.h"

namespace ringlab::comm::testing {

// Element i of rank's input: an integer in [-30, 30].
inline float ExactSumInput(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 61) - 30);
}

// Throws unless x holds, bit for bit, the sum (or average) over world ranks
// of ExactSumInput. The average is the exact sum divided once by N, or, with
// avg_premultiplies (NCCL's ncclAvg), the sum of x * (1/N): the same bits
// when N is a power of two; otherwise the products round and NCCL's order is
// its own, so within N rounding errors of the sum's magnitude.
inline void CheckExactAllReduce(const float* x, size_t count, int world,
                                ReduceOp op, bool avg_premultiplies = false) {
  const float inv = 1.0f / static_cast<float>(world);
  const bool exact = !avg_premultiplies || (world & (world - 1)) == 0;
  for (size_t i = 0; i < count; ++i) {
    float sum = 0, premultiplied = 0, magnitude = 0;
    for (int r = 0; r < world; ++r) {
      sum += ExactSumInput(r, i);
      premultiplied += ExactSumInput(r, i) * inv;
      magnitude += std::fabs(ExactSumInput(r, i) * inv);
    }
    float want = sum;
    if (op == ReduceOp::kAvg) {
      want = avg_premultiplies ? premultiplied : sum / world;
    }
    const bool ok =
        exact ? std::memcmp(&x[i], &want, sizeof(float)) == 0
              : std::fabs(x[i] - want) <= world * 0x1p-24f * magnitude;
    if (!ok) {
      throw std::runtime_error(
          "count " + std::to_string(count) + " op " + ReduceOpName(op) +
          " element " + std::to_string(i) + ": got " + std::to_string(x[i]) +
          " want " + std::to_string(want));
    }
  }
}

}  // namespace ringlab::comm::testing

#endif  // RINGLAB_COMM_TESTING_EXACT_SUM_H_
