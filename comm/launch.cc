#include "comm/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "comm/job_secret.h"
#include "comm/tcp_store.h"

extern char** environ;

namespace ringlab::comm {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal.store(sig); }

void WriteAll(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// A line longer than this is forwarded in pieces, each prefixed: output
// without newlines must not grow the launcher without bound.
constexpr size_t kMaxPartialLine = 64 << 10;

// One child stream (stdout or stderr) being forwarded.
struct Stream {
  int fd = -1;     // read end, -1 once closed
  int out_fd = 1;  // where its lines go
  std::string prefix;
  std::string partial;  // the current line, until its newline

  void Forward(const char* data, size_t n) {
    partial.append(data, n);
    size_t start = 0, nl;
    std::string out;
    while ((nl = partial.find('\n', start)) != std::string::npos) {
      out += prefix;
      out.append(partial, start, nl + 1 - start);
      start = nl + 1;
    }
    partial.erase(0, start);
    while (partial.size() >= kMaxPartialLine) {
      out += prefix;
      out.append(partial, 0, kMaxPartialLine);
      out += '\n';
      partial.erase(0, kMaxPartialLine);
    }
    if (!out.empty()) WriteAll(out_fd, out);
  }
  void Flush() {
    if (!partial.empty()) WriteAll(out_fd, prefix + partial + "\n");
    partial.clear();
  }
};

}  // namespace

