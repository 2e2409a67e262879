#include "comm/cluster/emulated_cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringlab::comm::cluster {
namespace {

// Every configuration command is a few milliseconds; a kernel or a tool that
// hangs must not hang the job's start.
constexpr auto kCommandDeadline = std::chrono::seconds(10);
// What a host's own queue may hold before the bucket drops (tbf's latency),
// about a switch port's buffer (625 KB at 1 Gbit/s). An allreduce sends both
// ways at once, each flow's ACKs queued behind the other's data: two hosts
// each sending 200 MiB to the other at 1 Gbit/s got 0.94-0.955 Gbit/s each
// way with 5 ms and no retransmission, with 20 ms 0.83-0.94 and up to 270
// retransmitted segments (a single stream: 0.9-0.96 either way).
constexpr char kQueueLatency[] = "5ms";

std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// The absolute path of iproute2's `name`: sbin directories are searched too,
// as they are often not on a user's PATH.
std::string FindTool(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = std::string(path != nullptr ? path : "") +
                     ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::stringstream list(dirs);
  std::string dir;
  while (std::getline(list, dir, ':')) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw ClusterError("--hosts needs iproute2's `" + name +
                     "` (apt-get install iproute2), which is not installed");
}

void CloseAll(int a, int b = -1) {
  if (a >= 0) close(a);
  if (b >= 0) close(b);
}

// New network and UTS namespaces named `hostname`, held by the descriptors
// returned: a child makes them and exits once they are opened here.
void NewNamespaces(const std::string& hostname, int* net, int* uts) {
  int ready[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) != 0) throw ClusterError(Errno("pipe"));
  if (pipe2(hold, O_CLOEXEC) != 0) {
    CloseAll(ready[0], ready[1]);
    throw ClusterError(Errno("pipe"));
  }
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    CloseAll(ready[0], hold[1]);  // so that the parent's close is an EOF
    int failed = 0;
    if (unshare(CLONE_NEWNET | CLONE_NEWUTS) != 0 ||
        sethostname(hostname.data(), hostname.size()) != 0) {
      failed = errno;
    }
    (void)!write(ready[1], &failed, sizeof(failed));
    char c;
    while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  CloseAll(ready[1], hold[0]);
  int failed = -1;
  pollfd answer{ready[0], POLLIN, 0};
  const bool told =
      pid > 0 &&
      poll(&answer, 1, static_cast<int>(kCommandDeadline.count() * 1000)) ==
          1 &&
      read(ready[0], &failed, sizeof(failed)) ==
          static_cast<ssize_t>(sizeof(failed));
  close(ready[0]);
  const std::string ns = "/proc/" + std::to_string(pid) + "/ns/";
  if (told && failed == 0) {
    *net = open((ns + "net").c_str(), O_RDONLY | O_CLOEXEC);
    *uts = open((ns + "uts").c_str(), O_RDONLY | O_CLOEXEC);
  }
  close(hold[1]);  // the child exits; the descriptors hold its namespaces
  if (pid > 0 && !told) kill(pid, SIGKILL);
  if (pid > 0) waitpid(pid, nullptr, 0);
  if (!told || failed != 0 || *net < 0 || *uts < 0) {
    errno = told ? failed : errno;
    throw ClusterError(
        Errno("--hosts cannot create a network namespace (needs "
              "CAP_SYS_ADMIN and CAP_NET_ADMIN)"));
  }
}

