// A TCP rendezvous store, as torch.distributed's TCPStore: one server (a
// thread inside the launcher or rank 0) holding a key-value map, and one client
// per rank. Ranks use it once at start-up to exchange what they need to connect
// (shared-memory segment names, CUDA IPC handles, NCCL ids), never on the hot
// path. The protocol is length-prefixed binary with hard limits; a malformed
// or oversized request drops that connection with a logged error and the
// server keeps serving everyone else.
#ifndef RINGLAB_COMM_TCP_STORE_H_
#define RINGLAB_COMM_TCP_STORE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "comm/store.h"

namespace ringlab::comm {

// Limits on one request; anything larger is treated as garbage.
inline constexpr uint32_t kMaxStoreKeyBytes = 4 << 10;
inline constexpr uint32_t kMaxStoreValueBytes = 16 << 20;
// Connections the server holds at once; more are accepted and closed at once
// (counted in rejected_connections()), so that a runaway client cannot
// exhaust the launcher's file descriptors.
inline constexpr size_t kMaxStoreConnections = 1024;

class TcpStoreServer {
 public:
  // Binds host:port ("127.0.0.1" by default: the store trusts its clients, so
  // it is not exposed beyond this machine unless asked). port 0 picks a free
  // port; port() reports it. Throws CommError when it cannot listen.
  explicit TcpStoreServer(const std::string& host = "127.0.0.1", int port = 0);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // Connections dropped for protocol errors so far (for tests).
  int64_t rejected_connections() const { return rejected_.load(); }

 private:
  void Serve();

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<int64_t> rejected_{0};
  std::map<std::string, std::string> data_;  // only touched by the thread
  std::thread thread_;
};

class TcpStore : public Store {
 public:
  // Connects to host:port, retrying until connect_timeout (the server may not
  // be up yet). The same timeout bounds each later request's reply.
  TcpStore(const std::string& host, int port,
           std::chrono::milliseconds connect_timeout);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override;
  int64_t Add(const std::string& key, int64_t delta) override;

 private:
  // Sends one request and reads the status byte and payload of its reply.
  uint8_t Call(uint8_t op, const std::string& key, const std::string& value,
               std::string* reply);

  std::mutex mutex_;
  int fd_ = -1;
  std::string where_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_TCP_STORE_H_
