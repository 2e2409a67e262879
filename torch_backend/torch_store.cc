#include "torch_backend/torch_store.h"

#include <utility>

namespace ringlab::torch_backend {
namespace {

// torch reports a store's failures as c10::Error (a timeout too: "Socket
// Timeout", "Wait timeout"); ringlab's callers tell the two apart.
[[noreturn]] void Rethrow(const c10::Error& e, const std::string& what) {
  const std::string message = e.what_without_backtrace();
  if (message.find("imeout") != std::string::npos) {
    throw comm::StoreTimeout("torch store: " + what + ": " + message);
  }
  throw comm::StoreError("torch store: " + what + ": " + message);
}

}  // namespace

TorchStore::TorchStore(c10::intrusive_ptr<c10d::Store> store)
    : store_(std::move(store)) {}

void TorchStore::Set(const std::string& key, const std::string& value) {
  try {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const c10::Error& e) {
    Rethrow(e, "set " + key);
  }
}

std::string TorchStore::Get(const std::string& key,
                            std::chrono::milliseconds timeout) {
  Wait({key}, timeout);
  try {
    const std::vector<uint8_t> value = store_->get(key);
    return std::string(value.begin(), value.end());
  } catch (const c10::Error& e) {
    Rethrow(e, "get " + key);
  }
}

int64_t TorchStore::Add(const std::string& key, int64_t delta) {
  try {
    return store_->add(key, delta);
  } catch (const c10::Error& e) {
    Rethrow(e, "add " + key);
  }
}

void TorchStore::Wait(const std::vector<std::string>& keys,
                      std::chrono::milliseconds timeout) {
  try {
    // torch's zero timeout means "forever"; ringlab's means "only now".
    if (timeout.count() == 0) {
      if (!store_->check(keys)) {
        throw comm::StoreTimeout("torch store: " + comm::KeyList(keys) +
                                 " not there");
      }
      return;
    }
    store_->wait(keys, timeout);
  } catch (const c10::Error& e) {
    Rethrow(e, "wait for " + comm::KeyList(keys));
  }
}

}  // namespace ringlab::torch_backend
