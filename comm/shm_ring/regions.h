// Registered memory for shm_ring (Communicator::Allocate): regions that every
// rank of the job maps, one slot per rank, so that an allreduce on a buffer
// inside a slot reads its peers' slots directly and copies nothing in or out
// (the idea of NCCL's user-buffer registration and PyTorch's symmetric
// memory). A region is an anonymous memfd of rank 0's, which peers open
// through /proc/<pid>/fd/<fd> as they open the ring's segment; its first page
// holds a random nonce, checked before a peer uses the mapping.
#ifndef RINGLAB_COMM_SHM_RING_REGIONS_H_
#define RINGLAB_COMM_SHM_RING_REGIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/store/store.h"

namespace ringlab::comm {

class ShmRegions {
 public:
  // Keys go under prefix in store; every wait ends by timeout, naming a
  // rank that died (pids[r], published by the ring's join) or disagreed.
  ShmRegions(Store* store, std::string prefix, int rank, int world_size,
             std::vector<int> pids, std::chrono::milliseconds timeout);
  ~ShmRegions();
  ShmRegions(const ShmRegions&) = delete;
  ShmRegions& operator=(const ShmRegions&) = delete;

  // Collective: every rank calls it with the same count, in the same order.
  // Returns this rank's slot of count floats (page-aligned, zeroed).
  float* Allocate(size_t count);

  // When [data, data + count) lies inside this rank's slot of a region,
  // fills peers[r] with rank r's address of the same element and returns
  // true; false for memory that is not registered.
  bool Find(const float* data, size_t count, std::vector<float*>* peers) const;

 private:
  struct Region {
    char* base = nullptr;
    size_t map_bytes = 0;
    size_t slot_bytes = 0;
  };
  int CreateFile(size_t bytes) const;
  void WaitForPeersToMap(const std::string& key) const;
  void CheckPeersAlive(const std::string& key) const;
  Region MapPeerFile(const std::string& address, size_t count) const;

  Store* store_;
  const std::string prefix_;
  const int rank_, world_;
  const std::vector<int> pids_;
  const std::chrono::milliseconds timeout_;
  std::vector<Region> regions_;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_SHM_RING_REGIONS_H_
