// One suite for every Store (LocalStore, TcpStore, and PrefixStore over
// each): what a caller may rely on whichever store it was given — waits
// that end when the last key appears or at their deadline (naming what is
// missing), Check without waiting, Add's arithmetic, prefixes that keep
// communicators apart — plus what only the TCP store can get wrong: a
// parked wait must not hold up the server's other clients.
#include "comm/store/store.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/local_store.h"
#include "comm/store/prefix_store.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A store and a second handle on the same keys (another rank's).
struct StorePair {
  virtual ~StorePair() = default;
  Store* first = nullptr;
  Store* second = nullptr;
};

struct LocalPair : StorePair {
  LocalPair() { first = second = &store; }
  LocalStore store;
};

struct TcpPair : StorePair {
  TcpPair()
      : a("127.0.0.1", server.port(), milliseconds(5000), server.secret()),
        b("127.0.0.1", server.port(), milliseconds(5000), server.secret()) {
    first = &a;
    second = &b;
  }
  TcpStoreServer server;
  TcpStore a, b;
};

template <typename Base>
struct PrefixedPair : Base {
  PrefixedPair() : pa("comm/0", Base::first), pb("comm/0", Base::second) {
    Base::first = &pa;
    Base::second = &pb;
  }
  PrefixStore pa, pb;
};

template <typename Pair>
class StoreTest : public ::testing::Test {
 protected:
  Pair pair_;
  Store& a() { return *pair_.first; }
  Store& b() { return *pair_.second; }
};

using Stores = ::testing::Types<LocalPair, TcpPair, PrefixedPair<LocalPair>,
                                PrefixedPair<TcpPair>>;
TYPED_TEST_SUITE(StoreTest, Stores);

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TYPED_TEST(StoreTest, WaitEndsWhenTheLastKeyIsSet) {
  std::thread setter([&] {
    for (const char* key : {"x/0", "x/1", "x/2"}) {
      std::this_thread::sleep_for(milliseconds(50));
      this->b().Set(key, "v");
    }
  });
  const auto start = Clock::now();
  this->a().Wait(RankKeys("x", 3), milliseconds(10000));
  EXPECT_GE(SecondsSince(start), 0.1);
  EXPECT_LT(SecondsSince(start), 5.0);
  setter.join();
  EXPECT_EQ(this->a().Get("x/2", milliseconds(0)), "v");
}

TYPED_TEST(StoreTest, WaitTimesOutNamingTheMissingKeys) {
  this->b().Set("y/0", "v");
  const auto start = Clock::now();
  try {
    this->a().Wait(RankKeys("y", 3), milliseconds(200));
    FAIL() << "no timeout";
  } catch (const StoreTimeout& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("timed out"), std::string::npos) << what;
    EXPECT_NE(what.find("y/1"), std::string::npos) << what;
    EXPECT_NE(what.find("y/2"), std::string::npos) << what;
    EXPECT_EQ(what.find("y/0"), std::string::npos) << what;
  }
  EXPECT_GE(SecondsSince(start), 0.19);
  EXPECT_LT(SecondsSince(start), 5.0);
}

TYPED_TEST(StoreTest, GetAndCheckWithoutWaiting) {
  EXPECT_FALSE(this->a().Check({"z"}));
  EXPECT_THROW(this->a().Get("z", milliseconds(0)), StoreTimeout);
  this->b().Set("z", "");
  EXPECT_TRUE(this->a().Check({"z"}));
  EXPECT_TRUE(this->a().Check({}));
  EXPECT_EQ(this->a().Get("z", milliseconds(0)), "");
}

TYPED_TEST(StoreTest, GetTimesOutNamingTheKey) {
  const auto start = Clock::now();
  try {
    this->a().Get("never", milliseconds(200));
    FAIL() << "no timeout";
  } catch (const StoreTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos);
  }
  EXPECT_LT(SecondsSince(start), 5.0);
}

TYPED_TEST(StoreTest, GetWaitsForALaterSet) {
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    this->b().Set("late", "here");
  });
  EXPECT_EQ(this->a().Get("late", milliseconds(10000)), "here");
  setter.join();
}

