// Registered memory for shm_ring (Communicator::Allocate): regions that every
// rank of the job maps, one slot per rank, so that an allreduce on a buffer
// inside a slot reads its peers' slots directly and copies nothing in or out
// (the idea of NCCL's user-buffer registration and PyTorch's symmetric
// memory). Each region is a segment the ranks join as they join the ring's
// (segment.h: rank 0's memfd, verified by nonce and job tag).
#ifndef RINGLAB_COMM_SHM_RING_REGIONS_H_
#define RINGLAB_COMM_SHM_RING_REGIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/store/store.h"

namespace ringlab::comm {

class ShmRegions {
 public:
  // Keys go under "region/<k>" in store; every wait ends by timeout, naming
  // a rank that died or disagreed.
  ShmRegions(Store* store, const RankContext& context,
             std::chrono::milliseconds timeout);
  ~ShmRegions();
  ShmRegions(const ShmRegions&) = delete;
  ShmRegions& operator=(const ShmRegions&) = delete;

  // Collective: every rank calls it with the same count, in the same order.
  // Returns this rank's slot of count floats (page-aligned, zeroed).
  float* Allocate(size_t count);

  // When the `bytes` at data lie inside this rank's slot of a region, fills
  // peers[r] with rank r's address of the same byte and returns true; false
  // for memory that is not registered.
  bool Find(const void* data, size_t bytes, std::vector<char*>* peers) const;

 private:
  struct Region {
    char* base = nullptr;
    size_t map_bytes = 0;
    size_t slot_bytes = 0;
  };

  Store* store_;
  const RankContext context_;
  const int rank_, world_;
  const std::chrono::milliseconds timeout_;
  std::vector<Region> regions_;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_SHM_RING_REGIONS_H_
