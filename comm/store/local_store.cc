#include "comm/store/local_store.h"

#include <stdexcept>

namespace ringlab::comm {
void LocalStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();
}

std::string LocalStore::Get(const std::string& key,
                            std::chrono::milliseconds timeout) {
  Wait({key}, timeout);
  std::lock_guard<std::mutex> lock(mutex_);
  return data_[key];
}

void LocalStore::Wait(const std::vector<std::string>& keys,
                      std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto missing = [&] {
    std::vector<std::string> absent;
    for (const std::string& key : keys) {
      if (data_.count(key) == 0) absent.push_back(key);
    }
    return absent;
  };
  if (changed_.wait_for(lock, timeout, [&] { return missing().empty(); })) {
    return;
  }
  throw StoreTimeout("LocalStore: timed out after " + SecondsText(timeout) +
                     " waiting for " + KeyList(missing()));
}

int64_t LocalStore::Add(const std::string& key, int64_t delta) {
  int64_t sum = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string& value = data_[key];
    int64_t old = 0;
    if (!value.empty()) {
      size_t used = 0;
      try {
        old = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size()) {
        throw StoreError("LocalStore: Add on key " + key +
                         ", which holds a non-integer: '" + value + "'");
      }
    }
    sum = old + delta;
    value = std::to_string(sum);
  }
  changed_.notify_all();
  return sum;
}

}  // namespace ringlab::comm
