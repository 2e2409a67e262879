#include "comm/poll_pacer.h"

#include <thread>

namespace ringlab::comm {

PollPacer::PollPacer()
    : start_(std::chrono::steady_clock::now()), last_check_(start_) {}

bool PollPacer::CheckDue() {
  const auto now = std::chrono::steady_clock::now();
  if (first_ || now - last_check_ >= std::chrono::milliseconds(1)) {
    first_ = false;
    last_check_ = now;
    return true;
  }
  return false;
}

void PollPacer::Pause() {
  if (std::chrono::steady_clock::now() - start_ <
      std::chrono::milliseconds(2)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace ringlab::comm
