#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/job_secret.h"
#include "comm/store/store_protocol.h"
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

// What the server sent until it closed the connection, the hello left out
// when it has been read already; "<still open>" when it did not close it
// within `wait`.
std::string ReceivedUntilClosed(
    int fd, std::chrono::milliseconds wait = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::string got;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd, POLLIN, 0};
    if (left.count() <= 0 ||
        poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
      return "<still open>";
    }
    char buf[256];
    const ssize_t k = recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) return got;
    got.append(buf, static_cast<size_t>(k));
  }
}

TEST(TcpStoreTest, SetGetAdd) {
  TcpStoreServer server;
  ASSERT_GT(server.port(), 0);
  TcpStore a("127.0.0.1", server.port(), milliseconds(5000), server.secret());
  TcpStore b("127.0.0.1", server.port(), milliseconds(5000), server.secret());
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
  EXPECT_THROW(a.Add("k", 1), StoreError);  // "v1" is not an integer
}

TEST(TcpStoreTest, AddOverflowIsAnErrorAndTheStoreGoesOn) {
  TcpStoreServer server;
  TcpStore a("127.0.0.1", server.port(), milliseconds(5000), server.secret());
  EXPECT_EQ(a.Add("big", INT64_MAX), INT64_MAX);
  EXPECT_THROW(a.Add("big", 1), StoreError);
  EXPECT_EQ(a.Add("big", 0), INT64_MAX);  // unchanged
  EXPECT_EQ(a.Add("small", INT64_MIN), INT64_MIN);
  EXPECT_THROW(a.Add("small", -1), StoreError);
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
  EXPECT_THROW(
      TcpStore("127.0.0.1", port, milliseconds(300), GenerateJobSecret()),
      StoreError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  close(held);
}

TEST(TcpStoreTest, ClientRejectsOversizedRequests) {
  TcpStoreServer server;
  TcpStore a("127.0.0.1", server.port(), milliseconds(5000), server.secret());
  EXPECT_THROW(a.Set(std::string(kMaxStoreKeyBytes + 1, 'k'), "v"),
               std::invalid_argument);
  EXPECT_THROW(a.Set("k", std::string(kMaxStoreValueBytes + 1, 'v')),
               std::invalid_argument);
  EXPECT_THROW(a.Set("", "v"), std::invalid_argument);
  a.Set("k", std::string(1 << 20, 'v'));  // large but legal
  EXPECT_EQ(a.Get("k", milliseconds(1000)).size(), size_t{1} << 20);
}

namespace wire = store_protocol;

// Reads exactly n bytes within 5 s; "" when the server closed first.
std::string ReadN(int fd, size_t n) {
  std::string out(n, '\0');
  std::string why;
  if (!wire::ReadExact(
          fd, out.data(), n,
          std::chrono::steady_clock::now() + std::chrono::seconds(5), &why)) {
    return "";
  }
  return out;
}

void SendString(int fd, const std::string& bytes) {
  ASSERT_TRUE(wire::SendAll(fd, bytes.data(), bytes.size()));
}

// A connection that completed the handshake by hand, to send frames that a
// TcpStore never would.
struct RawMember {
  int fd = -1;
  wire::FrameTagger send{"", wire::kClientToServer};
  wire::FrameTagger recv{"", wire::kServerToClient};
};

RawMember JoinByHand(int port, const std::string& secret) {
  RawMember m;
  m.fd = RawConnect(port);
  const std::string hello = ReadN(m.fd, wire::kHelloBytes);
  EXPECT_EQ(hello.substr(0, wire::kMagicBytes), "RLSTORE1");
  const std::string server_nonce = hello.substr(wire::kMagicBytes);
  const std::string client_nonce(wire::kNonceBytes, 'c');
  const std::string proof =
      wire::ClientProof(secret, server_nonce, client_nonce);
  EXPECT_TRUE(wire::SendAll(m.fd, proof.data(), proof.size()));
  EXPECT_EQ(ReadN(m.fd, wire::kServerProofBytes),
            wire::ServerProof(secret, server_nonce, client_nonce));
  const std::string session =
      wire::SessionKey(secret, server_nonce, client_nonce);
  m.send = wire::FrameTagger(session, wire::kClientToServer);
  m.recv = wire::FrameTagger(session, wire::kServerToClient);
  return m;
}

// A stranger may send anything, in any order: it gets the hello and then
// the connection closed, and no key is read or written for it.
TEST(TcpStoreTest, StrangersAreDroppedBeforeAnyKeyIsReadOrWritten) {
  TcpStoreServer server;
  TcpStore good("127.0.0.1", server.port(), milliseconds(5000),
                server.secret());
  good.Set("before", "1");
  const int64_t admitted = server.admitted_connections();
  std::vector<std::string> attempts;
  // A request with no handshake (padded to a handshake's length).
  std::string request = wire::RequestFrame(wire::kSet, "before", "evil");
  request.resize(wire::kClientProofBytes + 64, '\0');
  attempts.push_back(request);
  attempts.push_back(wire::ClientProof(GenerateJobSecret(),
                                       std::string(wire::kNonceBytes, 'x'),
                                       std::string(wire::kNonceBytes, 'y')));
  for (const std::string& attempt : attempts) {
    const int fd = RawConnect(server.port());
    std::string hello = ReadN(fd, wire::kHelloBytes);
    ASSERT_EQ(hello.size(), wire::kHelloBytes);
    SendString(fd, attempt);
    EXPECT_EQ(ReceivedUntilClosed(fd), "");
    close(fd);
  }
  // The right secret, but proving it for another connection's nonce (a
  // replayed handshake).
  {
    const int fd = RawConnect(server.port());
    ASSERT_EQ(ReadN(fd, wire::kHelloBytes).size(), wire::kHelloBytes);
    SendString(fd, wire::ClientProof(server.secret(),
                                     std::string(wire::kNonceBytes, 'n'),
                                     std::string(wire::kNonceBytes, 'c')));
    EXPECT_EQ(ReceivedUntilClosed(fd), "");
    close(fd);
  }
  // Random bytes, many times, on connections closed at once.
  std::mt19937 rng(1);
  for (int i = 0; i < 50; ++i) {
    int fd = RawConnect(server.port());
    std::vector<char> junk(1 + rng() % 64);
    for (char& c : junk) c = static_cast<char>(rng());
    send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    close(fd);
  }
  EXPECT_EQ(good.Get("before", milliseconds(1000)), "1");
  EXPECT_EQ(server.admitted_connections(), admitted);
  TcpStore fresh("127.0.0.1", server.port(), milliseconds(5000),
                 server.secret());
  EXPECT_EQ(fresh.Get("before", milliseconds(1000)), "1");
  EXPECT_GE(server.rejected_connections(), 53);
}

// A member of the job that sends garbage loses its connection; the server
// goes on serving everyone else, its data intact.
TEST(TcpStoreTest, MalformedForgedOrReplayedFramesDropTheConnection) {
  TcpStoreServer server;
  TcpStore good("127.0.0.1", server.port(), milliseconds(5000),
                server.secret());
  good.Set("before", "1");
  auto header = [](uint8_t op, uint32_t klen, uint32_t vlen) {
    std::string h(1, static_cast<char>(op));
    h.append(reinterpret_cast<const char*>(&klen), 4);
    h.append(reinterpret_cast<const char*>(&vlen), 4);
    return h;
  };
  // An unknown op; a key length far over the limit (must not try to
  // allocate 4 GiB); an oversized value.
  for (const std::string& bad :
       {header(42, 1, 0), header(wire::kSet, 0xffffffffu, 0),
        header(wire::kSet, 1, kMaxStoreValueBytes + 1)}) {
    RawMember m = JoinByHand(server.port(), server.secret());
    SendString(m.fd, bad);
    EXPECT_EQ(ReceivedUntilClosed(m.fd), "");
    close(m.fd);
  }
  // A well-formed request whose tag is wrong (altered in flight).
  {
    RawMember m = JoinByHand(server.port(), server.secret());
    const std::string frame = wire::RequestFrame(wire::kSet, "before", "2");
    std::string tag = m.send.Next(frame);
    tag[0] ^= 1;
    SendString(m.fd, frame + tag);
    EXPECT_EQ(ReceivedUntilClosed(m.fd), "");
    close(m.fd);
  }
  // A request sent twice (replayed): the first is served, the copy is not.
  {
    RawMember m = JoinByHand(server.port(), server.secret());
    const std::string frame = wire::RequestFrame(wire::kSet, "replayed", "1");
    const std::string tagged = frame + m.send.Next(frame);
    SendString(m.fd, tagged);
    const std::string reply = ReadN(m.fd, wire::kReplyHeaderBytes);
    ASSERT_EQ(reply.size(), wire::kReplyHeaderBytes);
    EXPECT_EQ(reply[0], wire::kOk);
    ASSERT_EQ(ReadN(m.fd, wire::kTagBytes), m.recv.Next(reply));
    good.Add("replayed", 1);  // "2" now; a replay would set it back to "1"
    SendString(m.fd, tagged);
    EXPECT_EQ(ReceivedUntilClosed(m.fd), "");
    close(m.fd);
  }
  EXPECT_EQ(good.Get("before", milliseconds(1000)), "1");
  EXPECT_EQ(good.Get("replayed", milliseconds(1000)), "2");
  EXPECT_GE(server.rejected_connections(), 5);
}

TEST(TcpStoreTest, AClientWithAnotherSecretGivesUpAtItsDeadline) {
  TcpStoreServer server;
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpStore("127.0.0.1", server.port(), milliseconds(500),
             GenerateJobSecret());
    ADD_FAILURE() << "joined with another secret";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("refused this rank's secret"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(server.admitted_connections(), 0);
}

// Something else listening on the store's port (another user's process that
// took it first) gets the client's proof, which is worth nothing elsewhere,
// and is not believed: it cannot prove it holds the secret.
TEST(TcpStoreTest, AnImpostorStoreIsNotBelieved) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  ASSERT_EQ(listen(listener, 16), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread impostor([listener] {
    for (;;) {
      const int fd = accept(listener, nullptr, nullptr);
      if (fd < 0) return;  // shut down
      const std::string hello =
          wire::Hello(std::string(wire::kNonceBytes, 'i'));
      wire::SendAll(fd, hello.data(), hello.size());
      ReadN(fd, wire::kClientProofBytes);
      const std::string bogus(wire::kServerProofBytes, 'b');
      wire::SendAll(fd, bogus.data(), bogus.size());
      close(fd);
    }
  });
  try {
    TcpStore("127.0.0.1", ntohs(addr.sin_port), milliseconds(300),
             GenerateJobSecret());
    ADD_FAILURE() << "believed the impostor";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("did not prove"), std::string::npos)
        << e.what();
  }
  shutdown(listener, SHUT_RDWR);
  impostor.join();
  close(listener);
}

// Strangers that connect and say nothing hold no slot for long: the job's
// ranks still get in at once, and every idle stranger is dropped by the
// handshake deadline.
TEST(TcpStoreTest, StrangersHoldingConnectionsDoNotLockOutTheJob) {
  TcpStoreServer server;
  std::vector<int> idle;
  for (size_t i = 0; i < 2 * kMaxPendingStoreConnections; ++i) {
    idle.push_back(RawConnect(server.port()));
  }
  // Well before the strangers' handshake deadline: room is made for the
  // member at once, not when the strangers time out.
  TcpStore member("127.0.0.1", server.port(), milliseconds(2000),
                  server.secret());
  member.Set("k", "v");
  EXPECT_EQ(member.Get("k", milliseconds(1000)), "v");
  for (int fd : idle) {
    const std::string got = ReceivedUntilClosed(
        fd, kStoreHandshakeDeadline + std::chrono::seconds(5));
    EXPECT_EQ(got.size(), wire::kHelloBytes) << "still open, or sent more";
    close(fd);
  }
  EXPECT_GE(server.rejected_connections(),
            static_cast<int64_t>(2 * kMaxPendingStoreConnections));
  EXPECT_EQ(member.Get("k", milliseconds(1000)), "v");  // still connected
}

// With a SecretSource the secret is read after connecting, and again after
// a refusal: a rank may connect before rank 0 has published it.
TEST(TcpStoreTest, TheSecretIsReadAfterConnectingUntilItIsRight) {
  TcpStoreServer server;
  int calls = 0;
  const std::string wrong = GenerateJobSecret();
  TcpStore late("127.0.0.1", server.port(), milliseconds(5000), [&] {
    ++calls;
    if (calls < 3) return std::string();
    return calls < 4 ? wrong : server.secret();
  });
  late.Set("k", "v");
  EXPECT_GE(calls, 4);
  EXPECT_EQ(server.admitted_connections(), 1);
}

// Ranks forked without exec (RunRanks, a program that forks its ranks) join
// the store while their parent's server thread is hashing other handshakes:
// the hashing must hold no lock a child could inherit held (with OpenSSL
// 3's HMAC, about one child in 200 waited forever under --config=asan).
TEST(TcpStoreTest, ClientsForkedWhileTheServerHashesJoin) {
  TcpStoreServer server;
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop) {
      TcpStore member("127.0.0.1", server.port(), milliseconds(5000),
                      server.secret());
    }
  });
  int joined = 0;
  constexpr int kChildren = 300;
  for (int i = 0; i < kChildren; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(10);  // a child that hangs is killed, and counted as failed
      TcpStore store("127.0.0.1", server.port(), milliseconds(5000),
                     server.secret());
      store.Set("child", "1");
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    joined += WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  stop = true;
  busy.join();
  EXPECT_EQ(joined, kChildren);
}

TEST(TcpStoreTest, BadAddressIsInvalidArgument) {
  EXPECT_THROW(TcpStoreServer("not-an-ip", 0), std::invalid_argument);
  EXPECT_THROW(TcpStoreServer("127.0.0.1", 70000), std::invalid_argument);
}

}  // namespace
}  // namespace ringlab::comm
