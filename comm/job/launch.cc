#include "comm/job/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/cluster/emulated_cluster.h"
#include "comm/cluster/job_cluster.h"
#include "comm/job/launch_variables.h"
#include "comm/job/output_sink.h"
#include "comm/job/rank_errors.h"
#include "comm/process.h"
#include "comm/store/job_secret.h"
#include "comm/store/tcp_store.h"

extern char** environ;

namespace ringlab::comm {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal.store(sig); }

// A line longer than this is forwarded in pieces, each prefixed: output
// without newlines must not grow the launcher without bound.
constexpr size_t kMaxPartialLine = 64 << 10;

// One child stream (stdout or stderr) being forwarded.
struct Stream {
  int fd = -1;                // read end, -1 once closed
  OutputSink* out = nullptr;  // where its lines go (never blocks)
  int rank = -1;
  RankErrors* errors = nullptr;  // a stderr's: where its error lines go
  std::string partial;           // the current line, until its newline

  void Forward(const char* data, size_t n) {
    partial.append(data, n);
    size_t start = 0, nl;
    std::string lines;
    while ((nl = partial.find('\n', start)) != std::string::npos) {
      Line(partial.substr(start, nl + 1 - start), &lines);
      start = nl + 1;
    }
    partial.erase(0, start);
    while (partial.size() >= kMaxPartialLine) {
      Line(partial.substr(0, kMaxPartialLine) + "\n", &lines);
      partial.erase(0, kMaxPartialLine);
    }
    out->Append(lines);
  }
  void Flush() {
    std::string lines;
    if (!partial.empty()) Line(partial + "\n", &lines);
    out->Append(lines);
    partial.clear();
  }

 private:
  void Line(const std::string& line, std::string* lines) {
    if (errors != nullptr && errors->Hold(rank, line)) return;
    *lines += "[rank " + std::to_string(rank) + "] " + line;
  }
};

// The environment of every rank: this process's, without the variables the
// launcher sets, plus those (and `extra`, "NAME=value"). On `hosts` hosts,
// LOCAL_RANK and LOCAL_WORLD_SIZE count a rank's host's ranks.
std::vector<std::vector<std::string>> RankEnvironments(
    int nprocs, int hosts, const std::string& store_address, int port,
    const std::string& secret_hex, const std::vector<std::string>& extra) {
  using namespace launch;  // NOLINT: the variable names, one per line below
  std::vector<std::vector<std::string>> envs(nprocs);
  const int per_host = nprocs / hosts;
  for (int r = 0; r < nprocs; ++r) {
    const std::pair<const char*, std::string> ours[] = {
        {kRank, std::to_string(r)},
        {kWorldSize, std::to_string(nprocs)},
        {kLocalRank, std::to_string(r % per_host)},
        {kLocalWorldSize, std::to_string(per_host)},
        {kMasterAddr, store_address},
        {kMasterPort, std::to_string(port)},
        {kStoreHosted, secret_hex.empty() ? "" : "1"},
        {kJobSecret, secret_hex},
        {kEmulatedHost,
         hosts > 1 ? std::to_string(cluster::HostOfRank(r, nprocs, hosts))
                   : ""}};
    for (char** e = environ; *e != nullptr; ++e) {
      bool replaced = false;
      for (const auto& [name, value] : ours) {
        const size_t n = std::strlen(name);
        if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') replaced = true;
      }
      if (!replaced) envs[r].push_back(*e);
    }
    for (const auto& [name, value] : ours) {
      if (!value.empty()) envs[r].push_back(std::string(name) + "=" + value);
    }
    for (const std::string& e : extra) envs[r].push_back(e);
  }
  return envs;
}

// NULL-terminated pointers into strings that outlive them (execve's argv and
// envp, built before any fork).
std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// While alive, SIGINT and SIGTERM to the launcher are recorded in
// g_stop_signal (and passed on to the ranks by Supervise), and SIGPIPE is
// ignored (a reader of its output that went away ends the forwarding, not
// the job); the previous handlers come back when it is destroyed, also when
// a start fails.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{}, old_pipe_{};
};

// The ranks a launcher started: pid per rank (-1 once reaped, or never
// started) and the pipes of their stdout and stderr (2r and 2r + 1).
struct Ranks {
  explicit Ranks(int n) : pids(n, -1), streams(2 * n) {}
  std::vector<pid_t> pids;
  std::vector<Stream> streams;

