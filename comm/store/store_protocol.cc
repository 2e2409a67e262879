#include "comm/store/store_protocol.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace ringlab::comm::store_protocol {
namespace {

std::string Keyed(const char* label, const std::string& server_nonce,
                  const std::string& client_nonce) {
  return std::string(label) + '\n' + server_nonce + client_nonce;
}

void AppendU32(std::string* out, uint32_t v) {
  out->append(reinterpret_cast<const char*>(&v), 4);
}

}  // namespace

std::string Hello(const std::string& server_nonce) {
  return std::string(kMagic, kMagicBytes) + server_nonce;
}

std::string ClientProof(const std::string& secret,
                        const std::string& server_nonce,
                        const std::string& client_nonce) {
  return std::string(kMagic, kMagicBytes) + client_nonce +
         HmacSha256(secret, Keyed("client", server_nonce, client_nonce));
}

std::string ServerProof(const std::string& secret,
                        const std::string& server_nonce,
                        const std::string& client_nonce) {
  return HmacSha256(secret, Keyed("server", server_nonce, client_nonce));
}

std::string SessionKey(const std::string& secret,
                       const std::string& server_nonce,
                       const std::string& client_nonce) {
  return HmacSha256(secret, Keyed("session", server_nonce, client_nonce));
}

std::string RequestFrame(uint8_t op, const std::string& key,
                         const std::string& value) {
  std::string out(1, static_cast<char>(op));
  AppendU32(&out, static_cast<uint32_t>(key.size()));
  AppendU32(&out, static_cast<uint32_t>(value.size()));
  return out + key + value;
}

std::string ReplyFrame(uint8_t status, const std::string& payload) {
  std::string out(1, static_cast<char>(status));
  AppendU32(&out, static_cast<uint32_t>(payload.size()));
  return out + payload;
}

std::string FrameTagger::Next(const std::string& frame) {
  std::string message = direction_ + '\n';
  message.append(reinterpret_cast<const char*>(&sequence_), 8);
  ++sequence_;
  return HmacSha256(key_, message + frame);
}

bool ParseInt64(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 24) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

std::string ErrnoText(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

bool SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool ReadExact(int fd, char* data, size_t n,
               std::chrono::steady_clock::time_point deadline,
               std::string* why) {
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd pfd{fd, POLLIN, 0};
    const int ready =
        poll(&pfd, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      *why = "no reply within the deadline";
      return false;
    }
    const ssize_t k = recv(fd, data, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      *why = k == 0 ? "the server closed the connection"
                    : std::string("recv: ") + std::strerror(errno);
      return false;
    }
    data += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

}  // namespace ringlab::comm::store_protocol