// Milliseconds until deadline, 0 once past it.
int MillisecondsLeft(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// The command's stderr to its end, then its wait status; -1 when it had to
// be killed at the deadline.
int WaitWithDeadline(pid_t pid, int stderr_fd, std::string* err) {
  const auto deadline = std::chrono::steady_clock::now() + kCommandDeadline;
  for (bool open = true; open && MillisecondsLeft(deadline) > 0;) {
    pollfd pfd{stderr_fd, POLLIN, 0};
    if (poll(&pfd, 1, MillisecondsLeft(deadline)) <= 0) continue;
    char buf[4096];
    const ssize_t k = read(stderr_fd, buf, sizeof(buf));
    if (k > 0 && err->size() < (64 << 10)) err->append(buf, k);
    if (k == 0 || (k < 0 && errno != EINTR)) open = false;
  }
  int status = 0;
  while (MillisecondsLeft(deadline) > 0) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    usleep(1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// Runs `argv` in the network namespace `net`, with `fd3` (when not -1) as
// its descriptor 3 (an `ip ... netns /proc/self/fd/3`). Throws ClusterError
// with the command's first line of stderr when it fails.
void RunIn(int net, std::vector<std::string> argv, int fd3 = -1) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) throw ClusterError(Errno("pipe"));
  const pid_t pid = fork();
  if (pid < 0) {
    CloseAll(err[0], err[1]);
    throw ClusterError(Errno("fork"));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Into the namespace first: `net` may itself be descriptor 3.
    if (setns(net, CLONE_NEWNET) != 0) _exit(126);
    dup2(err[1], STDERR_FILENO);
    if (fd3 >= 0) dup2(fd3, 3);  // dup2 clears close-on-exec
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(err[1]);
  std::string text;
  const int status = WaitWithDeadline(pid, err[0], &text);
  close(err[0]);
  if (status == 0) return;
  std::string command;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    command += (i == 0 ? argv[i].substr(argv[i].rfind('/') + 1) : argv[i]) +
               (i + 2 < args.size() ? " " : "");
  }
  const std::string first = text.substr(0, text.find('\n'));
  throw ClusterError("`" + command + "` " +
                     (status < 0
                          ? "did not finish within 10 s"
                          : "failed" + (first.empty() ? "" : ": " + first)));
}

// Whether this thread may join its own network namespace: then it can come
// back from an emulated host's. Not so for root of a user namespace in a
// network namespace it does not own (a sandbox's).
bool CanReturnHome() {
  const int own = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const bool can = own >= 0 && setns(own, CLONE_NEWNET) == 0;
  if (own >= 0) close(own);
  return can;
}

}  // namespace

std::string GainNetworkAdmin() {
  if (CanReturnHome()) return "";
  // Root of a user namespace: a network namespace of its own, which it owns.
  if (unshare(CLONE_NEWNET) == 0 && CanReturnHome()) return "";
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  // A network namespace of its own too, owned by the new user namespace:
  // a thread that visited an emulated host (InNetworkOf) could not return
  // to one the machine's root owns.
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
    return "--hosts needs root, or unprivileged user namespaces (sysctl "
           "kernel.unprivileged_userns_clone=1): " +
           Errno("unshare(CLONE_NEWUSER)");
  }
  // Root inside it, this user outside: what the job writes is still ours.
  const std::pair<const char*, std::string> maps[] = {
      {"/proc/self/setgroups", "deny"},
      {"/proc/self/uid_map", "0 " + std::to_string(uid) + " 1"},
      {"/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"}};
  for (const auto& [file, text] : maps) {
    std::ofstream out(file);
    out << text;
    out.flush();
    if (!out) return std::string("--hosts: cannot write ") + file;
  }
  return "";
}

std::string EmulatedCluster::HostName(int host) {
  return "ringlab-host-" + std::to_string(host);
}

std::string EmulatedCluster::Address(int host) {
  return "10.78.0." + std::to_string(host + 1);
}

std::string EmulatedCluster::Subnet() { return "10.78.0.0/24"; }

void EmulatedCluster::CheckHostCount(int hosts) {
  if (hosts < 1 || hosts > kMaxHosts) {
    throw std::invalid_argument("--hosts must be in [1, " +
                                std::to_string(kMaxHosts) + "], got " +
                                std::to_string(hosts));
  }
}

EmulatedCluster::EmulatedCluster(int hosts, const Link& link) : link_(link) {
  CheckHostCount(hosts);
  hosts_.resize(hosts);
  try {
    Build();
  } catch (...) {
    Release();
    throw;
  }
}

EmulatedCluster::~EmulatedCluster() { Release(); }

// The last references this process holds: the kernel removes the
// namespaces, and with them everything in them, once no process is inside.
void EmulatedCluster::Release() {
  CloseAll(switch_.net, switch_.uts);
  switch_ = {};
  for (Namespaces& ns : hosts_) {
    CloseAll(ns.net, ns.uts);
    ns = {};
  }
}

void EmulatedCluster::Build() {
  // The tools, found once (tc only where a link is shaped).
  ip_ = FindTool("ip");
  if (!link_.unlimited() || link_.latency_us > 0) tc_ = FindTool("tc");
  NewNamespaces("ringlab-switch", &switch_.net, &switch_.uts);
  RunIn(switch_.net, {ip_, "link", "add", "name", "br0", "type", "bridge"});
  RunIn(switch_.net, {ip_, "link", "set", "dev", "br0", "up"});
  for (int h = 0; h < hosts(); ++h) {
    NewNamespaces(HostName(h), &hosts_[h].net, &hosts_[h].uts);
    ConnectHost(h);
  }
}