  void SignalAll(int sig) const {
    for (pid_t pid : pids) {
      if (pid > 0) kill(-pid, sig);  // the rank's whole process group
    }
  }
};

// A start that failed part-way: stops and reaps the ranks already started
// and closes their pipes.
void Abandon(Ranks& ranks) {
  ranks.SignalAll(SIGKILL);
  for (pid_t& pid : ranks.pids) {
    if (pid <= 0) continue;
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
  }
  for (Stream& s : ranks.streams) {
    if (s.fd >= 0) close(s.fd);
    s.fd = -1;
  }
}

[[noreturn]] void ThrowErrno(const std::string& what, int err) {
  throw std::runtime_error("LaunchRanks: " + what +
                           " failed: " + std::strerror(err));
}

// Where rank 0 of a program with its own store listens on emulated hosts
// (torchrun's default port: nothing else is in host 0's namespace).
constexpr int kForeignStorePort = 29500;

// A loopback port free a moment ago, for such a rank 0 on this machine (the
// race with other processes is torch.multiprocessing's own).
int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok =
      fd >= 0 &&
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int saved = errno;
  if (fd >= 0) close(fd);
  if (!ok) ThrowErrno("finding a free port", saved);
  return ntohs(address.sin_port);
}

// Forks rank r into ranks.pids[r], its output into two pipes. Everything the
// child needs is built before the fork: the store thread is running, so the
// child may only make async-signal-safe calls until exec. Throws
// std::runtime_error when no pipe or process can be made.
void StartRank(int r, const char* exe, char* const* args, char* const* envp,
               pid_t parent, const cluster::EmulatedCluster* hosts, int host,
               OutputSink* sinks[2], RankErrors* errors, Ranks& ranks) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    for (int fd : {out[0], out[1]}) {
      if (fd >= 0) close(fd);
    }
    ThrowErrno("pipe", e);
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    ThrowErrno("fork", e);
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
    signal(SIGPIPE, SIG_DFL);  // the launcher's ignoring it is its own
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    if (hosts != nullptr && !hosts->Enter(host)) {
      static const char msg[] = "LaunchRanks: cannot enter its host\n";
      (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(127);
    }
    execve(exe, args, envp);
    static const char msg[] = "LaunchRanks: exec failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with the child's own call
  close(out[1]);
  close(err[1]);
  ranks.pids[r] = pid;
  ranks.streams[2 * r] = {out[0], sinks[0], r, nullptr, {}};
  ranks.streams[2 * r + 1] = {err[0], sinks[1], r, errors, {}};
}

// Forwards what the ranks have written, waiting at most 10 ms for any; a
// stream at its end is flushed and closed.
void ForwardOutput(std::vector<Stream>& streams) {
  std::vector<pollfd> pfds;
  std::vector<Stream*> which;
  for (Stream& s : streams) {
    if (s.fd < 0) continue;
    pfds.push_back({s.fd, POLLIN, 0});
    which.push_back(&s);
  }
  if (poll(pfds.data(), pfds.size(), 10) <= 0) return;
  for (size_t i = 0; i < pfds.size(); ++i) {
    if (pfds[i].revents == 0) continue;
    Stream& s = *which[i];
    char buf[65536];
    const ssize_t k = read(s.fd, buf, sizeof(buf));
    if (k > 0) {
      s.Forward(buf, static_cast<size_t>(k));
    } else if (k == 0 || errno != EINTR) {
      s.Flush();
      close(s.fd);
      s.fd = -1;
    }
  }
}

// A failed rank, as LaunchRanks reports it.
struct Failure {
  int rank = -1;  // none
  int wait_status = 0;
  bool signaled = false;
};

