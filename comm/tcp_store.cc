#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::comm {
namespace {

// Wire format, host byte order (client and server are the same build):
//   request: u8 op, u32 key_len, u32 value_len, key, value
//   reply:   u8 status, u32 len, payload
enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
enum Status : uint8_t { kOk = 0, kNotFound = 1, kError = 2 };
constexpr size_t kHeaderBytes = 9;

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

bool SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::string Frame(uint8_t head, const std::string& a, const std::string* b) {
  std::string out(1, static_cast<char>(head));
  uint32_t la = static_cast<uint32_t>(a.size());
  out.append(reinterpret_cast<const char*>(&la), 4);
  if (b != nullptr) {
    uint32_t lb = static_cast<uint32_t>(b->size());
    out.append(reinterpret_cast<const char*>(&lb), 4);
  }
  out += a;
  if (b != nullptr) out += *b;
  return out;
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

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    throw std::invalid_argument("TcpStoreServer: port out of range: " +
                                std::to_string(port));
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
    std::string msg = Errno(("TcpStoreServer: cannot listen on " + host + ":" +
                             std::to_string(port))
                                .c_str());
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

void TcpStoreServer::Serve() {
  struct Conn {
    int fd;
    std::string in;
  };
  std::vector<Conn> conns;
  auto drop = [&](size_t i, const std::string& why) {
    if (!why.empty()) {
      std::fprintf(stderr, "TcpStoreServer: dropping connection: %s\n",
                   why.c_str());
      rejected_.fetch_add(1);
    }
    close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<long>(i));
  };
  // While accept() fails for want of resources (EMFILE, ENFILE, ENOBUFS,
  // ENOMEM) the pending connection stays readable: stop polling for it a
  // while rather than spin.
  using Clock = std::chrono::steady_clock;
  Clock::time_point accept_paused_until{};
  for (;;) {
    const auto now = Clock::now();
    const bool accepting = now >= accept_paused_until;
    std::vector<pollfd> fds;
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
    int wait_ms =
        accepting ? -1
                  : static_cast<int>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            accept_paused_until - now)
                            .count()) +
                        1;
    if (poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      std::perror("TcpStoreServer: poll");
      break;
    }
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                     errno == ENOMEM)) {
        std::fprintf(stderr,
                     "TcpStoreServer: accept failed (%s); retrying in 50 ms\n",
                     std::strerror(errno));
        accept_paused_until = Clock::now() + std::chrono::milliseconds(50);
      } else if (fd >= 0 && conns.size() >= kMaxStoreConnections) {
        std::fprintf(stderr,
                     "TcpStoreServer: refusing a connection: already %zu "
                     "(the most allowed)\n",
                     conns.size());
        rejected_.fetch_add(1);
        close(fd);
      } else if (fd >= 0) {
        // A client that stops reading must not stall the server forever.
        timeval tv{5, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conns.push_back({fd, {}});
      }
    }
    // Walk backwards so that dropping a connection keeps indices valid.
    for (size_t i = fds.size() - 1; i >= 2; --i) {
      if (fds[i].revents == 0) continue;
      size_t ci = i - 2;
      Conn& c = conns[ci];
      char buf[65536];
      ssize_t k = recv(c.fd, buf, sizeof(buf), 0);
      if (k <= 0) {
        drop(ci, c.in.empty() ? "" : "connection closed mid-request");
        continue;
      }
      c.in.append(buf, static_cast<size_t>(k));
      bool dropped = false;
      while (c.in.size() >= kHeaderBytes) {
        uint8_t op = static_cast<uint8_t>(c.in[0]);
        uint32_t klen, vlen;
        std::memcpy(&klen, c.in.data() + 1, 4);
        std::memcpy(&vlen, c.in.data() + 5, 4);
        std::string err;
        if (op != kSet && op != kGet && op != kAdd) {
          err = "unknown op " + std::to_string(op);
        } else if (klen == 0 || klen > kMaxStoreKeyBytes) {
          err = "key length " + std::to_string(klen) + " not in [1, " +
                std::to_string(kMaxStoreKeyBytes) + "]";
        } else if (vlen > kMaxStoreValueBytes) {
          err = "value length " + std::to_string(vlen) + " over " +
                std::to_string(kMaxStoreValueBytes);
        } else if ((op == kGet && vlen != 0) || (op == kAdd && vlen > 24)) {
          err = "bad value length for op";
        }
        if (!err.empty()) {
          drop(ci, err);
          dropped = true;
          break;
        }
        if (c.in.size() < kHeaderBytes + klen + vlen) break;
        std::string key = c.in.substr(kHeaderBytes, klen);
        std::string value = c.in.substr(kHeaderBytes + klen, vlen);
        c.in.erase(0, kHeaderBytes + klen + vlen);
        std::string reply;
        if (op == kSet) {
          data_[key] = value;
          reply = Frame(kOk, "", nullptr);
        } else if (op == kGet) {
          auto it = data_.find(key);
          reply = it == data_.end() ? Frame(kNotFound, "", nullptr)
                                    : Frame(kOk, it->second, nullptr);
        } else {
          int64_t delta = 0, old = 0;
          auto it = data_.find(key);
          if (!ParseInt64(value, &delta) ||
              (it != data_.end() && !ParseInt64(it->second, &old))) {
            reply = Frame(kError, "Add on a non-integer", nullptr);
          } else if (int64_t total;
                     __builtin_add_overflow(old, delta, &total)) {
            reply = Frame(kError,
                          "Add overflows int64: " + std::to_string(old) +
                              " + " + std::to_string(delta),
                          nullptr);
          } else {
            std::string sum = std::to_string(total);
            data_[key] = sum;
            reply = Frame(kOk, sum, nullptr);
          }
        }
        if (!SendAll(c.fd, reply.data(), reply.size())) {
          drop(ci, "");
          dropped = true;
          break;
        }
      }
      (void)dropped;
    }
  }
  for (Conn& c : conns) close(c.fd);
}

