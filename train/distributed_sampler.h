// torch.utils.data.DistributedSampler, index for index: each epoch a
// permutation from a generator seeded seed + epoch (torch.randperm), padded by
// repeating its head up to a multiple of the world size (or truncated with
// drop_last), and rank r takes every world_size-th index starting at r. Its
// seed is its own, independent of the seed that draws parameters and data.
#ifndef RINGLAB_TRAIN_DISTRIBUTED_SAMPLER_H_
#define RINGLAB_TRAIN_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace ringlab::train {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // Throws std::invalid_argument unless 0 <= rank < world_size and size >= 0.
  DistributedSampler(int64_t dataset_size, int world_size, int rank,
                     SamplerOptions options = {});

  // This rank's indices for an epoch; PyTorch uses epoch 0 unless set_epoch is
  // called, which is what the trainer does by default.
  std::vector<int64_t> Indices(int64_t epoch) const;
  // Indices per rank per epoch: ceil(n / W), or floor(n / W) with drop_last.
  int64_t num_samples() const { return num_samples_; }

 private:
  int64_t dataset_size_;
  int world_size_;
  int rank_;
  SamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_DISTRIBUTED_SAMPLER_H_
