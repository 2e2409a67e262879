#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/store/job_secret.h"

namespace ringlab::comm {
namespace {

namespace wire = store_protocol;
using Clock = std::chrono::steady_clock;

// Between two log lines about dropped connections.
constexpr std::chrono::seconds kRejectionLogInterval{10};

std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

bool ParseInt64(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 24) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

std::string PeerName(const sockaddr_in& peer) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(peer.sin_port));
}

// Closes a descriptor unless released.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

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
  if (listen_fd_ < 0) throw CommError(Errno("TcpStoreServer: socket"));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 128) != 0) {
    std::string msg = Errno("TcpStoreServer: cannot listen on " + host + ":" +
                            std::to_string(port));
    close(listen_fd_);
    throw CommError(msg);
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    close(listen_fd_);
    throw CommError(Errno("TcpStoreServer: pipe"));
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

void TcpStoreServer::Serve() {
  std::vector<Conn> conns;
  auto drop = [&](size_t i, const std::string& why) {
    if (!why.empty()) NoteRejection(why + " (" + conns[i].peer + ")");
    close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<long>(i));
  };
  // While accept() fails for want of resources (EMFILE, ENFILE, ENOBUFS,
  // ENOMEM) the pending connection stays readable: stop polling for it a
  // while rather than spin.
  Clock::time_point accept_paused_until{};
  for (;;) {
    const auto now = Clock::now();
    auto wake = now >= accept_paused_until ? Clock::time_point::max()
                                           : accept_paused_until;
    for (size_t i = conns.size(); i-- > 0;) {
      if (conns[i].admitted) continue;
      const auto expires = conns[i].accepted + kStoreHandshakeDeadline;
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
    for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
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
      if (!OnReadable(conns[i - 2], &why)) drop(i - 2, why);
    }
    if (fds[1].revents & POLLIN) {
      if (!Accept(conns)) {
        accept_paused_until = Clock::now() + std::chrono::milliseconds(50);
      }
    }
  }
  for (Conn& c : conns) close(c.fd);
}

