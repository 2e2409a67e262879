#include "train/distributed_sampler.h"

#include <numeric>
#include <stdexcept>
#include <string>

#include "torch_compat/generator.h"

namespace ringlab::train {

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size,
                                       int rank, SamplerOptions options)
    : dataset_size_(dataset_size),
      world_size_(world_size),
      rank_(rank),
      options_(options) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("DistributedSampler: rank " +
                                std::to_string(rank) + " is not in [0, " +
                                std::to_string(world_size) + ")");
  }
  if (dataset_size < 0) {
    throw std::invalid_argument("DistributedSampler: negative dataset size");
  }
  // PyTorch: with drop_last and an uneven split, num_samples =
  // ceil((n - W) / W), i.e. floor(n / W); otherwise ceil(n / W).
  num_samples_ = options.drop_last
                     ? dataset_size / world_size
                     : (dataset_size + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::Indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    torch_compat::TorchGenerator generator(options_.seed +
                                           static_cast<uint64_t>(epoch));
    order = generator.RandPerm(dataset_size_);
  } else {
    order.resize(dataset_size_);
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = num_samples_ * world_size_;
  if (static_cast<int64_t>(order.size()) < total) {
    // Pad by repeating the head, as many times as needed (n < W repeats it).
    const size_t original = order.size();
    for (size_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) {
      order.push_back(order[i % original]);
    }
  } else {
    order.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(order[i]);
  return mine;
}

}  // namespace ringlab::train
