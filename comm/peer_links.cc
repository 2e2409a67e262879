#include "comm/peer_links.h"

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

constexpr size_t kNonceBytes = 16;

std::string PortKey(const std::string& purpose, int rank) {
  return purpose + "/port/" + std::to_string(rank);
}

// A set of links proves itself for its purpose only: a connection made for
// another set is dropped.
std::string Proof(const std::string& secret, const std::string& purpose,
                  const std::string& nonce, int32_t rank) {
  return HmacSha256(secret, "ringlab " + purpose + "\n" + nonce + "\n" +
                                std::to_string(rank));
}

sockaddr_in AddressOf(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.empty() ? "127.0.0.1" : host.c_str(),
                &address.sin_addr) != 1) {
    throw CommError("peer links: '" + host + "' is not an IPv4 address");
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
    throw CommError("peer links: cannot listen on " + host + ": " + why);
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
  int Read(const std::string& secret, const std::string& purpose, int rank,
           int world) {
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
                                 Proof(secret, purpose, nonce, from)));
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

int64_t MillisecondsLeft(Clock::time_point deadline) {
  return std::max<int64_t>(
      0, std::chrono::ceil<milliseconds>(deadline - Clock::now()).count());
}

namespace {

// What joining needs, once: the context, the set and its messages' opening.
struct Join {
  const RankContext& context;
  const std::string& purpose;
  std::string where;  // "gloo: call_mesh"
  milliseconds timeout;
  Clock::time_point deadline;
  std::vector<PeerLink>* links;
};

void Connect(const Join& join, int to, const std::string& port) {
  const RankContext& context = join.context;
  const sockaddr_in address =
      AddressOf(context.peers[to].address, std::stoi(port));
  std::string why = "no connection within the deadline";
  for (auto pause = milliseconds(1); Clock::now() < join.deadline;
       pause = std::min(pause * 2, milliseconds(100))) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&address),
                           sizeof(address)) == 0) {
      char nonce[kNonceBytes];
      if (wire::ReadExact(fd, nonce, sizeof(nonce), join.deadline, &why)) {
        const int32_t own = context.rank;
        const std::string proof = Proof(context.job_secret, join.purpose,
                                        std::string(nonce, sizeof(nonce)), own);
        if (wire::SendAll(fd, &own, sizeof(own)) &&
            wire::SendAll(fd, proof.data(), proof.size())) {
          Tune(fd, join.timeout);
          join.links->push_back(PeerLink{to, fd});
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
  throw CommError(join.where + ": rank " + std::to_string(context.rank) +
                  " could not connect to rank " + std::to_string(to) + " at " +
                  context.peers[to].address + ":" + port + ": " + why);
}

// Admits every higher rank (its proof checked) through `listener`.
void Admit(const Join& join, int listener) {
  const int rank = join.context.rank, world = join.context.world_size;
  const std::string& secret = join.context.job_secret;
  std::vector<bool> admitted(static_cast<size_t>(world), false);
  std::vector<Candidate> candidates;
  try {
    for (int waiting = world - 1 - rank; waiting > 0;) {
      std::vector<pollfd> ready{{listener, POLLIN, 0}};
      for (const Candidate& c : candidates) ready.push_back({c.fd, POLLIN, 0});
      const int n = poll(ready.data(), ready.size(),
                         static_cast<int>(std::min<int64_t>(
                             MillisecondsLeft(join.deadline), 1 << 30)));
      if (n < 0 && errno != EINTR) {
        throw CommError(join.where + ": poll failed: " + std::strerror(errno));
      }
      // Every candidate moves on as its bytes arrive: one that stays silent
      // holds up no other, and is dropped at its own deadline.
      for (size_t i = candidates.size(); i-- > 0;) {
        Candidate& c = candidates[i];
        const int from = ready[i + 1].revents != 0
                             ? c.Read(secret, join.purpose, rank, world)
                             : -1;
        if (from >= 0 && !admitted[from]) {
          Tune(c.fd, join.timeout);
          admitted[from] = true;
          join.links->push_back(PeerLink{from, c.fd});
          --waiting;
        } else if (from >= 0 || c.failed) {
          close(c.fd);  // a stranger, or a rank of another job: dropped
        } else {
          continue;
        }
        candidates.erase(candidates.begin() + static_cast<ptrdiff_t>(i));
      }
      if (ready[0].revents & POLLIN) Welcome(listener, &candidates);
      if (waiting > 0 && Clock::now() >= join.deadline) {
        std::string missing;
        for (int r = rank + 1; r < world; ++r) {
          if (!admitted[r]) missing += " " + std::to_string(r);
        }
        throw CommError(join.where + ": rank " + std::to_string(rank) +
                        " was not reached by rank(s)" + missing + " in time");
      }
    }
  } catch (...) {
    for (const Candidate& c : candidates) close(c.fd);
    throw;
  }
  for (const Candidate& c : candidates) close(c.fd);
}

}  // namespace

std::vector<PeerLink> ConnectPeers(const RankContext& context,
                                   const std::string& purpose,
                                   const std::string& name,
                                   milliseconds join_timeout,
                                   milliseconds timeout) {
  std::vector<PeerLink> links;
  const Join join{context,
                  purpose,
                  name + ": " + purpose,
                  timeout,
                  Clock::now() + join_timeout,
                  &links};
  int port = 0;
  const int listener =
      Listen(context.peers[context.rank].address, context.world_size, &port);
  try {
    context.store->Set(PortKey(purpose, context.rank), std::to_string(port));
    // Lower ranks first, then the higher ones' connections: rank 0 admits
    // at once, and each rank admits once its own connections are made.
    for (int to = 0; to < context.rank; ++to) {
      const milliseconds left(MillisecondsLeft(join.deadline));
      Connect(join, to, context.store->Get(PortKey(purpose, to), left));
    }
    Admit(join, listener);
  } catch (const StoreError& e) {
    close(listener);
    ClosePeers(&links);
    throw CommError(join.where + ": " + e.what());
  } catch (...) {
    close(listener);
    ClosePeers(&links);
    throw;
  }
  close(listener);
  std::sort(
      links.begin(), links.end(),
      [](const PeerLink& a, const PeerLink& b) { return a.rank < b.rank; });
  return links;
}

void ClosePeers(std::vector<PeerLink>* links) {
  for (const PeerLink& link : *links) close(link.fd);
  links->clear();
}

}  // namespace ringlab::comm