bool TcpStoreServer::Accept(std::vector<Conn>& conns) {
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
  if (conns.size() >= kMaxStoreConnections) {
    NoteRejection("already " + std::to_string(conns.size()) +
                  " connections, the most allowed (" + c.peer + ")");
    close(fd);
    return true;
  }
  const size_t pending = std::count_if(
      conns.begin(), conns.end(), [](const Conn& k) { return !k.admitted; });
  if (pending >= kMaxPendingStoreConnections) {
    // The oldest goes: a rank answers the hello at once, so a stranger that
    // opens connections and sends nothing loses its own first.
    auto oldest = std::find_if(conns.begin(), conns.end(),
                               [](const Conn& k) { return !k.admitted; });
    NoteRejection(
        "too many connections waiting to prove they hold the "
        "job's secret; dropped the oldest (" +
        oldest->peer + ")");
    close(oldest->fd);
    conns.erase(oldest);
  }
  // A client that stops reading must not stall the server forever.
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  try {
    c.nonce = RandomBytes(wire::kNonceBytes);
  } catch (const CommError& e) {
    NoteRejection(e.what());
    close(fd);
    return true;
  }
  const std::string hello = wire::Hello(c.nonce);
  if (!wire::SendAll(fd, hello.data(), hello.size())) {
    close(fd);
    return true;
  }
  conns.push_back(std::move(c));
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

bool TcpStoreServer::ServeRequests(Conn& c, std::string* why) {
  while (c.in.size() >= wire::kRequestHeaderBytes) {
    const uint8_t op = static_cast<uint8_t>(c.in[0]);
    uint32_t klen, vlen;
    std::memcpy(&klen, c.in.data() + 1, 4);
    std::memcpy(&vlen, c.in.data() + 5, 4);
    if (op != wire::kSet && op != wire::kGet && op != wire::kAdd) {
      *why = "unknown op " + std::to_string(op);
    } else if (klen == 0 || klen > kMaxStoreKeyBytes) {
      *why = "key length " + std::to_string(klen) + " not in [1, " +
             std::to_string(kMaxStoreKeyBytes) + "]";
    } else if (vlen > kMaxStoreValueBytes) {
      *why = "value length " + std::to_string(vlen) + " over " +
             std::to_string(kMaxStoreValueBytes);
    } else if ((op == wire::kGet && vlen != 0) ||
               (op == wire::kAdd && vlen > 24)) {
      *why = "bad value length for op";
    }
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
    std::string reply =
        Execute(op, frame.substr(wire::kRequestHeaderBytes, klen),
                frame.substr(wire::kRequestHeaderBytes + klen));
    reply += c.send_tags.Next(reply);
    if (!wire::SendAll(c.fd, reply.data(), reply.size())) return false;
  }
  return true;
}

std::string TcpStoreServer::Execute(uint8_t op, const std::string& key,
                                    const std::string& value) {
  if (op == wire::kSet) {
    data_[key] = value;
    return wire::ReplyFrame(wire::kOk, "");
  }
  auto it = data_.find(key);
  if (op == wire::kGet) {
    return it == data_.end() ? wire::ReplyFrame(wire::kNotFound, "")
                             : wire::ReplyFrame(wire::kOk, it->second);
  }
  int64_t delta = 0, old = 0, total = 0;
  if (!ParseInt64(value, &delta) ||
      (it != data_.end() && !ParseInt64(it->second, &old))) {
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

TcpStore::TcpStore(const std::string& host, int port,
                   std::chrono::milliseconds connect_timeout,
                   const std::string& secret)
    : TcpStore(host, port, connect_timeout,
               SecretSource([secret] { return secret; })) {}

TcpStore::TcpStore(const std::string& host, int port,
                   std::chrono::milliseconds connect_timeout,
                   const SecretSource& secret)
    : where_(host + ":" + std::to_string(port)), timeout_(connect_timeout) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    throw std::invalid_argument("TcpStore: cannot resolve " + host + ": " +
                                gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(res, freeaddrinfo);
  const auto deadline = Clock::now() + connect_timeout;
  std::string last;
  for (auto pause = std::chrono::milliseconds(1);;
       pause = std::min(pause * 2, std::chrono::milliseconds(100))) {
    if (TryJoin(res->ai_addr, res->ai_addrlen, secret, deadline, &last)) break;
    if (Clock::now() + pause > deadline) break;
    std::this_thread::sleep_for(pause);
  }
  if (fd_ < 0) {
    throw CommError("TcpStore: cannot join the store at " + where_ +
                    " within " + std::to_string(connect_timeout.count()) +
                    " ms: " + last);
  }
}

bool TcpStore::TryJoin(const void* address, size_t address_len,
                       const SecretSource& secret, Clock::time_point deadline,
                       std::string* why) {
  FdCloser fd{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (fd.fd < 0 || connect(fd.fd, static_cast<const sockaddr*>(address),
                           static_cast<socklen_t>(address_len)) != 0) {
    *why = Errno("connect");
    return false;
  }
  int one = 1;
  setsockopt(fd.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char hello[wire::kHelloBytes];
  if (!wire::ReadExact(fd.fd, hello, sizeof(hello), deadline, why)) {
    *why = "waiting for the store's hello: " + *why;
    return false;
  }
  if (std::memcmp(hello, wire::kMagic, wire::kMagicBytes) != 0) {
    *why = "what listens there is not a ringlab store";
    return false;
  }
  const std::string server_nonce(hello + wire::kMagicBytes, wire::kNonceBytes);
  std::string key = secret();
  for (auto pause = std::chrono::milliseconds(1); key.empty();
       pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    if (Clock::now() + pause > deadline) {
      *why = "no secret to present to the store yet";
      return false;
    }
    std::this_thread::sleep_for(pause);
    key = secret();
  }
  const std::string client_nonce = RandomBytes(wire::kNonceBytes);
  const std::string proof = wire::ClientProof(key, server_nonce, client_nonce);
  char theirs[wire::kServerProofBytes];
  if (!wire::SendAll(fd.fd, proof.data(), proof.size()) ||
      !wire::ReadExact(fd.fd, theirs, sizeof(theirs), deadline, why)) {
    *why =
        "the store refused this rank's secret (does RINGLAB_JOB_SECRET "
        "differ from rank 0's, or is another job's store on this port?)";
    return false;
  }
  if (!ConstantTimeEqual(std::string(theirs, sizeof(theirs)),
                         wire::ServerProof(key, server_nonce, client_nonce))) {
    *why =
        "the store did not prove it holds this job's secret (another "
        "job's store on this port?)";
    return false;
  }
  const std::string session = wire::SessionKey(key, server_nonce, client_nonce);
  send_tags_ = wire::FrameTagger(session, wire::kClientToServer);
  recv_tags_ = wire::FrameTagger(session, wire::kServerToClient);
  fd_ = fd.fd;
  fd.fd = -1;
  return true;
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) close(fd_);
}

uint8_t TcpStore::Call(uint8_t op, const std::string& key,
                       const std::string& value, std::string* reply) {
  if (key.empty() || key.size() > kMaxStoreKeyBytes) {
    throw std::invalid_argument("TcpStore: key length must be in [1, 4096]");
  }
  if (value.size() > kMaxStoreValueBytes) {
    throw std::invalid_argument("TcpStore: value over 16 MiB for key " + key);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) throw CommError("TcpStore: connection to " + where_ + " lost");
  std::string request = wire::RequestFrame(op, key, value);
  request += send_tags_.Next(request);
  auto fail = [&](const std::string& why) {
    close(fd_);
    fd_ = -1;
    return CommError("TcpStore: " + why + " (server " + where_ + ", key " +
                     key + ")");
  };
  if (!wire::SendAll(fd_, request.data(), request.size())) {
    throw fail(Errno("send"));
  }
  const auto deadline = Clock::now() + timeout_;
  std::string why;
  char head[wire::kReplyHeaderBytes];
  if (!wire::ReadExact(fd_, head, sizeof(head), deadline, &why)) {
    throw fail(why);
  }
  uint32_t len;
  std::memcpy(&len, head + 1, 4);
  if (len > kMaxStoreValueBytes) throw fail("oversized reply");
  std::string frame(head, sizeof(head));
  frame.resize(sizeof(head) + len + wire::kTagBytes);
  if (!wire::ReadExact(fd_, frame.data() + sizeof(head), len + wire::kTagBytes,
                       deadline, &why)) {
    throw fail(why);
  }
  const std::string tag = frame.substr(sizeof(head) + len);
  frame.resize(sizeof(head) + len);
  if (!ConstantTimeEqual(recv_tags_.Next(frame), tag)) {
    throw fail("a reply failed authentication");
  }
  reply->assign(frame, sizeof(head), len);
  return static_cast<uint8_t>(head[0]);
}

void TcpStore::Set(const std::string& key, const std::string& value) {
  std::string reply;
  if (Call(wire::kSet, key, value, &reply) != wire::kOk) {
    throw CommError("TcpStore: Set failed for key " + key + ": " + reply);
  }
}

std::string TcpStore::Get(const std::string& key,
                          std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string reply;
  for (auto pause = std::chrono::microseconds(200);;
       pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    uint8_t status = Call(wire::kGet, key, "", &reply);
    if (status == wire::kOk) return reply;
    if (status != wire::kNotFound) {
      throw CommError("TcpStore: Get failed for key " + key + ": " + reply);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
  }
  throw CommError("TcpStore: timed out after " +
                  std::to_string(timeout.count()) + " ms waiting for key " +
                  key);
}

int64_t TcpStore::Add(const std::string& key, int64_t delta) {
  std::string reply;
  if (Call(wire::kAdd, key, std::to_string(delta), &reply) != wire::kOk) {
    throw CommError("TcpStore: Add failed for key " + key + ": " + reply);
  }
  int64_t v = 0;
  if (!ParseInt64(reply, &v)) throw CommError("TcpStore: bad Add reply");
  return v;
}

}  // namespace ringlab::comm
