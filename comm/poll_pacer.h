// The rhythm of a host thread that polls a GPU (the GPU backends' waits): it
// spins (yielding) for the first 2 ms, since small collectives finish in
// microseconds and a sleep would dominate them, then sleeps 50 us between
// polls; the slower checks (peers' processes, deadlines) are due once a
// millisecond.
#ifndef RINGLAB_COMM_POLL_PACER_H_
#define RINGLAB_COMM_POLL_PACER_H_

#include <chrono>

namespace ringlab::comm {

class PollPacer {
 public:
  PollPacer();
  bool CheckDue();  // true about once a millisecond (and on the first call)
  void Pause();     // between two polls

 private:
  std::chrono::steady_clock::time_point start_, last_check_;
  bool first_ = true;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_POLL_PACER_H_
