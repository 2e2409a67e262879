// TcpStoreServer: one thread, one poll loop over the listening socket and
// every connection. A Get or Wait whose keys are missing parks its
// connection, which is answered by the Set or Add that completes them or at
// its deadline; nothing polls, here or in the clients.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/store/job_secret.h"
#include "comm/store/tcp_store.h"

namespace ringlab::comm {
namespace {

namespace wire = store_protocol;
using Clock = std::chrono::steady_clock;

// Between two log lines about dropped connections.
constexpr std::chrono::seconds kRejectionLogInterval{10};
// The longest a request may ask the server to wait: a day.
constexpr int64_t kMaxWaitMs = int64_t{86400} * 1000;

std::string PeerName(const sockaddr_in& peer) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(peer.sin_port));
}

}  // namespace

struct TcpStoreServer::Conn {
  int fd = -1;
  std::string peer;
  Clock::time_point accepted;
  bool admitted = false;  // proved it holds the secret
  std::string nonce;      // ours, sent in the hello
  std::string in;         // bytes received and not yet consumed
  wire::FrameTagger recv_tags{"", wire::kClientToServer};
  wire::FrameTagger send_tags{"", wire::kServerToClient};
  // A Get or Wait whose keys are not all there yet: answered once they are
  // or at its deadline; the connection's next request is read after that.
  bool waiting = false;
  uint8_t wait_op = 0;
  std::vector<std::string> wait_keys;
  Clock::time_point wait_deadline;
  bool resume = false;  // answered while more input was buffered
  bool dead = false;    // a reply could not be sent: dropped next turn
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port,
                               const std::string& secret)
    : secret_(secret.empty() ? GenerateJobSecret() : secret) {
  if (port < 0 || port > 65535) {
    throw std::invalid_argument("TcpStoreServer: port out of range: " +
                                std::to_string(port));
  }
  if (secret_.size() < kJobSecretBytes) {
    throw std::invalid_argument("TcpStoreServer: a secret of fewer than " +
                                std::to_string(kJobSecretBytes) + " bytes");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw std::invalid_argument("TcpStoreServer: not an IPv4 address: " + host);
  }
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    throw StoreError(wire::ErrnoText("TcpStoreServer: socket"));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 128) != 0) {
    std::string msg = wire::ErrnoText("TcpStoreServer: cannot listen on " +
                                      host + ":" + std::to_string(port));
    close(listen_fd_);
    throw StoreError(msg);
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    close(listen_fd_);
    throw StoreError(wire::ErrnoText("TcpStoreServer: pipe"));
  }
  thread_ = std::thread([this] { Serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  char c = 0;
  (void)!write(wake_pipe_[1], &c, 1);
  if (thread_.joinable()) thread_.join();
  close(wake_pipe_[0]);
  close(wake_pipe_[1]);
  close(listen_fd_);
}

void TcpStoreServer::NoteRejection(const std::string& why) {
  rejected_.fetch_add(1);
  const auto now = Clock::now();
  if (now < next_log_) {
    ++unlogged_;
    return;
  }
  std::fprintf(stderr, "TcpStoreServer: dropped a connection: %s%s\n",
               why.c_str(),
               unlogged_ > 0 ? (" (and " + std::to_string(unlogged_) +
                                " more since the last report)")
                                   .c_str()
                             : "");
  unlogged_ = 0;
  next_log_ = now + kRejectionLogInterval;
}

// One turn: expire handshakes and waits, poll, read, accept, resume.
void TcpStoreServer::Serve() {
  auto drop = [&](size_t i, const std::string& why) {
    if (!why.empty()) NoteRejection(why + " (" + conns_[i].peer + ")");
    close(conns_[i].fd);
    conns_.erase(conns_.begin() + static_cast<long>(i));
  };
  // While accept() fails for want of resources (EMFILE, ENFILE, ENOBUFS,
  // ENOMEM) the pending connection stays readable: stop polling for it a
  // while rather than spin.
  Clock::time_point accept_paused_until{};
  for (;;) {
    const auto now = Clock::now();
    auto wake = now >= accept_paused_until ? Clock::time_point::max()
                                           : accept_paused_until;
    for (size_t i = conns_.size(); i-- > 0;) {
      Conn& c = conns_[i];
      if (c.waiting && now >= c.wait_deadline) FinishWait(c);
      if (c.dead) {
        drop(i, "");
        continue;
      }
      if (c.waiting) wake = std::min(wake, c.wait_deadline);
      if (c.admitted) continue;
      const auto expires = c.accepted + kStoreHandshakeDeadline;
      if (now >= expires) {
        drop(i, "no handshake within " +
                    std::to_string(kStoreHandshakeDeadline.count()) + " ms");
      } else {
        wake = std::min(wake, expires);
      }
    }
    std::vector<pollfd> fds;
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_,
                   static_cast<short>(now >= accept_paused_until ? POLLIN : 0),
                   0});
    for (const Conn& c : conns_) fds.push_back({c.fd, POLLIN, 0});
    const int wait_ms =
        wake == Clock::time_point::max()
            ? -1
            : static_cast<int>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(wake -
                                                                        now)
                      .count()) +
                  1;
    if (poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      std::perror("TcpStoreServer: poll");
      break;
    }
    if (fds[0].revents != 0) break;
    // Backwards, so that dropping a connection keeps the indices valid.
    for (size_t i = fds.size() - 1; i >= 2; --i) {
      if (fds[i].revents == 0) continue;
      std::string why;
      if (!OnReadable(conns_[i - 2], &why)) drop(i - 2, why);
    }
    for (size_t i = conns_.size(); i-- > 0;) {
      if (!conns_[i].resume) continue;
      conns_[i].resume = false;
      std::string why;
      if (!ServeRequests(conns_[i], &why)) drop(i, why);
    }
    if (fds[1].revents & POLLIN) {
      if (!Accept()) {
        accept_paused_until = Clock::now() + std::chrono::milliseconds(50);
      }
    }
  }
  for (Conn& c : conns_) close(c.fd);
}

