// The key-value store through which the ranks of a job meet (as
// torch.distributed's Store): what they need to connect (shared-memory
// segment names, CUDA IPC handles, NCCL ids, every rank's peer information)
// goes in once at start-up, never on the hot path. TcpStore serves ranks that
// are processes (a server on MASTER_ADDR:MASTER_PORT, a client per rank),
// LocalStore ranks that are threads of one process; PrefixStore gives each
// communicator keys of its own. Waiting is the store's: Get and Wait block
// where the keys live (the server, the map's condition variable), so that no
// caller polls.
#ifndef RINGLAB_COMM_STORE_STORE_H_
#define RINGLAB_COMM_STORE_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringlab::comm {

// A store that cannot serve: its connection is lost, a request is malformed,
// Add met a non-integer. What a caller should report, not retry.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What Get and Wait throw at their deadline, naming the keys still missing.
class StoreTimeout : public StoreError {
 public:
  using StoreError::StoreError;
};

class Store {
 public:
  virtual ~Store() = default;
  virtual void Set(const std::string& key, const std::string& value) = 0;
  // The value of key once it exists, waiting up to timeout (0: only now).
  virtual std::string Get(const std::string& key,
                          std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer at key (0 if absent); returns the sum.
  virtual int64_t Add(const std::string& key, int64_t delta) = 0;
  // Returns once every key exists, waiting up to timeout (0: only now).
  virtual void Wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) = 0;
  // Whether every key exists now.
  bool Check(const std::vector<std::string>& keys);
};

// Waits for every key as Wait does, in slices of `slice`, calling
// `between()` after each slice that did not see them all: between may throw
// to end the wait early (a peer that died, a failure a rank reported).
// Throws StoreTimeout at the deadline.
void WaitWatching(
    Store& store, const std::vector<std::string>& keys,
    std::chrono::milliseconds timeout, const std::function<void()>& between,
    std::chrono::milliseconds slice = std::chrono::milliseconds(10));

// "name/0" ... "name/<n-1>": one key per rank.
std::vector<std::string> RankKeys(const std::string& name, int n);

// "keys a, b, c, d and 2 more": the keys of a message.
std::string KeyList(const std::vector<std::string>& keys);

// A wait's length as every message of comm says it: "1.5 s", "60 s".
std::string SecondsText(std::chrono::milliseconds wait);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_STORE_STORE_H_
