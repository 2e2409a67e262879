#include "train/rank_exchange.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace ringlab::train {

std::vector<std::vector<float>> RankExchange::AllGatherFloats(
    const std::vector<float>& mine) {
  const int world = comm_.world_size();
  const int rank = comm_.rank();
  const size_t n = mine.size();
  // Each rank fills its own slot, zeros elsewhere: x + 0 is exact, so the sum
  // is a gather (the values here are small non-negative integers).
  std::vector<float> slots(n * world, 0.0f);
  std::copy(mine.begin(), mine.end(), slots.begin() + rank * n);
  comm_.AllReduce(slots.data(), slots.size(), comm::ReduceOp::kSum);
  std::vector<std::vector<float>> all(world);
  for (int r = 0; r < world; ++r) {
    all[r].assign(slots.begin() + r * n, slots.begin() + (r + 1) * n);
  }
  return all;
}

std::vector<std::string> RankExchange::AllGather(const std::string& mine) {
  const int world = comm_.world_size();
  std::vector<std::string> all(world);
  if (comm_.memory() == comm::MemoryKind::kDevice && store_ != nullptr) {
    const std::string prefix =
        "ringlab/gather/" + std::to_string(sequence_++) + "/";
    store_->Set(prefix + std::to_string(comm_.rank()), mine);
    for (int r = 0; r < world; ++r) {
      all[r] = store_->Get(prefix + std::to_string(r), timeout_);
    }
    return all;
  }
  // Through the allreduce: 16 bits per float, which floats carry exactly.
  // First the lengths (32 bits), then the bytes padded to the longest.
  if (mine.size() > UINT32_MAX) {
    throw std::length_error("RankExchange: over 4 GiB from one rank");
  }
  const uint32_t length = static_cast<uint32_t>(mine.size());
  const auto lengths = AllGatherFloats(
      {static_cast<float>(length & 0xFFFF), static_cast<float>(length >> 16)});
  uint32_t longest = 0;
  for (const auto& l : lengths) {
    longest = std::max(longest, static_cast<uint32_t>(l[0]) |
                                    (static_cast<uint32_t>(l[1]) << 16));
  }
  std::vector<float> encoded((longest + 1) / 2, 0.0f);
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto byte = static_cast<unsigned char>(mine[i]);
    encoded[i / 2] += static_cast<float>(i % 2 ? byte << 8 : byte);
  }
  const auto gathered = AllGatherFloats(encoded);
  for (int r = 0; r < world; ++r) {
    const uint32_t size = static_cast<uint32_t>(lengths[r][0]) |
                          (static_cast<uint32_t>(lengths[r][1]) << 16);
    all[r].resize(size);
    for (uint32_t i = 0; i < size; ++i) {
      const auto word = static_cast<uint32_t>(gathered[r][i / 2]);
      all[r][i] = static_cast<char>(i % 2 ? word >> 8 : word & 0xFF);
    }
  }
  return all;
}

}  // namespace ringlab::train
