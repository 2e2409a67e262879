#include "comm/gather_strings.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#ifdef RINGLAB_WITH_CUDA
#include "cuda/device_buffer.h"
#include "cuda/error.h"
#endif

namespace ringlab::comm {
namespace {

// In place: all holds world_size blocks of count floats, this rank's filled
// in; afterwards every rank's.
void GatherBlocks(Communicator& comm, std::vector<float>& all, size_t count) {
  const size_t own = static_cast<size_t>(comm.rank()) * count;
  if (comm.memory() == MemoryKind::kHost) {
    comm.AllGather(all.data() + own, all.data(), count);
    return;
  }
#ifdef RINGLAB_WITH_CUDA
  // The communicator takes device pointers only: through one device buffer,
  // in place there too. CUDA's failures become CommErrors naming the backend.
  try {
    cuda::DeviceBuffer<float> device(all);  // this rank's block in place
    comm.AllGather(device.get() + own, device.get(), count);
    device.Download(all.data(), all.size());
  } catch (const cuda::CudaError& e) {
    throw CommError(std::string(comm.backend()) + ": " + e.what() +
                    " (AllGatherStrings)");
  }
#else
  throw CommError(std::string(comm.backend()) +
                  " works on device memory, but this binary was built "
                  "without CUDA");
#endif
}

}  // namespace

std::vector<std::string> AllGatherStrings(Communicator& comm,
                                          const std::string& mine) {
  const size_t world = static_cast<size_t>(comm.world_size());
  const size_t rank = static_cast<size_t>(comm.rank());
  // The lengths first: 64 bits in two floats' worth of bytes.
  static_assert(sizeof(uint64_t) == 2 * sizeof(float));
  std::vector<float> lengths(2 * world, 0.0f);
  const uint64_t length = mine.size();
  std::memcpy(lengths.data() + 2 * rank, &length, sizeof(length));
  GatherBlocks(comm, lengths, 2);
  std::vector<uint64_t> sizes(world);
  std::memcpy(sizes.data(), lengths.data(), world * sizeof(uint64_t));
  const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());

  // Then the bytes, each rank's padded with zeros to the longest. Every rank
  // knows the longest, so all skip the second call alike when it is 0.
  std::vector<std::string> all(world);
  if (longest == 0) return all;
  const size_t count = (longest + sizeof(float) - 1) / sizeof(float);
  std::vector<float> blocks(world * count, 0.0f);
  std::memcpy(blocks.data() + rank * count, mine.data(), mine.size());
  GatherBlocks(comm, blocks, count);
  for (size_t r = 0; r < world; ++r) {
    all[r].resize(sizes[r]);
    std::memcpy(all[r].data(), blocks.data() + r * count, sizes[r]);
  }
  return all;
}

}  // namespace ringlab::comm