bool TcpStoreServer::Accept() {
  sockaddr_in peer{};
  socklen_t len = sizeof(peer);
  const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                         SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
        errno == ENOMEM) {
      std::fprintf(stderr,
                   "TcpStoreServer: accept failed (%s); retrying in 50 ms\n",
                   std::strerror(errno));
      return false;
    }
    return true;
  }
  Conn c;
  c.fd = fd;
  c.peer = PeerName(peer);
  c.accepted = Clock::now();
  if (conns_.size() >= kMaxStoreConnections) {
    NoteRejection("already " + std::to_string(conns_.size()) +
                  " connections, the most allowed (" + c.peer + ")");
    close(fd);
    return true;
  }
  const size_t pending = std::count_if(
      conns_.begin(), conns_.end(), [](const Conn& k) { return !k.admitted; });
  if (pending >= kMaxPendingStoreConnections) {
    // The oldest goes: a rank answers the hello at once, so a stranger that
    // opens connections and sends nothing loses its own first.
    auto oldest = std::find_if(conns_.begin(), conns_.end(),
                               [](const Conn& k) { return !k.admitted; });
    NoteRejection(
        "too many connections waiting to prove they hold the "
        "job's secret; dropped the oldest (" +
        oldest->peer + ")");
    close(oldest->fd);
    conns_.erase(oldest);
  }
  // A client that stops reading must not stall the server forever.
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  try {
    c.nonce = RandomBytes(wire::kNonceBytes);
  } catch (const std::exception& e) {
    NoteRejection(e.what());
    close(fd);
    return true;
  }
  const std::string hello = wire::Hello(c.nonce);
  if (!wire::SendAll(fd, hello.data(), hello.size())) {
    close(fd);
    return true;
  }
  conns_.push_back(std::move(c));
  return true;
}

bool TcpStoreServer::OnReadable(Conn& c, std::string* why) {
  char buf[65536];
  const ssize_t k = recv(c.fd, buf, sizeof(buf), 0);
  if (k < 0 && errno == EINTR) return true;
  if (k <= 0) {
    if (!c.admitted) {
      *why = "closed before proving it holds the job's secret";
    } else if (!c.in.empty()) {
      *why = "connection closed mid-request";
    }
    return false;
  }
  c.in.append(buf, static_cast<size_t>(k));
  if (!c.admitted && !Handshake(c, why)) return false;
  return !c.admitted || ServeRequests(c, why);
}

bool TcpStoreServer::Handshake(Conn& c, std::string* why) {
  if (c.in.size() < wire::kClientProofBytes) return true;  // more to come
  const std::string client_nonce =
      c.in.substr(wire::kMagicBytes, wire::kNonceBytes);
  const std::string expected =
      wire::ClientProof(secret_, c.nonce, client_nonce);
  if (!ConstantTimeEqual(c.in.substr(0, wire::kClientProofBytes), expected)) {
    *why = "it did not prove it holds the job's secret";
    return false;
  }
  c.in.erase(0, wire::kClientProofBytes);
  const std::string proof = wire::ServerProof(secret_, c.nonce, client_nonce);
  if (!wire::SendAll(c.fd, proof.data(), proof.size())) return false;
  const std::string session = wire::SessionKey(secret_, c.nonce, client_nonce);
  c.recv_tags = wire::FrameTagger(session, wire::kClientToServer);
  c.send_tags = wire::FrameTagger(session, wire::kServerToClient);
  c.admitted = true;
  admitted_.fetch_add(1);
  return true;
}

// The checks of a request's header: "" when it may be read on.
std::string TcpStoreServer::CheckHeader(uint8_t op, uint32_t klen,
                                        uint32_t vlen) {
  if (op != wire::kSet && op != wire::kGet && op != wire::kAdd &&
      op != wire::kWait) {
    return "unknown op " + std::to_string(op);
  }
  if (klen == 0 || klen > kMaxStoreKeyBytes) {
    return "key length " + std::to_string(klen) + " not in [1, " +
           std::to_string(kMaxStoreKeyBytes) + "]";
  }
  if (vlen > kMaxStoreValueBytes) {
    return "value length " + std::to_string(vlen) + " over " +
           std::to_string(kMaxStoreValueBytes);
  }
  // Get's value and Wait's key are a timeout, Add's value a number.
  if ((op == wire::kGet || op == wire::kAdd) && vlen > 24) {
    return "bad value length for op";
  }
  if (op == wire::kWait && klen > 24) return "bad key length for op";
  return "";
}

