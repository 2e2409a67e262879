#include "torch_backend/torch_store.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace ringlab::torch_backend {
namespace {

// Runs a call of torch's store, its failures as ringlab's: torch reports them
// as c10::Error, and its TCPStore's socket errors as std exceptions.
template <typename Fn>
auto Call(const std::string& what, Fn fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    throw comm::StoreError("torch store: " + what + ": " +
                           e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw comm::StoreError("torch store: " + what + ": " + e.what());
  }
}

}  // namespace

TorchStore::TorchStore(c10::intrusive_ptr<c10d::Store> store)
    : store_(std::move(store)) {}

void TorchStore::Set(const std::string& key, const std::string& value) {
  Call("set " + key, [&] {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  });
}

std::string TorchStore::Get(const std::string& key,
                            std::chrono::milliseconds timeout) {
  Wait({key}, timeout);
  const std::vector<uint8_t> value =
      Call("get " + key, [&] { return store_->get(key); });
  return std::string(value.begin(), value.end());
}

int64_t TorchStore::Add(const std::string& key, int64_t delta) {
  return Call("add " + key, [&] { return store_->add(key, delta); });
}

// Polls, never torch's timed wait: a TCPStore wait that times out stays
// registered at the server, whose late reply then answers the connection's
// next request. ringlab's callers wait in short slices (WaitWatching), so a
// slow peer would do that often. The poll backs off to 20 ms.
void TorchStore::Wait(const std::vector<std::string>& keys,
                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds pause(1);
  while (!Call("check " + comm::KeyList(keys),
               [&] { return store_->check(keys); })) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      throw comm::StoreTimeout("torch store: " + comm::KeyList(keys) +
                               " not set within " + comm::SecondsText(timeout));
    }
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace ringlab::torch_backend
