#include "comm/call_mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "comm/store/job_secret.h"
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
constexpr size_t kNonceBytes = 16;
// How long a wait goes without moving the backend's queued data, where it
// has some (Collect's `progress`).
constexpr milliseconds kProgressSlice{1};

std::string PortKey(int rank) {
  return "call_mesh/port/" + std::to_string(rank);
}

std::string Proof(const std::string& secret, const std::string& nonce,
                  int32_t rank) {
  return HmacSha256(
      secret, "ringlab call mesh\n" + nonce + "\n" + std::to_string(rank));
}

// Rounded up: a wait of this many milliseconds ends at the deadline, not
// before it.
int64_t MillisecondsLeft(Clock::time_point deadline) {
  return std::max<int64_t>(
      0, std::chrono::ceil<milliseconds>(deadline - Clock::now()).count());
}

sockaddr_in AddressOf(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.empty() ? "127.0.0.1" : host.c_str(),
                &address.sin_addr) != 1) {
    throw CommError("call mesh: '" + host + "' is not an IPv4 address");
  }
  return address;
}

// Small messages at once, and no send that waits past the collectives'
// deadline for a peer that stopped reading.
void Tune(int fd, milliseconds timeout) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval limit{};
  limit.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  limit.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
}

// Listens on `host`, any port; returns the socket and sets *port.
int Listen(const std::string& host, int world, int* port) {
  // Non-blocking: a connection reset between poll and accept is no wait.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in address = AddressOf(host, 0);
  socklen_t length = sizeof(address);
  if (fd < 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, world) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    throw CommError("call mesh: cannot listen on " + host + ": " + why);
  }
  *port = ntohs(address.sin_port);
  return fd;
}

// A connection to this rank's listener that has yet to prove it is a
// rank of this job: sent a nonce, it must answer with its rank and the
// proof. Connections prove themselves side by side, each within the join's
// deadline, so a silent one delays no other (a rank's Connect returns once
// its proof is sent, so a rank dropped early would never try again).
struct Candidate {
  int fd = -1;
  std::string nonce;
  std::string answer;  // what has arrived of rank and proof
  bool failed = false;

  // Reads what has arrived (the socket does not block); once the whole
  // answer is in, the rank it proves (between `rank` and `world`, the
  // secret's), or -1 with failed set for a wrong one.
  int Read(const std::string& secret, int rank, int world) {
    constexpr size_t kAnswerBytes = sizeof(int32_t) + kHmacBytes;
    char bytes[kAnswerBytes];
    const ssize_t n = recv(fd, bytes, kAnswerBytes - answer.size(), 0);
    if (n <= 0) {
      failed = n == 0 || (errno != EAGAIN && errno != EINTR);
      return -1;
    }
    answer.append(bytes, static_cast<size_t>(n));
    if (answer.size() < kAnswerBytes) return -1;
    int32_t from = -1;
    std::memcpy(&from, answer.data(), sizeof(from));
    failed = !(from > rank && from < world &&
               ConstantTimeEqual(answer.substr(sizeof(from)),
                                 Proof(secret, nonce, from)));
    if (failed) return -1;
    // The peer's later calls read and write it blocking, with deadlines.
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return from;
  }
};

// How many connections may be proving themselves at once: beyond it the
// oldest is dropped (a local process that opens that many can delay a job
// until its join deadline, as it could by filling the listen queue).
constexpr size_t kMaxCandidates = 64;

// Takes a connection off the listener and sends it a nonce to answer.
void Welcome(int listener, std::vector<Candidate>* candidates) {
  const int fd =
      accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  Candidate c{fd, RandomBytes(kNonceBytes), {}};
  // 16 bytes into a new connection's empty buffer: never short.
  if (send(fd, c.nonce.data(), c.nonce.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(c.nonce.size())) {
    close(fd);
    return;
  }
  if (candidates->size() == kMaxCandidates) {
    close(candidates->front().fd);
    candidates->erase(candidates->begin());
  }
  candidates->push_back(std::move(c));
}

}  // namespace

