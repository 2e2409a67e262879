#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
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

// The status files of every thread of this process but the calling one,
// opened now: the test reads them once it has no descriptor left to open.
std::vector<int> OpenOtherThreadsStatus() {
  std::vector<int> fds;
  const std::string self = std::to_string(syscall(SYS_gettid));
  DIR* tasks = opendir("/proc/self/task");
  while (dirent* e = tasks ? readdir(tasks) : nullptr) {
    if (e->d_name[0] == '.' || self == e->d_name) continue;
    const std::string path =
        std::string("/proc/self/task/") + e->d_name + "/status";
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) fds.push_back(fd);
  }
  if (tasks) closedir(tasks);
  return fds;
}

// Their voluntary context switches: a thread that waits (poll with a
// timeout, sleep) switches voluntarily; one that spins never does, however
// loaded the machine.
int64_t VoluntarySwitches(const std::vector<int>& status_fds) {
  int64_t total = 0;
  for (int fd : status_fds) {
    char buf[4096];
    const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) continue;
    buf[n] = '\0';
    const char* line = std::strstr(buf, "\nvoluntary_ctxt_switches:");
    if (line)
      total += std::atoll(line + std::strlen("\nvoluntary_ctxt_switches:"));
  }
  return total;
}

// With no file descriptor left, accept() fails while the pending connection
// stays readable: the server must back off (it waits 50 ms between tries)
// rather than spin on a core. Judged by the server thread's voluntary
// context switches over 0.5 s, not by CPU time, which a spinning thread on a
// busy machine may not get.
TEST(TcpStoreTest, AcceptWithoutDescriptorsDoesNotSpin) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    {
      TcpStoreServer server;
      const std::vector<int> server_threads = OpenOtherThreadsStatus();
      // Use up the descriptors (duplicating one of our own, not an inherited
      // one), then free one for the client's socket.
      const int base = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (base < 0) _exit(5);
      std::vector<int> hog;
      for (;;) {
        int fd = dup(base);
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
      const int64_t before = VoluntarySwitches(server_threads);
      std::this_thread::sleep_for(milliseconds(500));
      const int64_t waits = VoluntarySwitches(server_threads) - before;
      // Backing off: about 10 waits of 50 ms; spinning: none at all.
      if (waits < 3) code = 4;
      for (int fd : hog) close(fd);
      close(base);
      close(client);
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 3) << "could not connect";
  EXPECT_NE(WEXITSTATUS(status), 5) << "could not open /dev/null";
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

// A port held bound but not listening refuses every connection for as long
// as this test holds it (a port merely closed could be taken by a parallel
// test in between).
TEST(TcpStoreTest, ConnectGivesUpAtTheDeadline) {
  const int held = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", port, milliseconds(300)), CommError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  close(held);
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
