// Authenticated TCP connections between every pair of a job's ranks, made
// once when a user of them starts: the front's call check (call_mesh.h) and
// the torch backend's point-to-point messages each hold a set of their own.
// Each rank listens on its address, publishes its port in the job's store,
// connects to every lower rank and admits every higher one. A connecting
// rank proves it holds the job's secret (HMAC-SHA256 over the listener's
// fresh nonce and the set's purpose) before its connection is used;
// strangers, and connections meant for another set, are dropped. What
// travels after that is not authenticated: it is no better guarded than the
// data's own connections (Gloo's).
#ifndef RINGLAB_COMM_PEER_LINKS_H_
#define RINGLAB_COMM_PEER_LINKS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::comm {

struct PeerLink {
  int rank = -1;
  int fd = -1;  // blocking; a send gives up after the links' timeout
};

// Joins the ranks of `context` (store, peers and secret required) by
// `join_timeout`. `purpose` keys the set in the store and in the proofs
// ("call_mesh"); `name` opens messages (the backend). Returns every other
// rank's link, in rank order. Throws CommError when the peers do not all
// join in time, closing what it opened.
std::vector<PeerLink> ConnectPeers(const RankContext& context,
                                   const std::string& purpose,
                                   const std::string& name,
                                   std::chrono::milliseconds join_timeout,
                                   std::chrono::milliseconds timeout);
// Closes every link's connection and empties `links`.
void ClosePeers(std::vector<PeerLink>* links);

// Rounded up: a wait of this many milliseconds ends at the deadline, not
// before it.
int64_t MillisecondsLeft(std::chrono::steady_clock::time_point deadline);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_PEER_LINKS_H_
