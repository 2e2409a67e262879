// Every key of another store under a prefix (c10d's PrefixStore), so that
// each communicator of a job, and each part of one, has keys of its own
// without counting them itself: the front gives every communicator
// PrefixStore("comm/<k>", job's store) for its rank's k-th creation, and a
// backend nests further ("join", "regions/3").
#ifndef RINGLAB_COMM_STORE_PREFIX_STORE_H_
#define RINGLAB_COMM_STORE_PREFIX_STORE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/store/store.h"

namespace ringlab::comm {

class PrefixStore : public Store {
 public:
  // Keys become "<prefix>/<key>" in base, which must outlive this store.
  PrefixStore(std::string prefix, Store* base);

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  void Wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override;

  const std::string& prefix() const { return prefix_; }

 private:
  std::string Key(const std::string& key) const { return prefix_ + key; }

  const std::string prefix_;  // with its trailing '/'
  Store* const base_;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_STORE_PREFIX_STORE_H_