TYPED_TEST(StoreTest, AddCountsAndWakesWaiters) {
  EXPECT_EQ(this->a().Add("n", 2), 2);
  EXPECT_EQ(this->b().Add("n", -5), -3);
  EXPECT_EQ(this->a().Get("n", milliseconds(0)), "-3");
  this->a().Set("s", "text");
  EXPECT_THROW(this->b().Add("s", 1), StoreError);
  std::thread adder([&] {
    std::this_thread::sleep_for(milliseconds(50));
    this->b().Add("counted", 1);
  });
  this->a().Wait({"counted"}, milliseconds(10000));
  adder.join();
}

// WaitWatching ends early when its check throws, and otherwise at the
// deadline, having checked between slices.
TYPED_TEST(StoreTest, WaitWatchingChecksBetweenSlices) {
  int checks = 0;
  EXPECT_THROW(WaitWatching(this->a(), {"never"}, milliseconds(10000),
                            [&] {
                              if (++checks == 3) {
                                throw std::runtime_error("peer died");
                              }
                            }),
               std::runtime_error);
  EXPECT_EQ(checks, 3);
  checks = 0;
  EXPECT_THROW(
      WaitWatching(this->a(), {"never"}, milliseconds(100), [&] { ++checks; }),
      StoreTimeout);
  EXPECT_GE(checks, 2);
}

TEST(PrefixStoreTest, PrefixesKeepCommunicatorsApart) {
  LocalStore base;
  PrefixStore first("comm/0", &base), second("comm/1", &base);
  first.Set("key", "0");
  second.Set("key", "1");
  EXPECT_EQ(first.Get("key", milliseconds(0)), "0");
  EXPECT_EQ(second.Get("key", milliseconds(0)), "1");
  EXPECT_EQ(base.Get("comm/1/key", milliseconds(0)), "1");
  PrefixStore nested("join", &second);
  nested.Set("k", "v");
  EXPECT_TRUE(base.Check({"comm/1/join/k"}));
  EXPECT_THROW(PrefixStore("x", nullptr), std::invalid_argument);
}

// The server has one thread: a client parked in a long Wait must not hold
// up another client's requests, and both waits end when their keys do.
TEST(TcpStoreWaitTest, AParkedWaitDoesNotHoldUpOtherClients) {
  TcpStoreServer server;
  auto connect = [&] {
    return std::make_unique<TcpStore>("127.0.0.1", server.port(),
                                      milliseconds(5000), server.secret());
  };
  auto waiter = connect(), other = connect(), setter = connect();
  std::thread parked([&] { waiter->Wait({"a", "b"}, milliseconds(20000)); });
  std::this_thread::sleep_for(milliseconds(100));
  const auto start = Clock::now();
  for (int i = 0; i < 50; ++i) other->Add("busy", 1);
  setter->Set("a", "1");
  EXPECT_EQ(other->Get("a", milliseconds(0)), "1");
  EXPECT_LT(SecondsSince(start), 2.0);
  setter->Set("b", "2");
  parked.join();
}

// A client that goes away while parked is dropped without harm to the
// others; a server that goes away ends the wait with an error, not a hang.
TEST(TcpStoreWaitTest, ParkedClientsComeAndGo) {
  auto server = std::make_unique<TcpStoreServer>();
  {
    TcpStore gone("127.0.0.1", server->port(), milliseconds(300),
                  server->secret());
    EXPECT_THROW(gone.Get("never", milliseconds(50)), StoreTimeout);
  }
  TcpStore a("127.0.0.1", server->port(), milliseconds(1000), server->secret());
  a.Set("k", "v");
  EXPECT_EQ(a.Get("k", milliseconds(0)), "v");
  std::thread stop([&] {
    std::this_thread::sleep_for(milliseconds(100));
    server.reset();
  });
  const auto start = Clock::now();
  EXPECT_THROW(a.Get("never", milliseconds(30000)), StoreError);
  EXPECT_LT(SecondsSince(start), 10.0);
  stop.join();
}

}  // namespace
}  // namespace ringlab::comm