// Host h's veth pair: eth0 in the host, port p<h> on the switch's bridge;
// its address, and both ends shaped.
void EmulatedCluster::ConnectHost(int h) {
  const std::string port = "p" + std::to_string(h);
  RunIn(switch_.net,
        {ip_, "link", "add", "name", port, "type", "veth", "peer", "name",
         kInterface, "netns", "/proc/self/fd/3"},
        hosts_[h].net);
  RunIn(switch_.net, {ip_, "link", "set", "dev", port, "master", "br0", "up"});
  RunIn(hosts_[h].net,
        {ip_, "address", "add", Address(h) + "/24", "dev", kInterface});
  RunIn(hosts_[h].net, {ip_, "link", "set", "dev", kInterface, "up"});
  RunIn(hosts_[h].net, {ip_, "link", "set", "dev", "lo", "up"});
  Shape(hosts_[h], kInterface);  // what the host sends
  Shape(switch_, port);          // what it receives
}

// A device's egress: netem's delay beneath a token bucket at the link's
// rate (the bucket alone without a delay; nothing when unlimited).
void EmulatedCluster::Shape(const Namespaces& where, const std::string& dev) {
  if (tc_.empty()) return;  // unlimited, no delay: nothing to shape
  std::vector<std::string> parent = {"root"};
  if (link_.latency_us > 0) {
    try {
      // A queue deep enough for a second at 100 Gbit/s of full frames.
      RunIn(where.net,
            {tc_, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
             "delay", std::to_string(link_.latency_us) + "us", "limit",
             "10000000"});
    } catch (const ClusterError& e) {
      // The user's flag, which this kernel cannot honour (where its
      // configuration could not say so before the hosts were made).
      throw std::invalid_argument(
          "--link_latency needs the kernel's netem queueing discipline "
          "(sch_netem, CONFIG_NET_SCH_NETEM), which this kernel lacks: " +
          std::string(e.what()));
    }
    parent = {"parent", "1:", "handle", "2:"};
  }
  if (link_.unlimited()) return;
  std::vector<std::string> args = {tc_, "qdisc", "add", "dev", dev};
  args.insert(args.end(), parent.begin(), parent.end());
  for (const std::string& a :
       {std::string("tbf"), std::string("rate"),
        std::to_string(link_.bits_per_second) + "bit", std::string("burst"),
        std::to_string(link_.BurstBytes()), std::string("latency"),
        std::string(kQueueLatency)}) {
    args.push_back(a);
  }
  RunIn(where.net, args);
}

std::string EmulatedCluster::NetworkPath(int host) const {
  return "/proc/" + std::to_string(getpid()) + "/fd/" +
         std::to_string(hosts_[host].net);
}

std::string EmulatedCluster::UtsPath(int host) const {
  return "/proc/" + std::to_string(getpid()) + "/fd/" +
         std::to_string(hosts_[host].uts);
}

bool EmulatedCluster::Enter(int host) const {
  return setns(hosts_[host].net, CLONE_NEWNET) == 0 &&
         setns(hosts_[host].uts, CLONE_NEWUTS) == 0;
}

void EmulatedCluster::InNetworkOf(int host,
                                  const std::function<void()>& fn) const {
  const int own = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (own < 0) throw ClusterError(Errno("open /proc/thread-self/ns/net"));
  if (setns(hosts_[host].net, CLONE_NEWNET) != 0) {
    close(own);
    throw ClusterError(Errno("setns into " + HostName(host)));
  }
  auto back = [own] {
    // Failing to return would leave this thread on the emulated host.
    if (setns(own, CLONE_NEWNET) != 0) std::abort();
    close(own);
  };
  try {
    fn();
  } catch (...) {
    back();
    throw;
  }
  back();
}

EmulatedCluster::Counters EmulatedCluster::LinkCounters(int host) const {
  std::optional<Counters> counters;
  InNetworkOf(host, [&] { counters = ThisHostLinkCounters(); });
  if (!counters) throw ClusterError("no counters for " + HostName(host));
  return *counters;
}

std::optional<EmulatedCluster::Counters>
EmulatedCluster::ThisHostLinkCounters() {
  // "eth0: rx_bytes rx_packets ... (8 receive fields) tx_bytes ...".
  std::ifstream dev("/proc/thread-self/net/dev");
  std::string line;
  const std::string name = std::string(kInterface) + ":";
  while (std::getline(dev, line)) {
    const size_t at = line.find_first_not_of(' ');
    if (at == std::string::npos || line.compare(at, name.size(), name) != 0) {
      continue;
    }
    std::istringstream fields(line.substr(at + name.size()));
    uint64_t value[9] = {};
    for (uint64_t& v : value) fields >> v;
    if (fields.fail()) return std::nullopt;
    return Counters{value[8], value[0]};
  }
  return std::nullopt;
}

}  // namespace ringlab::comm::cluster
