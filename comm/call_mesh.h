// The front's call agreement (comm/call_agreement.h) over connections of its
// own, for the backends that cannot tell ranks in different calls apart
// (gloo, mpi, nccl): a TCP connection between every pair of ranks that
// carries nothing but the calls' descriptions. Through the backend, the
// agreement was one of its collectives, for Gloo an allgather whose
// rendezvous (a ready notice, then the data) runs through its epoll thread:
// several wake-ups on every call, which a loaded host makes slow (3 ms of a
// 35 ms DDP step across two emulated hosts). Here each rank writes its
// description to every peer and reads theirs: one one-way message each, read
// by the thread that waits for it. A description may also be written before
// its call runs (Communicator::Announce), by the thread that hands calls to
// a communication thread, so that the peers' have usually arrived by the
// time the call starts.
//
// The connections are comm/peer_links.h's, each proven to hold the job's
// secret; the descriptions travel unauthenticated after that: all they can
// change is whether the ranks are found to agree.
#ifndef RINGLAB_COMM_CALL_MESH_H_
#define RINGLAB_COMM_CALL_MESH_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/call_agreement.h"
#include "comm/communicator.h"
#include "comm/peers.h"

namespace ringlab::comm {

class CallMesh {
 public:
  // Joins the ranks of `context` (store, peers and secret required): listens
  // on this rank's address, publishes its port in the store, connects to
  // every lower rank and admits every higher one, by `join_timeout`.
  // `timeout` bounds every later wait. `backend` names the backend in
  // messages. Throws CommError when the peers do not all join in time.
  CallMesh(const RankContext& context, const std::string& backend,
           std::chrono::milliseconds join_timeout,
           std::chrono::milliseconds timeout);
  ~CallMesh();
  CallMesh(const CallMesh&) = delete;
  CallMesh& operator=(const CallMesh&) = delete;

  // Writes a call's agreement words (call_agreement.h) to every peer. The
  // caller posts the calls in their order, one at a time, from any thread.
  // CommError when a peer's connection is gone or full past the timeout;
  // `what` (the call) is for messages.
  void Post(const int64_t words[kAgreementWords], const std::string& what);
  // Reads every peer's next words (its description of the same call, if the
  // ranks agree) and leaves in `words` (this rank's own on entry) their
  // elementwise maximum. CommError naming the peer that died, closed its
  // connection or did not answer in time. Where `progress` is given (a
  // backend whose data moves only inside its calls), it is called at least
  // every millisecond of the wait: a peer may be waiting inside the backend
  // for data that this rank's last call left queued.
  void Collect(int64_t words[kAgreementWords], const std::string& what,
               const std::function<void()>& progress = nullptr);

 private:
  struct Peer {
    int rank = -1;
    int fd = -1;
    std::string received;  // a partly read message
  };
  // "gloo: rank 1 (pid 42) died during ...", "... closed its connection ...".
  std::string PeerGone(const Peer& peer, const std::string& what,
                       const std::string& why) const;

  const int rank_, world_;
  const std::string backend_;
  const std::chrono::milliseconds timeout_;
  const PeerWatch watch_;
  std::vector<Peer> peers_;  // every other rank, in rank order
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_CALL_MESH_H_
