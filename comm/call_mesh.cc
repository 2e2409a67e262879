#include "comm/call_mesh.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "comm/peer_links.h"
#include "comm/store/store.h"
#include "comm/store/store_protocol.h"

namespace ringlab::comm {
namespace {

namespace wire = store_protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A message: a call's agreement words, its number first (native byte order:
// the ranks are x86-64 processes of one build).
constexpr size_t kMessageBytes = kAgreementWords * sizeof(int64_t);
// How long a wait goes without moving the backend's queued data, where it
// has some (Collect's `progress`).
constexpr milliseconds kProgressSlice{1};

}  // namespace

CallMesh::CallMesh(const RankContext& context, const std::string& backend,
                   milliseconds join_timeout, milliseconds timeout)
    : rank_(context.rank),
      world_(context.world_size),
      backend_(backend),
      timeout_(timeout),
      watch_(context.peers, context.rank) {
  for (const PeerLink& link :
       ConnectPeers(context, "call_mesh", backend, join_timeout, timeout)) {
    peers_.push_back(Peer{link.rank, link.fd, {}});
  }
}

CallMesh::~CallMesh() {
  for (const Peer& peer : peers_) close(peer.fd);
}

void CallMesh::Post(const int64_t words[kAgreementWords],
                    const std::string& what) {
  for (const Peer& peer : peers_) {
    if (!wire::SendAll(peer.fd, words, kMessageBytes)) {
      throw CommError(
          PeerGone(peer, "the check of " + what, std::strerror(errno)));
    }
  }
}

void CallMesh::Collect(int64_t words[kAgreementWords], const std::string& what,
                       const std::function<void()>& progress) {
  const auto deadline = Clock::now() + timeout_;
  std::vector<Peer*> pending;
  for (Peer& peer : peers_) pending.push_back(&peer);
  while (!pending.empty()) {
    std::vector<pollfd> fds;
    for (const Peer* peer : pending) fds.push_back({peer->fd, POLLIN, 0});
    if (progress) progress();
    const int64_t slice = progress ? kProgressSlice.count() : 1 << 30;
    const int n =
        poll(fds.data(), fds.size(),
             static_cast<int>(std::min(MillisecondsLeft(deadline), slice)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw CommError(backend_ + ": call mesh: poll: " + std::strerror(errno));
    }
    if (n == 0 && Clock::now() < deadline) continue;
    if (n == 0) {
      if (watch_.DeadPeerWithin(milliseconds(0)) >= 0) {
        throw CommError(PeerGone(*pending.front(), what, "no answer"));
      }
      std::string ranks;
      for (const Peer* peer : pending) {
        ranks +=
            (ranks.empty() ? "rank " : ", rank ") + std::to_string(peer->rank);
      }
      throw CommError(backend_ + ": timed out after " + SecondsText(timeout_) +
                      " in the check of " + what + " waiting for " + ranks);
    }
    for (size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      Peer& peer = *pending[i];
      char buffer[kMessageBytes];
      const ssize_t k = recv(
          peer.fd, buffer, kMessageBytes - peer.received.size(), MSG_DONTWAIT);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) {
        throw CommError(
            PeerGone(peer, "the check of " + what,
                     k == 0 ? "connection closed" : std::strerror(errno)));
      }
      peer.received.append(buffer, static_cast<size_t>(k));
      if (peer.received.size() < kMessageBytes) continue;
      int64_t theirs[kAgreementWords];
      std::memcpy(theirs, peer.received.data(), kMessageBytes);
      peer.received.clear();
      for (int w = 0; w < kAgreementWords; ++w) {
        words[w] = std::max(words[w], theirs[w]);
      }
      pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
    }
  }
}

std::string CallMesh::PeerGone(const Peer& peer, const std::string& what,
                               const std::string& why) const {
  const std::string dead = watch_.ExitedWithin(milliseconds(1000));
  if (!dead.empty()) return backend_ + ": " + dead + " died during " + what;
  return backend_ + ": rank " + std::to_string(peer.rank) +
         " closed its connection during " + what + " (" + why +
         "): it failed or exited";
}

}  // namespace ringlab::comm
