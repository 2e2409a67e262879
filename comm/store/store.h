// A small key-value rendezvous store through which ranks exchange what they
// need to connect: shared-memory segment names, CUDA IPC handles, NCCL unique
// ids. TcpStore is the one used across processes (as torch.distributed's
// TCPStore): a server on MASTER_ADDR:MASTER_PORT, a client per rank.
#ifndef RINGLAB_COMM_STORE_STORE_H_
#define RINGLAB_COMM_STORE_STORE_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace ringlab::comm {

class Store {
 public:
  virtual ~Store() = default;
  virtual void Set(const std::string& key, const std::string& value) = 0;
  // Blocks until key exists; throws CommError naming the key after timeout.
  virtual std::string Get(const std::string& key,
                          std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer at key (0 if absent); returns the sum.
  virtual int64_t Add(const std::string& key, int64_t delta) = 0;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_STORE_STORE_H_