// Reaps the ranks that have exited (--*running each). The first failure in
// time is blamed (the launcher wakes as soon as a rank's pipes close, so
// rounds are short); among failures seen in the same round a signal death
// wins over an exit status, as it is more likely the cause than the
// consequence, then the lowest rank. Failures while terminating are the
// launcher's doing and not reported.
Failure ReapRound(Ranks& ranks, bool terminating, int* running) {
  Failure blamed;
  for (size_t r = 0; r < ranks.pids.size(); ++r) {
    if (ranks.pids[r] < 0) continue;
    int status = 0;
    if (waitpid(ranks.pids[r], &status, WNOHANG) != ranks.pids[r]) continue;
    ranks.pids[r] = -1;
    --*running;
    const bool bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!bad || terminating) continue;
    const bool signaled = WIFSIGNALED(status);
    if (blamed.rank < 0 || (signaled && !blamed.signaled)) {
      blamed = {static_cast<int>(r), status, signaled};
    }
  }
  return blamed;
}

// Whether any rank not yet reaped is already exiting (comm/process.h).
bool AnyExiting(const Ranks& ranks) {
  for (pid_t pid : ranks.pids) {
    if (ProcessExiting(pid)) return true;
  }
  return false;
}

// A rank that exits with an error status is often a survivor reporting a
// peer that was killed, and the killed one may not be waitable yet: a
// multi-threaded process closes its files (so its peers see it gone) before
// its last thread has exited, and tearing down a large address space takes
// a while on a busy machine. Before blaming an exit status, waits for a
// signal death among the others: 500 ms, and as long as another rank is
// already exiting (up to 10 s), so that its end decides.
Failure PreferSignalDeath(Ranks& ranks, Failure failed, int* running) {
  const auto start = std::chrono::steady_clock::now();
  const auto brief = start + std::chrono::milliseconds(500);
  const auto longest = start + std::chrono::seconds(10);
  while (!failed.signaled && *running > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= longest || (now >= brief && !AnyExiting(ranks))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const Failure more = ReapRound(ranks, /*terminating=*/false, running);
    if (more.rank >= 0 && more.signaled) return more;
  }
  return failed;
}

