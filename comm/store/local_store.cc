#include "comm/store/local_store.h"

#include <stdexcept>

#include "comm/communicator.h"

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
  std::unique_lock<std::mutex> lock(mutex_);
  const auto found = [&] { return data_.count(key) > 0; };
  if (!changed_.wait_for(lock, timeout, found)) {
    throw CommError(
        "LocalStore: timed out after " +
        std::to_string(std::chrono::duration<double>(timeout).count()) +
        " s waiting for key " + key);
  }
  return data_[key];
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
        throw CommError("LocalStore: Add on key " + key +
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
