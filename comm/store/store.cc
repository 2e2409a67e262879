#include "comm/store/store.h"

#include <algorithm>
#include <cstdio>

namespace ringlab::comm {

bool Store::Check(const std::vector<std::string>& keys) {
  try {
    Wait(keys, std::chrono::milliseconds(0));
    return true;
  } catch (const StoreTimeout&) {
    return false;
  }
}

void WaitWatching(Store& store, const std::vector<std::string>& keys,
                  std::chrono::milliseconds timeout,
                  const std::function<void()>& between,
                  std::chrono::milliseconds slice) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    try {
      store.Wait(keys, std::clamp(left, std::chrono::milliseconds(0), slice));
      return;
    } catch (const StoreTimeout&) {
      if (left <= slice) throw;
    }
    between();
  }
}

std::vector<std::string> RankKeys(const std::string& name, int n) {
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(name + "/" + std::to_string(r));
  return keys;
}

std::string KeyList(const std::vector<std::string>& keys) {
  constexpr size_t kNamed = 4;
  std::string text = keys.size() == 1 ? "key " : "keys ";
  for (size_t i = 0; i < keys.size() && i < kNamed; ++i) {
    text += (i == 0 ? "" : ", ") + keys[i];
  }
  if (keys.size() > kNamed) {
    text += " and " + std::to_string(keys.size() - kNamed) + " more";
  }
  return text;
}

std::string SecondsText(std::chrono::milliseconds wait) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", wait.count() / 1000.0);
  return text;
}

}  // namespace ringlab::comm
