// An in-process rendezvous store (as torch.distributed's HashStore): a
// key-value map behind a mutex, for jobs whose ranks are threads of one
// process (ipc_ring_threads, the trainer's and the benchmarks' threads mode).
// Ranks-as-processes use TcpStore instead; the interface is the same, so a
// backend neither knows nor cares which one it was given.
#ifndef RINGLAB_COMM_STORE_LOCAL_STORE_H_
#define RINGLAB_COMM_STORE_LOCAL_STORE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/store/store.h"

namespace ringlab::comm {

class LocalStore : public Store {
 public:
  LocalStore() = default;
  LocalStore(const LocalStore&) = delete;
  LocalStore& operator=(const LocalStore&) = delete;

  void Set(const std::string& key, const std::string& value) override;
  // Throws StoreTimeout("LocalStore: timed out after S s waiting for key K")
  // when the key does not appear within timeout.
  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override;
  // Throws StoreError for a key that holds a non-integer.
  int64_t Add(const std::string& key, int64_t delta) override;
  void Wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_STORE_LOCAL_STORE_H_