// "error: rank R ..." for a failure, and the status LaunchRanks returns.
std::string Describe(const Failure& f, int* exit_status) {
  if (f.signaled) {
    const int sig = WTERMSIG(f.wait_status);
    *exit_status = 128 + sig;
    return "error: rank " + std::to_string(f.rank) + " killed by signal " +
           std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  *exit_status = WEXITSTATUS(f.wait_status);
  return "error: rank " + std::to_string(f.rank) + " exited with status " +
         std::to_string(*exit_status);
}

// The first rank found stopped, -1 when none is: a stopped rank answers
// nobody, so the peers that gave up on it are not the failure's cause.
int StoppedRank(const Ranks& ranks) {
  for (size_t r = 0; r < ranks.pids.size(); ++r) {
    if (ProcessStopped(ranks.pids[r])) return static_cast<int>(r);
  }
  return -1;
}

// Forwards output and reaps until every rank has exited. The first failure,
// or a stop signal to the launcher, sends SIGTERM (the signal, for a stop
// signal) to every rank, and SIGKILL after `grace`; SIGCONT too, so that a
// stopped rank ends now rather than at the SIGKILL. Returns how the job
// ended (no failure when every rank exited 0) and sets *exit_status.
JobEnd Supervise(Ranks& ranks, std::chrono::milliseconds grace,
                 int* exit_status) {
  int running = static_cast<int>(ranks.pids.size());
  JobEnd end;
  *exit_status = 0;
  bool terminating = false;
  auto kill_at = std::chrono::steady_clock::time_point::max();
  auto terminate = [&](int sig, const std::string& why, int status) {
    ranks.SignalAll(sig);
    ranks.SignalAll(SIGCONT);
    if (terminating) return false;
    terminating = true;
    end.failure = why;
    *exit_status = status;
    kill_at = std::chrono::steady_clock::now() + grace;
    return true;
  };
  while (running > 0) {
    ForwardOutput(ranks.streams);
    Failure failed = ReapRound(ranks, terminating, &running);
    if (failed.rank >= 0) {
      failed = PreferSignalDeath(ranks, failed, &running);
      int status = 0;
      const std::string why = Describe(failed, &status);
      const int stopped = failed.signaled ? -1 : StoppedRank(ranks);
      if (terminate(SIGTERM, why, status)) {
        end.failed_rank = failed.rank;
        end.signaled = failed.signaled;
        end.stopped_rank = stopped;
      }
    }
    if (const int sig = g_stop_signal.exchange(0); sig != 0) {
      terminate(sig,
                std::string("error: launcher interrupted by ") + strsignal(sig),
                128 + sig);
    }
    if (terminating && std::chrono::steady_clock::now() > kill_at) {
      ranks.SignalAll(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  return end;
}

// What the ranks wrote before they exited (grandchildren that kept a pipe
// open were killed with their process group).
void DrainOutput(std::vector<Stream>& streams) {
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
    s.fd = -1;
  }
}

}  // namespace

std::string LauncherStoreAddress(const cluster::EmulatedCluster* hosts) {
  return hosts != nullptr ? cluster::EmulatedCluster::Address(0) : "127.0.0.1";
}

std::unique_ptr<TcpStoreServer> StartLauncherStore(
    const cluster::EmulatedCluster* hosts) {
  // The job's secret: the store admits only the ranks, which get it in
  // their environment (readable by this user only, /proc/<pid>/environ).
  std::unique_ptr<TcpStoreServer> server;
  const auto start = [&] {
    server = std::make_unique<TcpStoreServer>(LauncherStoreAddress(hosts), 0,
                                              GenerateJobSecret());
  };
  if (hosts != nullptr) {
    hosts->InNetworkOf(0, start);  // its socket in host 0's namespace
  } else {
    start();
  }
  return server;
}

int LaunchRanks(int nprocs, const std::vector<std::string>& argv,
                const LaunchOptions& options) {
  if (nprocs < 1) {
    throw std::invalid_argument("LaunchRanks: nprocs must be at least 1, got " +
                                std::to_string(nprocs));
  }
  if (argv.empty()) throw std::invalid_argument("LaunchRanks: empty argv");
  const cluster::EmulatedCluster* hosts = options.cluster;
  const int host_count = hosts != nullptr ? hosts->hosts() : 1;
  if (nprocs % host_count != 0) {
    throw std::invalid_argument("LaunchRanks: " + std::to_string(nprocs) +
                                " ranks do not spread evenly over " +
                                std::to_string(host_count) + " hosts");
  }
  const std::string store_address = LauncherStoreAddress(hosts);
  std::unique_ptr<TcpStoreServer> server;
  int port = 0;
  std::string secret_hex;
  if (!options.host_store) {
    port = hosts != nullptr ? kForeignStorePort : FreeLoopbackPort();
  } else {
    server = StartLauncherStore(hosts);
    port = server->port();
    secret_hex = JobSecretToHex(server->secret());
  }
  std::vector<std::string> arg_strings = argv;
  const std::vector<char*> args = Pointers(arg_strings);
  const char* exe = options.exec_self ? "/proc/self/exe" : argv[0].c_str();
  std::vector<std::vector<std::string>> envs = RankEnvironments(
      nprocs, host_count, store_address, port, secret_hex, options.env);
  std::vector<std::vector<char*>> envps;
  for (auto& env : envs) envps.push_back(Pointers(env));

  StopSignals stop_signals;
  std::fflush(stdout);
  std::fflush(stderr);
  OutputSink out(STDOUT_FILENO), err(STDERR_FILENO);
  OutputSink* sinks[2] = {&out, &err};
  RankErrors errors;
  Ranks ranks(nprocs);
  try {
    for (int r = 0; r < nprocs; ++r) {
      StartRank(r, exe, args.data(), envps[r].data(), getpid(), hosts,
                cluster::HostOfRank(r, nprocs, host_count), sinks, &errors,
                ranks);
    }
  } catch (...) {
    Abandon(ranks);
    throw;
  }
  int status = 0;
  const JobEnd end = Supervise(ranks, options.grace, &status);
  DrainOutput(ranks.streams);
  err.Append(errors.Report(end));
  // What a reader that stopped reading never takes is not waited for long:
  // the job is over. Lines stdout dropped and did not say so itself (its
  // reader stopped, or went away) are counted on stderr, the launcher's last
  // line.
  out.Flush(options.output_flush);
  if (const int64_t unsaid = out.unsaid_dropped_lines(); unsaid > 0) {
    err.Append("[launcher] " + std::to_string(unsaid) +
               " line(s) of the ranks' standard output dropped: it was not "
               "read\n");
  }
  err.Flush(options.output_flush);
  return end.failure.empty() ? 0 : status;
}

}  // namespace ringlab::comm