int LaunchRanks(int nprocs, const std::vector<std::string>& argv,
                const LaunchOptions& options) {
  if (nprocs < 1) {
    throw std::invalid_argument("LaunchRanks: nprocs must be at least 1, got " +
                                std::to_string(nprocs));
  }
  if (argv.empty()) throw std::invalid_argument("LaunchRanks: empty argv");
  // The job's secret: the store admits only the ranks, which get it in
  // their environment (readable by this user only, /proc/<pid>/environ).
  TcpStoreServer server("127.0.0.1", 0, GenerateJobSecret());
  const std::string secret_hex = JobSecretToHex(server.secret());

  // Everything the children need is built before fork: the store thread is
  // running, so a child may only make async-signal-safe calls until exec.
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const char* exe = options.exec_self ? "/proc/self/exe" : argv[0].c_str();
  std::vector<std::vector<std::string>> envs(nprocs);
  std::vector<std::vector<char*>> envps(nprocs);
  const char* ours[] = {"RANK=",
                        "WORLD_SIZE=",
                        "LOCAL_RANK=",
                        "LOCAL_WORLD_SIZE=",
                        "MASTER_ADDR=",
                        "MASTER_PORT=",
                        "RINGLAB_STORE_HOSTED=",
                        "RINGLAB_JOB_SECRET="};
  for (int r = 0; r < nprocs; ++r) {
    for (char** e = environ; *e != nullptr; ++e) {
      bool replaced = false;
      for (const char* o : ours) {
        if (std::strncmp(*e, o, std::strlen(o)) == 0) replaced = true;
      }
      if (!replaced) envs[r].push_back(*e);
    }
    envs[r].push_back("RANK=" + std::to_string(r));
    envs[r].push_back("WORLD_SIZE=" + std::to_string(nprocs));
    envs[r].push_back("LOCAL_RANK=" + std::to_string(r));
    envs[r].push_back("LOCAL_WORLD_SIZE=" + std::to_string(nprocs));
    envs[r].push_back("MASTER_ADDR=127.0.0.1");
    envs[r].push_back("MASTER_PORT=" + std::to_string(server.port()));
    envs[r].push_back("RINGLAB_STORE_HOSTED=1");
    envs[r].push_back(std::string(kJobSecretVariable) + "=" + secret_hex);
    for (const std::string& e : options.env) envs[r].push_back(e);
    for (std::string& e : envs[r]) envps[r].push_back(e.data());
    envps[r].push_back(nullptr);
  }

  g_stop_signal.store(0);
  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(nprocs, -1);
  std::vector<Stream> streams(2 * nprocs);
  // A failure part-way through starting the ranks: stop and reap those
  // already started, close their pipes, restore our handlers, then throw.
  auto abandon = [&](const std::string& what, int err) {
    for (int r = 0; r < nprocs; ++r) {
      if (pids[r] > 0) kill(-pids[r], SIGKILL);
    }
    for (int r = 0; r < nprocs; ++r) {
      if (pids[r] > 0) {
        while (waitpid(pids[r], nullptr, 0) < 0 && errno == EINTR) {
        }
      }
    }
    for (Stream& s : streams) {
      if (s.fd >= 0) close(s.fd);
    }
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    throw std::runtime_error("LaunchRanks: " + what +
                             " failed: " + std::strerror(err));
  };
  const pid_t parent = getpid();
  for (int r = 0; r < nprocs; ++r) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      int e = errno;
      for (int fd : {out[0], out[1]}) {
        if (fd >= 0) close(fd);
      }
      abandon("pipe", e);
    }
    pid_t pid = fork();
    if (pid < 0) {
      int e = errno;
      for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
      abandon("fork", e);
    }
    if (pid == 0) {
      // Its own process group, so stopping a rank stops what it started too;
      // and it dies with the launcher, whatever way the launcher goes (also
      // if that was before prctl: then this process was already reparented).
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      execve(exe, args.data(), envps[r].data());
      static const char msg[] = "LaunchRanks: exec failed\n";
      (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(127);
    }
    setpgid(pid, pid);  // also here: no race with the child's own call
    close(out[1]);
    close(err[1]);
    pids[r] = pid;
    std::string prefix = "[rank " + std::to_string(r) + "] ";
    streams[2 * r] = {out[0], STDOUT_FILENO, prefix, {}};
    streams[2 * r + 1] = {err[0], STDERR_FILENO, prefix, {}};
  }

  int running = nprocs;
  int failed_status = 0;
  std::string failure;
  bool terminating = false;
  auto kill_at = std::chrono::steady_clock::time_point::max();
  auto stop_all = [&](int sig) {
    for (int r = 0; r < nprocs; ++r) {
      if (pids[r] > 0) kill(-pids[r], sig);
    }
  };
  while (running > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> which;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i].fd >= 0) {
        pfds.push_back({streams[i].fd, POLLIN, 0});
        which.push_back(static_cast<int>(i));
      }
    }
    int pr = poll(pfds.data(), pfds.size(), 10);
    if (pr > 0) {
      for (size_t i = 0; i < pfds.size(); ++i) {
        if (pfds[i].revents == 0) continue;
        Stream& s = streams[which[i]];
        char buf[65536];
        ssize_t k = read(s.fd, buf, sizeof(buf));
        if (k > 0) {
          s.Forward(buf, static_cast<size_t>(k));
        } else if (k == 0 || errno != EINTR) {
          s.Flush();
          close(s.fd);
          s.fd = -1;
        }
      }
    }
    // Reap. The first failure in time is blamed (the launcher wakes as soon
    // as a rank's pipes close, so rounds are short); among failures seen in
    // the same round a signal death wins over an exit status, as it is more
    // likely the cause than the consequence, then the lowest rank.
    int round_rank = -1, round_status = 0;
    bool round_signal = false;
    for (int r = 0; r < nprocs; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      pid_t got = waitpid(pids[r], &status, WNOHANG);
      if (got != pids[r]) continue;
      pids[r] = -1;
      --running;
      bool bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!bad || terminating) continue;
      bool signaled = WIFSIGNALED(status);
      if (round_rank < 0 || (signaled && !round_signal)) {
        round_rank = r;
        round_status = status;
        round_signal = signaled;
      }
    }
    if (round_rank >= 0) {
      if (round_signal) {
        int sig = WTERMSIG(round_status);
        failed_status = 128 + sig;
        failure = "error: rank " + std::to_string(round_rank) +
                  " killed by signal " + std::to_string(sig) + " (" +
                  strsignal(sig) + ")";
      } else {
        failed_status = WEXITSTATUS(round_status);
        failure = "error: rank " + std::to_string(round_rank) +
                  " exited with status " + std::to_string(failed_status);
      }
      terminating = true;
      stop_all(SIGTERM);
      kill_at = std::chrono::steady_clock::now() + options.grace;
    }
    int sig = g_stop_signal.exchange(0);
    if (sig != 0) {
      stop_all(sig);
      if (!terminating) {
        terminating = true;
        failure =
            std::string("error: launcher interrupted by ") + strsignal(sig);
        failed_status = 128 + sig;
        kill_at = std::chrono::steady_clock::now() + options.grace;
      }
    }
    if (terminating && std::chrono::steady_clock::now() > kill_at) {
      stop_all(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  // Drain what the ranks wrote before they exited (grandchildren that kept a
  // pipe open were killed with their process group).
  for (Stream& s : streams) {
    if (s.fd < 0) continue;
    fcntl(s.fd, F_SETFL, O_NONBLOCK);
    char buf[65536];
    ssize_t k;
    while ((k = read(s.fd, buf, sizeof(buf))) > 0) {
      s.Forward(buf, static_cast<size_t>(k));
    }
    s.Flush();
    close(s.fd);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!failure.empty()) {
    WriteAll(STDERR_FILENO, failure + "\n");
    return failed_status;
  }
  return 0;
}

}  // namespace ringlab::comm
