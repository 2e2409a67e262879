// The rhythm of a polling thread: checks about once a millisecond, spins
// first, then sleeps between polls.
#include "comm/poll_pacer.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;

TEST(PollPacerTest, ChecksAboutOnceAMillisecond) {
  PollPacer pacer;
  EXPECT_TRUE(pacer.CheckDue());  // the first call
  const auto start = std::chrono::steady_clock::now();
  int due = 0;
  while (std::chrono::steady_clock::now() - start < milliseconds(20)) {
    due += pacer.CheckDue();
    pacer.Pause();
  }
  const auto elapsed = std::chrono::duration_cast<milliseconds>(
      std::chrono::steady_clock::now() - start);
  // At most one check per millisecond elapsed (fewer when descheduled).
  EXPECT_LE(due, elapsed.count() + 1);
  EXPECT_GE(due, 1);
}

TEST(PollPacerTest, SleepsBetweenPollsAfterTwoMilliseconds) {
  PollPacer pacer;
  std::this_thread::sleep_for(milliseconds(3));
  const auto start = std::chrono::steady_clock::now();
  pacer.Pause();
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::microseconds(50));
}

}  // namespace
}  // namespace ringlab::comm
