// TcpStore, the client: one connection per rank, one request at a time.
#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#include "comm/store/job_secret.h"

namespace ringlab::comm {
namespace {

namespace wire = store_protocol;
using Clock = std::chrono::steady_clock;

// Closes a descriptor unless released.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

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
    throw StoreError("TcpStore: cannot join the store at " + where_ +
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
    *why = wire::ErrnoText("connect");
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
        "the store refused this rank's secret (does this rank's job secret "
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

std::string TcpStore::local_address() const {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  char text[INET_ADDRSTRLEN] = "";
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text)) == nullptr) {
    return "";
  }
  return text;
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) close(fd_);
}

uint8_t TcpStore::Call(uint8_t op, const std::string& key,
                       const std::string& value, std::string* reply,
                       std::chrono::milliseconds server_wait) {
  if (key.empty() || key.size() > kMaxStoreKeyBytes) {
    throw std::invalid_argument("TcpStore: key length must be in [1, 4096]");
  }
  if (value.size() > kMaxStoreValueBytes) {
    throw std::invalid_argument("TcpStore: value over 16 MiB for key " + key);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) throw StoreError("TcpStore: connection to " + where_ + " lost");
  std::string request = wire::RequestFrame(op, key, value);
  request += send_tags_.Next(request);
  auto fail = [&](const std::string& why) {
    close(fd_);
    fd_ = -1;
    return StoreError("TcpStore: " + why + " (server " + where_ + ", key " +
                      key + ")");
  };
  if (!wire::SendAll(fd_, request.data(), request.size())) {
    throw fail(wire::ErrnoText("send"));
  }
  // The reply is due once the server's wait, if any, is over.
  const auto deadline = Clock::now() + server_wait + timeout_;
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
    throw StoreError("TcpStore: Set failed for key " + key + ": " + reply);
  }
}

std::string TcpStore::Get(const std::string& key,
                          std::chrono::milliseconds timeout) {
  timeout = std::max(timeout, std::chrono::milliseconds(0));
  std::string reply;
  const uint8_t status =
      Call(wire::kGet, key, std::to_string(timeout.count()), &reply, timeout);
  if (status == wire::kOk) return reply;
  if (status != wire::kNotFound) {
    throw StoreError("TcpStore: Get failed for key " + key + ": " + reply);
  }
  throw StoreTimeout("TcpStore: timed out after " +
                     std::to_string(timeout.count()) + " ms waiting for key " +
                     key);
}

void TcpStore::Wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) {
  timeout = std::max(timeout, std::chrono::milliseconds(0));
  std::string list;
  for (const std::string& key : keys) {
    if (key.empty() || key.size() > kMaxStoreKeyBytes ||
        key.find('\0') != std::string::npos) {
      throw std::invalid_argument(
          "TcpStore: a key must have 1 to 4096 bytes and no NUL");
    }
    list += key + '\0';
  }
  if (keys.empty()) return;
  std::string reply;
  const uint8_t status =
      Call(wire::kWait, std::to_string(timeout.count()), list, &reply, timeout);
  if (status == wire::kOk) return;
  std::vector<std::string> missing;
  for (size_t at = 0, end; (end = reply.find('\0', at)) != std::string::npos;
       at = end + 1) {
    missing.push_back(reply.substr(at, end - at));
  }
  if (status != wire::kNotFound || missing.empty()) {
    throw StoreError("TcpStore: Wait failed: " + reply);
  }
  throw StoreTimeout("TcpStore: timed out after " +
                     std::to_string(timeout.count()) + " ms waiting for " +
                     KeyList(missing));
}

int64_t TcpStore::Add(const std::string& key, int64_t delta) {
  std::string reply;
  if (Call(wire::kAdd, key, std::to_string(delta), &reply) != wire::kOk) {
    throw StoreError("TcpStore: Add failed for key " + key + ": " + reply);
  }
  int64_t v = 0;
  if (!wire::ParseInt64(reply, &v)) throw StoreError("TcpStore: bad Add reply");
  return v;
}

}  // namespace ringlab::comm
