// The host-side pieces the GPU backends share, tested without a GPU: handles
// as hex text, the peer watch (a dead local peer is named, a remote one is
// never judged by a local pid) and the poll pacer's rhythm.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "comm/peer_watch.h"
#include "comm/poll_pacer.h"
#include "comm/store/hex.h"
#include "comm/store/local_store.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;

TEST(HexTest, RoundTripsEveryByte) {
  unsigned char bytes[256];
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<unsigned char>(i);
  const std::string hex = ToHex(bytes, sizeof(bytes));
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(hex.size() - 4), "feff");
  unsigned char back[256] = {};
  ASSERT_TRUE(FromHex(hex, back, sizeof(back)));
  EXPECT_EQ(std::string(reinterpret_cast<char*>(back), 256),
            std::string(reinterpret_cast<char*>(bytes), 256));
}

TEST(HexTest, RefusesWrongLengthAndNonDigits) {
  uint32_t value = 0;
  EXPECT_FALSE(FromHex("0102", &value, sizeof(value)));
  EXPECT_FALSE(FromHex("010203040", &value, sizeof(value)));
  EXPECT_FALSE(FromHex("0102030g", &value, sizeof(value)));
  EXPECT_FALSE(FromHex(" 1020304", &value, sizeof(value)));
  EXPECT_TRUE(FromHex("0A0b0C0d", &value, sizeof(value)));
  EXPECT_EQ(ToHex(&value, sizeof(value)), "0a0b0c0d");
}

// A pid that has certainly exited: a child, already reaped.
pid_t ExitedPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST(PeerWatchTest, NamesTheLowestDeadLocalPeer) {
  LocalStore store;
  const pid_t dead = ExitedPid();
  const std::string host = HostIdentity();
  store.Set("job/pid/1", host + " " + std::to_string(getpid()));
  store.Set("job/pid/2", host + " " + std::to_string(dead));
  store.Set("job/pid/3", "another-host|ns " + std::to_string(dead));
  PeerWatch watch(&store, "job", 0, 4, milliseconds(1000));
  EXPECT_EQ(store.Get("job/pid/0", milliseconds(0)),
            host + " " + std::to_string(getpid()));
  EXPECT_FALSE(watch.Exited(1));
  EXPECT_TRUE(watch.Exited(2));
  EXPECT_FALSE(watch.Exited(3));  // another host's pid means nothing here
  EXPECT_FALSE(watch.Exited(0));
  EXPECT_FALSE(watch.Exited(7));
  EXPECT_EQ(watch.FirstDeadPeer(), 2);
}

TEST(PeerWatchTest, AloneOrWithoutStoreWatchesNobody) {
  LocalStore store;
  EXPECT_EQ(PeerWatch(&store, "solo", 0, 1, milliseconds(10)).FirstDeadPeer(),
            -1);
  EXPECT_EQ(PeerWatch(nullptr, "none", 0, 3, milliseconds(10)).FirstDeadPeer(),
            -1);
  EXPECT_EQ(PeerWatch().FirstDeadPeer(), -1);
}

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