CallMesh::CallMesh(const RankContext& context, const std::string& backend,
                   milliseconds join_timeout, milliseconds timeout)
    : rank_(context.rank),
      world_(context.world_size),
      backend_(backend),
      timeout_(timeout),
      watch_(context.peers, context.rank) {
  const auto deadline = Clock::now() + join_timeout;
  int port = 0;
  const int listener = Listen(context.peers[rank_].address, world_, &port);
  try {
    context.store->Set(PortKey(rank_), std::to_string(port));
    // Lower ranks first, then the higher ones' connections: rank 0 admits
    // at once, and each rank admits once its own connections are made.
    for (int to = 0; to < rank_; ++to) {
      const milliseconds left(MillisecondsLeft(deadline));
      Connect(context, to, context.store->Get(PortKey(to), left), deadline);
    }
    Admit(listener, context.job_secret, deadline);
  } catch (const StoreError& e) {
    CloseAll(listener);  // no destructor runs for a constructor that throws
    throw CommError(backend_ + ": call mesh: " + e.what());
  } catch (...) {
    CloseAll(listener);
    throw;
  }
  close(listener);
  std::sort(peers_.begin(), peers_.end(),
            [](const Peer& a, const Peer& b) { return a.rank < b.rank; });
}

CallMesh::~CallMesh() { CloseAll(-1); }

void CallMesh::CloseAll(int listener) {
  if (listener >= 0) close(listener);
  for (const Peer& peer : peers_) close(peer.fd);
  peers_.clear();
}

void CallMesh::Connect(const RankContext& context, int to,
                       const std::string& port, Clock::time_point deadline) {
  const sockaddr_in address =
      AddressOf(context.peers[to].address, std::stoi(port));
  std::string why = "no connection within the deadline";
  for (auto pause = milliseconds(1); Clock::now() < deadline;
       pause = std::min(pause * 2, milliseconds(100))) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&address),
                           sizeof(address)) == 0) {
      char nonce[kNonceBytes];
      if (wire::ReadExact(fd, nonce, sizeof(nonce), deadline, &why)) {
        const int32_t own = rank_;
        const std::string proof =
            Proof(context.job_secret, std::string(nonce, sizeof(nonce)), own);
        if (wire::SendAll(fd, &own, sizeof(own)) &&
            wire::SendAll(fd, proof.data(), proof.size())) {
          Tune(fd, timeout_);
          peers_.push_back(Peer{to, fd, {}});
          return;
        }
        why = std::strerror(errno);
      }
    } else {
      why = std::strerror(errno);
    }
    if (fd >= 0) close(fd);
    std::this_thread::sleep_for(pause);
  }
  throw CommError(backend_ + ": call mesh: rank " + std::to_string(rank_) +
                  " could not connect to rank " + std::to_string(to) + " at " +
                  context.peers[to].address + ":" + port + ": " + why);
}

void CallMesh::Admit(int listener, const std::string& secret,
                     Clock::time_point deadline) {
  std::vector<bool> admitted(static_cast<size_t>(world_), false);
  std::vector<Candidate> candidates;
  try {
    for (int waiting = world_ - 1 - rank_; waiting > 0;) {
      std::vector<pollfd> ready{{listener, POLLIN, 0}};
      for (const Candidate& c : candidates) ready.push_back({c.fd, POLLIN, 0});
      const int n = poll(ready.data(), ready.size(),
                         static_cast<int>(std::min<int64_t>(
                             MillisecondsLeft(deadline), 1 << 30)));
      if (n < 0 && errno != EINTR) {
        throw CommError(backend_ +
                        ": call mesh: poll failed: " + std::strerror(errno));
      }
      // Every candidate moves on as its bytes arrive: one that stays silent
      // holds up no other, and is dropped at its own deadline.
      for (size_t i = candidates.size(); i-- > 0;) {
        Candidate& c = candidates[i];
        const int from =
            ready[i + 1].revents != 0 ? c.Read(secret, rank_, world_) : -1;
        if (from >= 0 && !admitted[from]) {
          Tune(c.fd, timeout_);
          admitted[from] = true;
          peers_.push_back(Peer{from, c.fd, {}});
          --waiting;
        } else if (from >= 0 || c.failed) {
          close(c.fd);  // a stranger, or a rank of another job: dropped
        } else {
          continue;
        }
        candidates.erase(candidates.begin() + static_cast<ptrdiff_t>(i));
      }
      if (ready[0].revents & POLLIN) Welcome(listener, &candidates);
      if (waiting > 0 && Clock::now() >= deadline) {
        std::string missing;
        for (int r = rank_ + 1; r < world_; ++r) {
          if (!admitted[r]) missing += " " + std::to_string(r);
        }
        throw CommError(backend_ + ": call mesh: rank " +
                        std::to_string(rank_) + " was not reached by rank(s)" +
                        missing + " in time");
      }
    }
  } catch (...) {
    for (const Candidate& c : candidates) close(c.fd);
    throw;
  }
  for (const Candidate& c : candidates) close(c.fd);
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
