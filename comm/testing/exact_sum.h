// Allreduce inputs whose sums are exact, as nccl-tests chooses them: small
// integers, so every partial sum in any order is representable and the
// expected result is known to 0 ulp; and the check of a result against it.
// Shared by the CPU and GPU backends' tests.
#ifndef RINGLAB_COMM_TESTING_EXACT_SUM_H_
#define RINGLAB_COMM_TESTING_EXACT_SUM_H_

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
// of ExactSumInput.
inline void CheckExactAllReduce(const float* x, size_t count, int world,
                                ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int r = 0; r < world; ++r) sum += ExactSumInput(r, i);
    const float want = op == ReduceOp::kAvg ? sum / world : sum;
    if (std::memcmp(&x[i], &want, sizeof(float)) != 0) {
      throw std::runtime_error(
          "count " + std::to_string(count) + " op " + ReduceOpName(op) +
          " element " + std::to_string(i) + ": got " + std::to_string(x[i]) +
          " want " + std::to_string(want));
    }
  }
}

}  // namespace ringlab::comm::testing

#endif  // RINGLAB_COMM_TESTING_EXACT_SUM_H_
