// Whether a job fits this machine's memory, checked by the launcher before
// any rank starts: a model of 300 million hidden units used to pass every
// check, then have each rank allocate until the kernel killed it (and other
// work with it). What a rank certainly needs is counted — its parameters,
// their gradients and the initial copy every rank keeps (4 bytes each),
// every layer's activations and their gradients for a batch, the data set it
// loads — and the job's need (every rank on this machine) is compared with
// what the machine, or the cgroup the launcher runs in, has available.
#ifndef RINGLAB_TRAIN_MEMORY_CHECK_H_
#define RINGLAB_TRAIN_MEMORY_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "nn/mlp.h"

namespace ringlab::train {

struct MemoryNeed {
  uint64_t model = 0;        // parameters, gradients, the initial copy
  uint64_t activations = 0;  // a batch's, forward and backward
  uint64_t data = 0;         // the training set a rank loads
  uint64_t per_rank() const { return model + activations + data; }
};

MemoryNeed EstimateMemory(const nn::MlpLayout& layout, int64_t batch_size,
                          int64_t dataset_size);

// What this process may still allocate: MemAvailable, or less where its
// cgroup (v2 memory.max, v1 memory.limit_in_bytes) leaves less; nullopt
// when neither can be read. `root` replaces "/" (for tests).
std::optional<uint64_t> AvailableMemory(const std::string& root = "");

// Throws std::invalid_argument, "the job needs at least X (N ranks x Y:
// ...) but Z is available (...)", when `ranks` ranks of `need` do not fit
// `available`.
void CheckMemoryFits(const MemoryNeed& need, int ranks, uint64_t available);

// "1.5 GB", "300 MB", "12 KB": what the messages say.
std::string Bytes(uint64_t bytes);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_MEMORY_CHECK_H_
