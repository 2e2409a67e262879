#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;

// A raw connection to the server, for feeding it garbage.
int RawConnect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

// True when the server closed the connection (recv returns 0 or an error).
bool ClosedByServer(int fd) {
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  return recv(fd, &c, 1, 0) <= 0;
}

TEST(TcpStoreTest, SetGetAdd) {
  TcpStoreServer server;
  ASSERT_GT(server.port(), 0);
  TcpStore a("127.0.0.1", server.port(), milliseconds(5000));
  TcpStore b("127.0.0.1", server.port(), milliseconds(5000));
  a.Set("k", "v1");
  EXPECT_EQ(b.Get("k", milliseconds(1000)), "v1");
  std::string binary("\0\xff\x01zz", 5);
  b.Set("bin", binary);
  EXPECT_EQ(a.Get("bin", milliseconds(1000)), binary);
  b.Set("empty", "");
  EXPECT_EQ(a.Get("empty", milliseconds(1000)), "");
  EXPECT_EQ(a.Add("n", 2), 2);
  EXPECT_EQ(b.Add("n", 5), 7);
  EXPECT_EQ(a.Add("n", -7), 0);
  EXPECT_THROW(a.Add("k", 1), CommError);  // "v1" is not an integer
}

TEST(TcpStoreTest, AddOverflowIsAnErrorAndTheStoreGoesOn) {
  TcpStoreServer server;
  TcpStore a("127.0.0.1", server.port(), milliseconds(5000));
  EXPECT_EQ(a.Add("big", INT64_MAX), INT64_MAX);
  EXPECT_THROW(a.Add("big", 1), CommError);
  EXPECT_EQ(a.Add("big", 0), INT64_MAX);  // unchanged
  EXPECT_EQ(a.Add("small", INT64_MIN), INT64_MIN);
  EXPECT_THROW(a.Add("small", -1), CommError);
  EXPECT_EQ(a.Add("small", 0), INT64_MIN);
}

// With no file descriptor left, accept() fails while the pending connection
// stays readable: the server must back off rather than spin on a core.
TEST(TcpStoreTest, AcceptWithoutDescriptorsDoesNotSpin) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    {
      TcpStoreServer server;
      // Use up the descriptors, then free one for the client's socket.
      std::vector<int> hog;
      for (;;) {
        int fd = dup(0);
        if (fd < 0) break;
        hog.push_back(fd);
      }
      close(hog.back());
      hog.pop_back();
      int client = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(server.port()));
      inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
      if (client < 0 || connect(client, reinterpret_cast<sockaddr*>(&addr),
                                sizeof(addr)) != 0) {
        _exit(3);
      }
      timespec t0, t1;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
      std::this_thread::sleep_for(milliseconds(500));
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
      double cpu = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
      // A spinning server burns the whole 0.5 s; backing off, a few ms.
      if (cpu > 0.2) code = 4;
      for (int fd : hog) close(fd);
      close(client);
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 3) << "could not connect";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the server spun on accept()";
}

TEST(TcpStoreTest, GetWaitsForALaterSet) {
  TcpStoreServer server;
  TcpStore a("127.0.0.1", server.port(), milliseconds(5000));
  std::thread setter([&] {
    TcpStore b("127.0.0.1", server.port(), milliseconds(5000));
    std::this_thread::sleep_for(milliseconds(100));
    b.Set("late", "here");
  });
  EXPECT_EQ(a.Get("late", milliseconds(10000)), "here");
  setter.join();
}

TEST(TcpStoreTest, GetTimesOutNamingTheKey) {
  TcpStoreServer server;
  TcpStore a("127.0.0.1", server.port(), milliseconds(5000));
  auto start = std::chrono::steady_clock::now();
  try {
    a.Get("never", milliseconds(200));
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(TcpStoreTest, ConnectGivesUpAtTheDeadline) {
  int port;
  {
    TcpStoreServer server;  // find a port that is then closed
    port = server.port();
  }
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", port, milliseconds(300)), CommError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(TcpStoreTest, ClientRejectsOversizedRequests) {
  TcpStoreServer server;
  TcpStore a("127.0.0.1", server.port(), milliseconds(5000));
  EXPECT_THROW(a.Set(std::string(kMaxStoreKeyBytes + 1, 'k'), "v"),
               std::invalid_argument);
  EXPECT_THROW(a.Set("k", std::string(kMaxStoreValueBytes + 1, 'v')),
               std::invalid_argument);
  EXPECT_THROW(a.Set("", "v"), std::invalid_argument);
  a.Set("k", std::string(1 << 20, 'v'));  // large but legal
  EXPECT_EQ(a.Get("k", milliseconds(1000)).size(), size_t{1} << 20);
}

TEST(TcpStoreTest, ServerDropsGarbageAndKeepsServing) {
  TcpStoreServer server;
  TcpStore good("127.0.0.1", server.port(), milliseconds(5000));
  good.Set("before", "1");

  // Unknown op.
  {
    int fd = RawConnect(server.port());
    const char bad[9] = {42, 1, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ(send(fd, bad, 9, 0), 9);
    EXPECT_TRUE(ClosedByServer(fd));
    close(fd);
  }
  // A key length far over the limit: must not try to allocate 4 GiB.
  {
    int fd = RawConnect(server.port());
    char bad[9] = {1};
    uint32_t huge = 0xffffffffu;
    std::memcpy(bad + 1, &huge, 4);
    ASSERT_EQ(send(fd, bad, 9, 0), 9);
    EXPECT_TRUE(ClosedByServer(fd));
    close(fd);
  }
  // An oversized value.
  {
    int fd = RawConnect(server.port());
    char bad[9] = {1};
    uint32_t one = 1, big = kMaxStoreValueBytes + 1;
    std::memcpy(bad + 1, &one, 4);
    std::memcpy(bad + 5, &big, 4);
    ASSERT_EQ(send(fd, bad, 9, 0), 9);
    EXPECT_TRUE(ClosedByServer(fd));
    close(fd);
  }
  // Random bytes, many times; and a connection closed mid-request.
  std::mt19937 rng(1);
  for (int i = 0; i < 50; ++i) {
    int fd = RawConnect(server.port());
    std::vector<char> junk(1 + rng() % 64);
    for (char& c : junk) c = static_cast<char>(rng());
    send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    close(fd);
  }
  // The server still answers a well-behaved client, with its data intact.
  EXPECT_EQ(good.Get("before", milliseconds(1000)), "1");
  TcpStore fresh("127.0.0.1", server.port(), milliseconds(5000));
  fresh.Set("after", "2");
  EXPECT_EQ(good.Get("after", milliseconds(1000)), "2");
  EXPECT_GE(server.rejected_connections(), 3);
}

TEST(TcpStoreTest, BadAddressIsInvalidArgument) {
  EXPECT_THROW(TcpStoreServer("not-an-ip", 0), std::invalid_argument);
  EXPECT_THROW(TcpStoreServer("127.0.0.1", 70000), std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::comm
