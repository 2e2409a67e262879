// A TCP rendezvous store, as torch.distributed's TCPStore: one server (a
// thread inside the launcher or rank 0) holding a key-value map, and one client
// per rank. Ranks use it once at start-up to exchange what they need to connect
// (shared-memory segment names, CUDA IPC handles, NCCL ids), never on the hot
// path. The server admits only clients that prove they hold the job's secret
// (comm/store/store_protocol.h): a connection that does not is dropped before
// any key is read or written, and every later frame is authenticated. Hard
// limits bound what any connection can cost the server: a malformed or
// oversized request drops that connection with a logged error, a connection
// that has not proved itself within kStoreHandshakeDeadline is dropped, and at
// most kMaxPendingStoreConnections wait to prove themselves at once (the oldest
// goes first), so strangers can neither read nor write keys nor crowd out the
// job's ranks.
#ifndef RINGLAB_COMM_STORE_TCP_STORE_H_
#define RINGLAB_COMM_STORE_TCP_STORE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/store.h"
#include "comm/store/store_protocol.h"

namespace ringlab::comm {

// Limits on one request; anything larger is treated as garbage.
inline constexpr uint32_t kMaxStoreKeyBytes = 4 << 10;
inline constexpr uint32_t kMaxStoreValueBytes = 16 << 20;
// Connections the server holds at once; more are accepted and closed at once
// (counted in rejected_connections()), so that a runaway client cannot
// exhaust the launcher's file descriptors.
inline constexpr size_t kMaxStoreConnections = 1024;
// Connections that have not yet proved they hold the secret: at most this
// many at once, each for at most kStoreHandshakeDeadline.
inline constexpr size_t kMaxPendingStoreConnections = 64;
inline constexpr std::chrono::milliseconds kStoreHandshakeDeadline{5000};

class TcpStoreServer {
 public:
  // Binds host:port (an IPv4 address; 0.0.0.0 for every interface) and
  // serves only clients holding `secret` (raw bytes, at least
  // kJobSecretBytes). An empty secret draws a fresh one (secret() returns
  // it), for a store whose clients are this process and its children. port 0
  // picks a free port; port() reports it. Throws std::invalid_argument for a
  // malformed address, port or secret, CommError when it cannot listen.
  explicit TcpStoreServer(const std::string& host = "127.0.0.1", int port = 0,
                          const std::string& secret = "");
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& secret() const { return secret_; }
  // Connections dropped so far: failed handshakes, protocol errors, limits.
  int64_t rejected_connections() const { return rejected_.load(); }
  // Connections that completed the handshake so far (for tests).
  int64_t admitted_connections() const { return admitted_.load(); }

 private:
  struct Conn;
  using Clock = std::chrono::steady_clock;

  void Serve();
  // Accepts one connection and sends it the hello; false when accept() ran
  // out of resources (the caller pauses accepting a while).
  bool Accept();
  // Reads what a connection sent and acts on it; false when it must go, with
  // *why saying why (empty for an orderly close).
  bool OnReadable(Conn& c, std::string* why);
  bool Handshake(Conn& c, std::string* why);
  bool ServeRequests(Conn& c, std::string* why);
  static std::string CheckHeader(uint8_t op, uint32_t klen, uint32_t vlen);
  bool StartWait(Conn& c, uint8_t op, const std::string& key,
                 const std::string& value, std::string* why);
  std::vector<std::string> Missing(const std::vector<std::string>& keys) const;
  void FinishWait(Conn& c);
  // Answers every parked request whose keys are all there now.
  void WakeWaiters();
  // Tags and sends a reply; false (and the connection marked dead) when the
  // client cannot take it.
  bool Reply(Conn& c, std::string frame);
  // Set and Add.
  std::string Execute(uint8_t op, const std::string& key,
                      const std::string& value);
  // Counts a dropped connection; logs the first and then one line per
  // interval at most, so that a stranger cannot flood the job's stderr.
  void NoteRejection(const std::string& why);

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::string secret_;
  std::atomic<int64_t> rejected_{0};
  std::atomic<int64_t> admitted_{0};
  int64_t unlogged_ = 0;  // rejections since the last log line
  Clock::time_point next_log_{};
  // Only touched by the thread.
  std::map<std::string, std::string> data_;
  std::vector<Conn> conns_;
  std::thread thread_;
};

class TcpStore : public Store {
 public:
  // Where a client finds the job's secret (raw bytes). Called after each
  // connect, so that it may read what the server published once it listened;
  // an empty result means "not yet": the client tries again.
  using SecretSource = std::function<std::string()>;

  // Connects to host:port and authenticates (the server proves it holds the
  // secret too), retrying until connect_timeout: the server may not be up
  // yet, or may hold another job's secret until the right one listens. The
  // same timeout bounds each later request's reply. Throws CommError naming
  // the last failure.
  TcpStore(const std::string& host, int port,
           std::chrono::milliseconds connect_timeout,
           const std::string& secret);
  TcpStore(const std::string& host, int port,
           std::chrono::milliseconds connect_timeout,
           const SecretSource& secret);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void Set(const std::string& key, const std::string& value) override;
  // The server waits (one request, answered when the key is set or at the
  // deadline); StoreTimeout naming the key after timeout.
  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  // The address this client reached the server from (getsockname): one of
  // this host's that the server's network reaches.
  std::string local_address() const;
  // As Get, for every key; StoreTimeout names those still missing.
  void Wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override;

 private:
  // One connect and handshake; false with *why when it failed.
  bool TryJoin(const void* address, size_t address_len,
               const SecretSource& secret,
               std::chrono::steady_clock::time_point deadline,
               std::string* why);
  // Sends one request and reads the status byte and payload of its reply,
  // due within the connection's timeout after `server_wait`.
  uint8_t Call(
      uint8_t op, const std::string& key, const std::string& value,
      std::string* reply,
      std::chrono::milliseconds server_wait = std::chrono::milliseconds(0));

  std::mutex mutex_;
  int fd_ = -1;
  std::string where_;
  std::chrono::milliseconds timeout_;
  store_protocol::FrameTagger send_tags_{"", store_protocol::kClientToServer};
  store_protocol::FrameTagger recv_tags_{"", store_protocol::kServerToClient};
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_STORE_TCP_STORE_H_