TcpStore::TcpStore(const std::string& host, int port,
                   std::chrono::milliseconds connect_timeout)
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
  auto deadline = std::chrono::steady_clock::now() + connect_timeout;
  std::string last;
  for (auto pause = std::chrono::milliseconds(1);;
       pause = std::min(pause * 2, std::chrono::milliseconds(100))) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ >= 0 && connect(fd_, res->ai_addr, res->ai_addrlen) == 0) break;
    last = std::strerror(errno);
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (std::chrono::steady_clock::now() + pause > deadline) break;
    std::this_thread::sleep_for(pause);
  }
  freeaddrinfo(res);
  if (fd_ < 0) {
    throw CommError("TcpStore: cannot connect to " + where_ + " within " +
                    std::to_string(connect_timeout.count()) + " ms: " + last);
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
  std::string req = Frame(op, key, &value);
  auto fail = [&](const std::string& why) {
    close(fd_);
    fd_ = -1;
    return CommError("TcpStore: " + why + " (server " + where_ + ", key " +
                     key + ")");
  };
  if (!SendAll(fd_, req.data(), req.size())) throw fail(Errno("send"));
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto read_exact = [&](char* p, size_t n) {
    while (n > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      pollfd pfd{fd_, POLLIN, 0};
      int pr = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left, 0)));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) throw fail("no reply within timeout");
      ssize_t k = recv(fd_, p, n, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) throw fail("server closed the connection");
      p += k;
      n -= static_cast<size_t>(k);
    }
  };
  char head[5];
  read_exact(head, 5);
  uint32_t len;
  std::memcpy(&len, head + 1, 4);
  if (len > kMaxStoreValueBytes) throw fail("oversized reply");
  reply->assign(len, '\0');
  read_exact(reply->data(), len);
  return static_cast<uint8_t>(head[0]);
}

void TcpStore::Set(const std::string& key, const std::string& value) {
  std::string reply;
  if (Call(kSet, key, value, &reply) != kOk) {
    throw CommError("TcpStore: Set failed for key " + key + ": " + reply);
  }
}

std::string TcpStore::Get(const std::string& key,
                          std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string reply;
  for (auto pause = std::chrono::microseconds(200);;
       pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    uint8_t status = Call(kGet, key, "", &reply);
    if (status == kOk) return reply;
    if (status != kNotFound) {
      throw CommError("TcpStore: Get failed for key " + key + ": " + reply);
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
  }
  throw CommError("TcpStore: timed out after " +
                  std::to_string(timeout.count()) + " ms waiting for key " +
                  key);
}

int64_t TcpStore::Add(const std::string& key, int64_t delta) {
  std::string reply;
  if (Call(kAdd, key, std::to_string(delta), &reply) != kOk) {
    throw CommError("TcpStore: Add failed for key " + key + ": " + reply);
  }
  int64_t v = 0;
  if (!ParseInt64(reply, &v)) throw CommError("TcpStore: bad Add reply");
  return v;
}

}  // namespace ringlab::comm
