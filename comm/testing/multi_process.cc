#include "comm/testing/multi_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

#include "comm/cluster/job_cluster.h"
#include "comm/job/job_environment.h"
#include "comm/job/launch_variables.h"
#include "comm/store/tcp_store.h"

namespace ringlab::comm::testing {

namespace {

// Where a job's ranks run: contiguously on `hosts` hosts, which are real
// emulated hosts when `cluster` is set and only identities otherwise.
struct Placement {
  int hosts = 1;
  const cluster::EmulatedCluster* cluster = nullptr;
};

// Joins rank r's emulated host (before anything else, so that its sockets,
// its host name and its link are the host's); throws unless the kernel let
// it and its host name is the host's, which its host identity then names.
void EnterHost(int r, int world_size, const cluster::EmulatedCluster& hosts) {
  // A rank holds its host's namespaces: it must not outlive a test killed
  // mid-job, as a launcher's ranks do not.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int h = cluster::HostOfRank(r, world_size, hosts.hosts());
  if (!hosts.Enter(h)) {
    throw std::runtime_error("cannot enter " +
                             cluster::EmulatedCluster::HostName(h) + ": " +
                             std::strerror(errno));
  }
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  if (name != cluster::EmulatedCluster::HostName(h)) {
    throw std::runtime_error("on " + cluster::EmulatedCluster::HostName(h) +
                             " the host name is " + name);
  }
  // A host identity given by the environment would hide the host's own.
  unsetenv(launch::kHostId);
}

// A forked rank: runs body with a store client of its own, reports an
// exception on stderr, exits 0 or 1. Only async-signal-safe work until exec
// would be the rule, but the body needs the full runtime; the parent's other
// threads (the store server) are simply absent here and never touched.
[[noreturn]] void RunChild(
    int r, int world_size, const Placement& placement,
    const TcpStoreServer& server,
    const std::function<void(const RankContext&)>& body) {
  int code = 0;
  try {
    if (placement.cluster != nullptr) {
      EnterHost(r, world_size, *placement.cluster);
    }
    const std::string store_address = placement.cluster != nullptr
                                          ? cluster::EmulatedCluster::Address(0)
                                          : "127.0.0.1";
    TcpStore store(store_address, server.port(), std::chrono::seconds(30),
                   server.secret());
    RankContext context;
    context.rank = r;
    context.world_size = world_size;
    // Its index on its host where the hosts are real (as a launcher's
    // LOCAL_RANK); the suite's host identities alone leave it the rank.
    context.local_rank =
        placement.cluster != nullptr ? r % (world_size / placement.hosts) : r;
    context.store = &store;
    context.job_secret = server.secret();
    // As a job's rendezvous does: every rank's peer information, once. On
    // real hosts the address it reached the store from is its host's.
    PeerInfo self = ThisPeer(store.local_address());
    if (placement.hosts > 1 && placement.cluster == nullptr) {
      self.host +=
          " (suite host " +
          std::to_string(cluster::HostOfRank(r, world_size, placement.hosts)) +
          ")";
    }
    context.peers =
        ExchangePeers(store, r, world_size, self, std::chrono::seconds(30));
    body(context);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d failed: %s\n", r, e.what());
    code = 1;
  } catch (...) {
    std::fprintf(stderr, "rank %d failed: unknown exception\n", r);
    code = 1;
  }
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

// Appends what the ranks have written to their results, waiting at most
// 10 ms; a pipe at its end is closed (-1, --*open_fds).
void ReadOutput(std::vector<int>& out_fds, std::vector<RankResult>& results,
                int* open_fds) {
  std::vector<pollfd> pfds;
  std::vector<int> which;
  for (size_t r = 0; r < out_fds.size(); ++r) {
    if (out_fds[r] >= 0) {
      pfds.push_back({out_fds[r], POLLIN, 0});
      which.push_back(static_cast<int>(r));
    }
  }
  poll(pfds.data(), pfds.size(), 10);
  for (size_t i = 0; i < pfds.size(); ++i) {
    if (pfds[i].revents == 0) continue;
    char buf[4096];
    ssize_t k = read(pfds[i].fd, buf, sizeof(buf));
    if (k > 0) {
      results[which[i]].output.append(buf, static_cast<size_t>(k));
    } else if (k == 0 || errno != EINTR) {
      close(out_fds[which[i]]);
      out_fds[which[i]] = -1;
      --*open_fds;
    }
  }
}

// Reaps the ranks that have exited (-1, --*running), promptly: peers detect a
// dead rank by its pid disappearing.
void ReapExited(std::vector<pid_t>& pids, std::vector<RankResult>& results,
                int* running) {
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] < 0) continue;
    int status = 0;
    if (waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
    if (WIFEXITED(status)) {
      results[r].exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      results[r].term_signal = WTERMSIG(status);
    }
    pids[r] = -1;
    --*running;
  }
}

// Forks the ranks, each placed as `placement` says, gathers their output
// and exit statuses; SIGKILLs the rest at `timeout`.
std::vector<RankResult> RunPlacedRanks(
    int world_size, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout, const Placement& placement) {
  std::unique_ptr<TcpStoreServer> server;
  if (placement.cluster != nullptr) {
    // Its socket in host 0's network namespace, on host 0's address.
    placement.cluster->InNetworkOf(0, [&] {
      server = std::make_unique<TcpStoreServer>(
          cluster::EmulatedCluster::Address(0), 0);
    });
  } else {
    server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<RankResult> results(world_size);
  std::vector<pid_t> pids(world_size, -1);
  std::vector<int> out_fds(world_size, -1);
  for (int r = 0; r < world_size; ++r) {
    results[r].rank = r;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("RunRanks: pipe");
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("RunRanks: fork");
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      // Only stdout and stderr lead to the parent: a process this rank
      // leaves behind holds no other end, and earlier ranks' pipes are not
      // this rank's.
      close(fds[0]);
      close(fds[1]);
      for (int q = 0; q < r; ++q) close(out_fds[q]);
      RunChild(r, world_size, placement, *server, body);
    }
    close(fds[1]);
    pids[r] = pid;
    out_fds[r] = fds[0];
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int running = world_size;
  int open_fds = world_size;
  bool killed = false;
  while (running > 0 || open_fds > 0) {
    ReadOutput(out_fds, results, &open_fds);
    ReapExited(pids, results, &running);
    if (!killed && std::chrono::steady_clock::now() > deadline) {
      killed = true;
      for (int r = 0; r < world_size; ++r) {
        if (pids[r] > 0) kill(pids[r], SIGKILL);
      }
      // Grandchildren may hold the pipes open; stop reading them.
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    }
    if (killed && running == 0) break;
  }
  for (int r = 0; r < world_size; ++r) {
    if (out_fds[r] >= 0) close(out_fds[r]);
  }
  return results;
}

}  // namespace

std::vector<RankResult> RunRanks(
    int world_size, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout, int hosts) {
  if (world_size < 1) throw std::invalid_argument("RunRanks: world_size < 1");
  if (hosts < 1 || world_size % hosts != 0) {
    throw std::invalid_argument("RunRanks: hosts must divide world_size");
  }
  return RunPlacedRanks(world_size, body, timeout, {hosts, nullptr});
}

std::vector<RankResult> RunRanksOnHosts(
    const cluster::EmulatedCluster& hosts, int world_size,
    const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout) {
  if (world_size < 1 || world_size % hosts.hosts() != 0) {
    throw std::invalid_argument(
        "RunRanksOnHosts: the hosts must divide world_size");
  }
  return RunPlacedRanks(world_size, body, timeout, {hosts.hosts(), &hosts});
}

void KillSelfSoon(int max_ms) {
  const int ms = std::random_device{}() % (max_ms + 1);
  std::thread([ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    kill(getpid(), SIGKILL);
  }).detach();
}

std::string Describe(const std::vector<RankResult>& results) {
  std::string s;
  for (const RankResult& r : results) {
    s += "rank " + std::to_string(r.rank) + ": exit " +
         std::to_string(r.exit_code) + " signal " +
         std::to_string(r.term_signal) + "\n" + r.output;
    if (!r.output.empty() && r.output.back() != '\n') s += "\n";
  }
  return s;
}

}  // namespace ringlab::comm::testing
