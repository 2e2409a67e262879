#include "comm/store/prefix_store.h"

#include <stdexcept>

namespace ringlab::comm {

PrefixStore::PrefixStore(std::string prefix, Store* base)
    : prefix_(std::move(prefix) + "/"), base_(base) {
  if (base_ == nullptr) {
    throw std::invalid_argument("PrefixStore: no store under " + prefix_);
  }
}

void PrefixStore::Set(const std::string& key, const std::string& value) {
  base_->Set(Key(key), value);
}

std::string PrefixStore::Get(const std::string& key,
                             std::chrono::milliseconds timeout) {
  return base_->Get(Key(key), timeout);
}

int64_t PrefixStore::Add(const std::string& key, int64_t delta) {
  return base_->Add(Key(key), delta);
}

void PrefixStore::Wait(const std::vector<std::string>& keys,
                       std::chrono::milliseconds timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) prefixed.push_back(Key(key));
  base_->Wait(prefixed, timeout);
}

}  // namespace ringlab::comm
