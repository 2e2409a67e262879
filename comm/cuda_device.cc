#include "comm/cuda_device.h"

#include <cuda_runtime_api.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/process.h"
#include "comm/store.h"

namespace ringlab::comm {
namespace {

// How long CudaDeviceCountInChild waits for its child.
constexpr std::chrono::seconds kDeviceProbeTimeout(60);

}  // namespace

void CudaCheck(int status, const char* backend, const std::string& what) {
  if (status == cudaSuccess) return;
  auto err = static_cast<cudaError_t>(status);
  throw CommError(std::string(backend) + ": " + what + " failed: " +
                  cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

int CudaDeviceCount(std::string* why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) {
      *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) +
             " (" + cudaGetErrorString(err) + ")";
    }
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount found no device";
  return count;
}

int CudaDeviceCountInChild(std::string* why) {
  int fds[2];
  if (pipe(fds) != 0) {
    if (why) *why = "pipe() failed";
    return 0;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    if (why) *why = "fork() failed";
    return 0;
  }
  if (pid == 0) {
    close(fds[0]);
    std::string reason;
    int count = CudaDeviceCount(&reason);
    std::string msg = std::to_string(count) + " " + reason;
    ssize_t ignored = write(fds[1], msg.data(), msg.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  // A driver that hangs in initialisation must not hang the caller: read
  // under a deadline, then kill the child.
  const auto deadline = std::chrono::steady_clock::now() + kDeviceProbeTimeout;
  std::string msg;
  char buf[512];
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: the child has written all
    msg.append(buf, n);
  }
  close(fds[0]);
  int status = 0;
  if (timed_out) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    if (why) {
      *why = "no device (probe timed out after " +
             std::to_string(kDeviceProbeTimeout.count()) + " s)";
    }
    return 0;
  }
  waitpid(pid, &status, 0);
  int count = 0;
  std::istringstream in(msg);
  if (!(in >> count)) {
    if (why)
      *why =
          "device probe child failed (status " + std::to_string(status) + ")";
    return 0;
  }
  std::string reason;
  std::getline(in, reason);
  if (why) *why = reason.empty() ? reason : reason.substr(1);
  return count;
}

int SelectCudaDevice(const CommOptions& options, int local_rank,
                     const char* backend) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    throw CommError(
        std::string(backend) + ": no CUDA device (" +
        (err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0") +
        ")");
  }
  int device =
      options.cuda_device >= 0 ? options.cuda_device : local_rank % count;
  if (device >= count) {
    throw CommError(std::string(backend) + ": cuda_device " +
                    std::to_string(device) + " out of range (" +
                    std::to_string(count) + " devices)");
  }
  CudaCheck(cudaSetDevice(device), backend,
            "cudaSetDevice(" + std::to_string(device) + ")");
  return device;
}

std::string HostIdentity() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  return std::string(name) + "|" + (n > 0 ? std::string(ns, n) : "?");
}

PeerWatch::PeerWatch(Store* store, const std::string& prefix, int rank,
                     int world_size, std::chrono::milliseconds timeout)
    : local_pids_(world_size, 0) {
  if (store == nullptr || world_size == 1) return;
  const std::string host = HostIdentity();
  store->Set(prefix + "/pid/" + std::to_string(rank),
             host + " " + std::to_string(getpid()));
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    std::istringstream in(
        store->Get(prefix + "/pid/" + std::to_string(r), timeout));
    std::string peer_host;
    long pid = 0;
    if (in >> peer_host >> pid && peer_host == host) {
      local_pids_[r] = static_cast<pid_t>(pid);
    }
  }
}

bool PeerWatch::Exited(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < local_pids_.size() &&
         local_pids_[rank] > 0 && ProcessExited(local_pids_[rank]);
}

int PeerWatch::FirstDeadPeer() const {
  for (size_t r = 0; r < local_pids_.size(); ++r) {
    if (local_pids_[r] > 0 && ProcessExited(local_pids_[r]))
      return static_cast<int>(r);
  }
  return -1;
}

PollPacer::PollPacer()
    : start_(std::chrono::steady_clock::now()), last_check_(start_) {}

bool PollPacer::CheckDue() {
  const auto now = std::chrono::steady_clock::now();
  if (first_ || now - last_check_ >= std::chrono::milliseconds(1)) {
    first_ = false;
    last_check_ = now;
    return true;
  }
  return false;
}

void PollPacer::Pause() {
  if (std::chrono::steady_clock::now() - start_ <
      std::chrono::milliseconds(2)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::string ToHex(const void* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

bool FromHex(const std::string& hex, void* data, size_t size) {
  if (hex.size() != 2 * size) return false;
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    unsigned value = 0;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &value) != 1) return false;
    p[i] = static_cast<unsigned char>(value);
  }
  return true;
}

}  // namespace ringlab::comm