bool TcpStoreServer::ServeRequests(Conn& c, std::string* why) {
  while (!c.waiting && c.in.size() >= wire::kRequestHeaderBytes) {
    const uint8_t op = static_cast<uint8_t>(c.in[0]);
    uint32_t klen, vlen;
    std::memcpy(&klen, c.in.data() + 1, 4);
    std::memcpy(&vlen, c.in.data() + 5, 4);
    *why = CheckHeader(op, klen, vlen);
    if (!why->empty()) return false;
    const size_t frame_bytes = wire::kRequestHeaderBytes + klen + vlen;
    if (c.in.size() < frame_bytes + wire::kTagBytes) return true;
    const std::string frame = c.in.substr(0, frame_bytes);
    if (!ConstantTimeEqual(c.recv_tags.Next(frame),
                           c.in.substr(frame_bytes, wire::kTagBytes))) {
      *why = "a request failed authentication";
      return false;
    }
    c.in.erase(0, frame_bytes + wire::kTagBytes);
    const std::string key = frame.substr(wire::kRequestHeaderBytes, klen);
    const std::string value = frame.substr(wire::kRequestHeaderBytes + klen);
    if (op == wire::kSet || op == wire::kAdd) {
      if (!Reply(c, Execute(op, key, value))) return false;
      WakeWaiters();
    } else if (!StartWait(c, op, key, value, why)) {
      return false;
    }
  }
  return true;
}

// A Get (key, value: its timeout) or Wait (key: its timeout, value: the
// keys, each ended by '\0'): answered now when it can be, else parked.
bool TcpStoreServer::StartWait(Conn& c, uint8_t op, const std::string& key,
                               const std::string& value, std::string* why) {
  const std::string& timeout_text = op == wire::kGet ? value : key;
  int64_t timeout_ms = 0;
  if (!timeout_text.empty() &&
      (!wire::ParseInt64(timeout_text, &timeout_ms) || timeout_ms < 0)) {
    *why = "bad timeout for op";
    return false;
  }
  std::vector<std::string> keys;
  if (op == wire::kGet) {
    keys.push_back(key);
  } else {
    for (size_t at = 0; at < value.size();) {
      const size_t end = value.find('\0', at);
      if (end == std::string::npos || end == at ||
          end - at > kMaxStoreKeyBytes) {
        *why = "malformed key list";
        return false;
      }
      keys.push_back(value.substr(at, end - at));
      at = end + 1;
    }
  }
  c.waiting = true;
  c.wait_op = op;
  c.wait_keys = std::move(keys);
  c.wait_deadline = Clock::now() +
                    std::chrono::milliseconds(std::min(timeout_ms, kMaxWaitMs));
  if (Missing(c.wait_keys).empty() || timeout_ms == 0) FinishWait(c);
  return !c.dead;
}

std::vector<std::string> TcpStoreServer::Missing(
    const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (data_.count(key) == 0) missing.push_back(key);
  }
  return missing;
}

// Answers a parked request as things stand: found, or what is missing.
void TcpStoreServer::FinishWait(Conn& c) {
  const std::vector<std::string> missing = Missing(c.wait_keys);
  std::string payload;
  if (missing.empty() && c.wait_op == wire::kGet) {
    payload = data_.at(c.wait_keys[0]);
  }
  for (const std::string& key : missing) payload += key + '\0';
  c.waiting = false;
  c.wait_keys.clear();
  c.resume = !c.in.empty();
  Reply(c, wire::ReplyFrame(missing.empty() ? wire::kOk : wire::kNotFound,
                            payload));
}

void TcpStoreServer::WakeWaiters() {
  for (Conn& c : conns_) {
    if (c.waiting && Missing(c.wait_keys).empty()) FinishWait(c);
  }
}

bool TcpStoreServer::Reply(Conn& c, std::string frame) {
  frame += c.send_tags.Next(frame);
  if (!wire::SendAll(c.fd, frame.data(), frame.size())) c.dead = true;
  return !c.dead;
}

std::string TcpStoreServer::Execute(uint8_t op, const std::string& key,
                                    const std::string& value) {
  if (op == wire::kSet) {
    data_[key] = value;
    return wire::ReplyFrame(wire::kOk, "");
  }
  auto it = data_.find(key);
  int64_t delta = 0, old = 0, total = 0;
  if (!wire::ParseInt64(value, &delta) ||
      (it != data_.end() && !wire::ParseInt64(it->second, &old))) {
    return wire::ReplyFrame(wire::kError, "Add on a non-integer");
  }
  if (__builtin_add_overflow(old, delta, &total)) {
    return wire::ReplyFrame(
        wire::kError, "Add overflows int64: " + std::to_string(old) + " + " +
                          std::to_string(delta));
  }
  data_[key] = std::to_string(total);
  return wire::ReplyFrame(wire::kOk, data_[key]);
}

}  // namespace ringlab::comm
