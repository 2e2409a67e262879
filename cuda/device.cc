#include "cuda/device.h"

#include <cuda_runtime_api.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <sstream>
#include <stdexcept>

#include "cuda/error.h"

namespace ringlab::cuda {
namespace {

// How long DeviceCountInChild waits for its child.
constexpr std::chrono::seconds kDeviceProbeTimeout(60);

// The child's answer ("<count> <why>"), read until end of file or the
// deadline; *timed_out says which.
std::string ReadAnswer(int fd, bool* timed_out) {
  const auto deadline = std::chrono::steady_clock::now() + kDeviceProbeTimeout;
  std::string msg;
  char buf[512];
  *timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      *timed_out = true;
      return msg;
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      *timed_out = ready == 0;
      return msg;
    }
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return msg;  // end of file: the child has written all
    msg.append(buf, n);
  }
}

// DeviceCount or its reason, for the error messages of LocalDevice and
// SelectDevice.
int CountOrThrow() {
  std::string why;
  const int count = DeviceCount(&why);
  if (count == 0)
    throw CudaError("no CUDA device (" + why + ")", cudaErrorNoDevice);
  return count;
}

}  // namespace

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = "cudaGetDeviceCount: " + ErrorText(err);
    cudaGetLastError();  // leave no error behind for the next call to report
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount found no device";
  return count;
}

int DeviceCountInChild(std::string* why) {
  int fds[2];
  if (pipe(fds) != 0) {
    if (why) *why = "pipe() failed";
    return 0;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    if (why) *why = "fork() failed";
    return 0;
  }
  if (pid == 0) {
    close(fds[0]);
    std::string reason;
    const int count = DeviceCount(&reason);
    const std::string msg = std::to_string(count) + " " + reason;
    ssize_t ignored = write(fds[1], msg.data(), msg.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  // A driver that hangs in initialisation must not hang the caller: read
  // under a deadline, then kill the child.
  bool timed_out = false;
  const std::string msg = ReadAnswer(fds[0], &timed_out);
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
    if (why) {
      *why =
          "device probe child failed (status " + std::to_string(status) + ")";
    }
    return 0;
  }
  std::string reason;
  std::getline(in, reason);
  if (why) *why = reason.empty() ? reason : reason.substr(1);
  return count;
}

int LocalDevice(int local_rank) {
  if (local_rank < 0) {
    throw std::invalid_argument("local rank must be >= 0, got " +
                                std::to_string(local_rank));
  }
  return local_rank % CountOrThrow();
}

void SelectDevice(int device) {
  const int count = CountOrThrow();
  if (device < 0 || device >= count) {
    throw CudaError("CUDA device " + std::to_string(device) +
                        " out of range (" + std::to_string(count) + " devices)",
                    cudaErrorInvalidDevice);
  }
  Check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
}

int CurrentDevice() {
  int device = -1;
  Check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

void Synchronize() { Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

int SelectRankDevice(int requested, int local_rank) {
  const int device = requested >= 0 ? requested : LocalDevice(local_rank);
  SelectDevice(device);
  return device;
}

}  // namespace ringlab::cuda
