// RunThreadRanks and RankPrint (multi_process.h): a job's ranks as threads of
// one forked child, which reports each rank's result through a pipe.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "comm/job/rank_threads.h"
#include "comm/process.h"
#include "comm/testing/multi_process.h"

namespace ringlab::comm::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Ranks' captured output; the mutex also keeps a rank that is still running
// (stuck) from appending while the child reports.
std::mutex g_capture_mutex;
thread_local std::string* g_capture = nullptr;

// In the child: runs the ranks and writes "<code> <length>\n<output>" per
// rank to fd, then ends the process without unwinding (stuck ranks' threads
// may still run).
[[noreturn]] void RunChild(int world_size,
                           const std::function<void(const RankContext&)>& body,
                           int fd) {
  comm::PrepareProcessForRankThreads();
  std::vector<std::string> outputs(world_size);
  const RankThreadsResult result = RunRankThreads(
      world_size,
      [&](const RankContext& c) {
        g_capture = &outputs[c.rank];
        body(c);
        g_capture = nullptr;
      },
      std::chrono::seconds(30));
  std::string report;
  {
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    for (int r = 0; r < world_size; ++r) {
      std::string output = outputs[r];
      int code = result.errors[r].empty() ? 0 : 1;
      if (code != 0) {
        output +=
            "rank " + std::to_string(r) + " failed: " + result.errors[r] + "\n";
      }
      for (int s : result.stuck) {
        if (s != r) continue;
        code = 2;
        output += "rank " + std::to_string(r) +
                  " still running 30 s after another rank failed\n";
      }
      report += std::to_string(code) + " " + std::to_string(output.size()) +
                "\n" + output;
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  WriteFully(fd, report);
  _exit(0);
}

// Reads both pipes until both end or the deadline passes (then kills pid).
// Returns whether it killed.
bool Collect(pid_t pid, int results_fd, int output_fd,
             std::chrono::milliseconds timeout, std::string* results,
             std::string* output) {
  int fds[2] = {results_fd, output_fd};
  std::string* sinks[2] = {results, output};
  auto deadline = Clock::now() + timeout;
  bool killed = false;
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd pfds[2];
    int n = 0, which[2];
    for (int i = 0; i < 2; ++i) {
      if (fds[i] >= 0) {
        pfds[n] = {fds[i], POLLIN, 0};
        which[n++] = i;
      }
    }
    poll(pfds, n, 10);
    for (int k = 0; k < n; ++k) {
      if (pfds[k].revents == 0) continue;
      char buf[4096];
      const ssize_t got = read(pfds[k].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[which[k]]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[which[k]]);
        fds[which[k]] = -1;
      }
    }
    if (Clock::now() > deadline) {
      if (killed) break;  // killed 5 s ago and the pipes are still open
      kill(pid, SIGKILL);
      killed = true;
      deadline = Clock::now() + std::chrono::seconds(5);
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  return killed;
}

}  // namespace

void RankPrint(const std::string& line) {
  {
    // A rank thread's line goes to its own output only: the child's stdout
    // is shared, and a line there could not be told apart.
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    if (g_capture != nullptr) {
      *g_capture += line + "\n";
      return;
    }
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::vector<RankResult> RunThreadRanks(
    int world_size, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout) {
  if (world_size < 1) {
    throw std::invalid_argument("RunThreadRanks: world_size < 1");
  }
  int results_pipe[2], output_pipe[2];
  if (pipe2(results_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("RunThreadRanks: pipe");
  }
  if (pipe2(output_pipe, O_CLOEXEC) != 0) {
    close(results_pipe[0]);
    close(results_pipe[1]);
    throw std::runtime_error("RunThreadRanks: pipe");
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("RunThreadRanks: fork");
  if (pid == 0) {
    close(results_pipe[0]);
    close(output_pipe[0]);
    dup2(output_pipe[1], STDOUT_FILENO);
    dup2(output_pipe[1], STDERR_FILENO);
    close(output_pipe[1]);
    RunChild(world_size, body, results_pipe[1]);
  }
  close(results_pipe[1]);
  close(output_pipe[1]);
  std::string report, output;
  const bool killed =
      Collect(pid, results_pipe[0], output_pipe[0], timeout, &report, &output);
  int status = 0;
  waitpid(pid, &status, 0);

  std::vector<RankResult> results(world_size);
  std::istringstream in(report);
  for (int r = 0; r < world_size; ++r) {
    results[r].rank = r;
    int code = 0;
    size_t length = 0;
    if (!(in >> code >> length) || in.get() != '\n') {
      // No report for this rank: the child died or was killed first.
      results[r].term_signal =
          killed ? SIGKILL : (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      continue;
    }
    results[r].exit_code = code;
    results[r].output.resize(length);
    in.read(&results[r].output[0], static_cast<std::streamsize>(length));
  }
  if (!output.empty()) {
    results[0].output = "[process output]\n" + output + results[0].output;
  }
  return results;
}

}  // namespace ringlab::comm::testing
