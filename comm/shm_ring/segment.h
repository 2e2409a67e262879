// The one way shm_ring's ranks come to share memory, for the ring's segment
// and for every registered region alike: rank 0 creates an anonymous memfd
// (0600, its memory reserved up front), writes a header that carries a
// random nonce and a tag only holders of the job's secret can compute, and
// publishes where peers open it (/proc/<pid>/fd/<fd>, so the ranks must
// share the user, the host and the PID namespace); each peer maps it and
// verifies nonce and tag before it writes anything, then says so; once every
// peer has, rank 0 lets go of the descriptor (the file has no name anywhere,
// so nothing outlives the job however it ends) and says the segment is
// ready. Every wait watches the peers: a rank that died, or one that
// reported why it failed, ends every other rank's wait at once, naming it.
#ifndef RINGLAB_COMM_SHM_RING_SEGMENT_H_
#define RINGLAB_COMM_SHM_RING_SEGMENT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/store/store.h"

namespace ringlab::comm::shm {

// The first bytes of every segment; what follows is its owner's.
struct SegmentHeader {
  std::atomic<uint64_t> magic;  // stored last, with release
  uint64_t nonce;               // also in the address rank 0 publishes
  uint64_t world_size;
  // JobTag(job secret, "shm_ring segment <nonce>"), zeros without a secret.
  unsigned char tag[32];
};

struct Mapping {
  char* base = nullptr;
  size_t bytes = 0;
};

class SegmentJoin {
 public:
  // Keys go into `store` (a prefix of the segment's own); every wait ends
  // by the deadline, `timeout` from now. `what` names the segment in errors
  // ("the segment", "a registered region").
  SegmentJoin(Store& store, const RankContext& context,
              std::chrono::milliseconds timeout, std::string what);
  ~SegmentJoin();
  SegmentJoin(const SegmentJoin&) = delete;
  SegmentJoin& operator=(const SegmentJoin&) = delete;

  // Rank 0: creates and maps `bytes` (at least a page), lets `fill` write
  // what follows the SegmentHeader, and publishes the segment.
  Mapping Create(size_t bytes, const std::function<void(char* base)>& fill);
  // The others: waits for rank 0's segment, maps and verifies it, and lets
  // `check` refuse it (CommError) before this rank says it has mapped it.
  Mapping Open(
      const std::function<void(const char* base, size_t bytes)>& check);
  // Then every rank: rank 0 waits for every peer to have mapped it, closes
  // the descriptor and publishes `ready()`; the others wait for that and
  // return it.
  std::string Finish(const std::function<std::string()>& ready);

  // Waits for every other rank's key name/<r>, watching the peers; `doing`
  // says what they were to do, for the timeout's message (which names the
  // ranks that did not).
  void WaitForRanks(const std::string& name, const std::string& doing);
  // This rank failed: every peer's wait ends, naming it and `message`.
  void Report(const std::string& message);
  // Throws naming a rank that reported a failure or died, if one has.
  void CheckPeers();

 private:
  void Wait(const std::vector<std::string>& keys, const std::string& doing);
  std::string Tag(uint64_t nonce) const;

  Store& store_;
  const RankContext& context_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::steady_clock::time_point deadline_;
  const std::string what_;
  const PeerWatch watch_;
  int fd_ = -1;            // rank 0's, until every peer has mapped
  bool reported_ = false;  // a failure (ours or a peer's) is in the store
};

}  // namespace ringlab::comm::shm

#endif  // RINGLAB_COMM_SHM_RING_SEGMENT_H_
