#include "torch_backend/mailbox.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "comm/store/store.h"

namespace ringlab::torch_backend {

Mailbox::Mailbox(TorchStore& store, int rank, int size,
                 std::chrono::milliseconds timeout)
    : store_(store), rank_(rank), size_(size), timeout_(timeout) {}

std::string Mailbox::Key(int from, int to, int tag, int64_t n) const {
  return "ringlab/p2p/" + std::to_string(from) + ">" + std::to_string(to) +
         "/" + std::to_string(tag) + "/" + std::to_string(n);
}

void Mailbox::Send(int to, int tag, const std::string& message) {
  int64_t n;
  {
    std::lock_guard<std::mutex> lock(sending_);
    n = sent_[{to, tag}]++;
  }
  store_.Set(Key(rank_, to, tag, n), message);
}

std::string Mailbox::Receive(int from, int tag, int* source) {
  std::lock_guard<std::mutex> lock(receiving_);
  std::vector<int> senders;
  for (int r = 0; r < size_; ++r) {
    if (from == kAnyRank ? r != rank_ : r == from) senders.push_back(r);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::chrono::milliseconds pause(1);
  for (;;) {
    for (int r : senders) {
      const std::string key = Key(r, rank_, tag, received_[{r, tag}]);
      if (!store_.Check({key})) continue;
      std::string message = store_.Get(key, timeout_);
      store_.Delete(key);
      ++received_[{r, tag}];
      *source = r;
      return message;
    }
    const auto now = std::chrono::steady_clock::now();
    TORCH_CHECK(now < deadline, "ringlab: Timed out after ",
                comm::SecondsText(timeout_), " in recv from ",
                from == kAnyRank ? std::string("any rank")
                                 : "rank " + std::to_string(from),
                " (tag ", tag, ")");
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace ringlab::torch_backend
