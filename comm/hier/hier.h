// The hierarchical backend ("hier"), what NCCL and Horovod do between
// nodes: a fast backend among the ranks of each host (shm_ring by default,
// CommOptions::intra_host) and one across hosts (gloo, inter_host), joined
// so that the slow links carry as little as they can. An allreduce of S
// bytes on H hosts of G ranks each:
//   1. inside each host, the sum of its G ranks' buffers (intra allreduce);
//   2. across hosts, local rank l's shard (the l-th of G) summed over the
//      H hosts by the G cross-host groups side by side (inter allreduce);
//   3. inside each host, the G reduced shards gathered (intra allgather).
// Each host's link carries 2(H-1)/H of S (a flat ring over contiguous
// placement: 2(N-1)/N of S), in 2(H-1) slow steps instead of 2(N-1).
// Step 1 is a whole allreduce rather than a reduce-scatter (the Backend
// interface has none yet): it moves twice the bytes of one inside the host,
// through shared memory, and none across a link.
//
// Sums happen in the intra backend's order, then across hosts in the inter
// backend's: exact for exact-sum inputs, bitwise equal on every rank (each
// shard is reduced once and copied). avg sums, then divides once by N.
// Broadcast goes to the root's cross-host group, then inside each host;
// allgather inside the host, then across hosts, placed by rank. Calls are
// agreed (checks_calls false) through two small allgathers.
#ifndef RINGLAB_COMM_HIER_HIER_H_
#define RINGLAB_COMM_HIER_HIER_H_

#include <memory>
#include <vector>

#include "comm/backend.h"
#include "comm/communicator.h"
#include "comm/hier/topology.h"

namespace ringlab::comm::hier {

class HierBackend : public Backend {
 public:
  HierBackend(const RankContext& context, const CommOptions& options);
  ~HierBackend() override;

  void AllReduce(void* data, size_t count, DataType type, ReduceOp op) override;
  void Broadcast(void* data, size_t count, DataType type, int root) override;
  void AllGather(const void* send, void* recv, size_t count,
                 DataType type) override;
  void Barrier() override;
  // The intra backend's memory: registered where it registers (shm_ring),
  // so that step 1 copies nothing in or out.
  void* AllocateRegistered(size_t bytes) override;
  void MaxOverRanks(int64_t* words, size_t count) override;
  // Its parts' (an mpi part moves data only inside its calls).
  bool MovesDataOnlyInsideCalls() const override;
  void Progress() override;

 private:
  Topology topology_;
  int world_size_;
  std::unique_ptr<Communicator> intra_, inter_;
  std::vector<char> scratch_, gathered_;
};

}  // namespace ringlab::comm::hier

#endif  // RINGLAB_COMM_HIER_HIER_H_
