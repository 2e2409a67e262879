#include "comm/ipc_ring/core.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "comm/cuda_support.h"
#include "comm/poll_pacer.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string Where(int phase, int step) {
  switch (phase) {
    case kIpcRingEntry:
      return "waiting for inputs";
    case kIpcRingReduceScatter:
      return "reduce-scatter step " + std::to_string(step);
    case kIpcRingAllGather:
      return "all-gather step " + std::to_string(step);
    default:
      return "exit barrier";
  }
}

}  // namespace

IpcRingCore::IpcRingCore(const char* name, const RankContext& context,
                         const CommOptions& options)
    : name_(name),
      rank_(context.rank),
      world_size_(context.world_size),
      timeout_(options.timeout),
      join_timeout_(options.join_timeout),
      tuning_(IpcRingTuning::From(options.tuning)) {
  if (world_size_ < 1 || world_size_ > kIpcRingMaxRanks) {
    throw std::invalid_argument(std::string(name_) + ": world size " +
                                std::to_string(world_size_) + " outside 1.." +
                                std::to_string(kIpcRingMaxRanks));
  }
  std::memset(&peers_, 0, sizeof(peers_));
}

void IpcRingCore::AgreeOnTuning(Store* store) {
  if (rank_ == 0) {
    std::ostringstream config;
    config << tuning_.oneshot_bytes << ' ' << tuning_.chunk_bytes << ' '
           << tuning_.buffer_bytes;
    store->Set("config", config.str());
  }
  std::istringstream config(store->Get("config", join_timeout_));
  if (!(config >> tuning_.oneshot_bytes >> tuning_.chunk_bytes >>
        tuning_.buffer_bytes)) {
    throw CommError(std::string(name_) + ": malformed tuning in the store");
  }
}

void IpcRingCore::CreateResources(unsigned stream_flags, bool wait_for_legacy) {
  CudaCheck(cudaStreamCreateWithFlags(&stream_, stream_flags), name_,
            "cudaStreamCreate");
  if (wait_for_legacy) {
    CudaCheck(cudaEventCreateWithFlags(&legacy_done_, cudaEventDisableTiming),
              name_, "cudaEventCreate");
  }
  buffer_bytes_ = std::max<size_t>(16, tuning_.buffer_bytes & ~size_t{15});
  void* status = nullptr;
  CudaCheck(cudaHostAlloc(&status, sizeof(IpcRingStatus), cudaHostAllocMapped),
            name_, "cudaHostAlloc(status)");
  std::memset(status, 0, sizeof(IpcRingStatus));
  status_ = static_cast<IpcRingStatus*>(status);
  void* status_dev = nullptr;
  CudaCheck(cudaHostGetDevicePointer(&status_dev, status, 0), name_,
            "cudaHostGetDevicePointer(status)");
  status_dev_ = static_cast<IpcRingStatus*>(status_dev);

  const size_t region_bytes = kIpcRingDataOffset + buffer_bytes_;
  CudaCheck(cudaMalloc(&region_, region_bytes), name_,
            "cudaMalloc(" + std::to_string(region_bytes) + " bytes)");
  // Counters, descriptors and the claim word start at 0; they must be before
  // any peer reads them (peers learn of the region only after this returns).
  CudaCheck(cudaMemsetAsync(region_, 0, kIpcRingDataOffset, stream_), name_,
            "cudaMemsetAsync");
  CudaCheck(cudaStreamSynchronize(stream_), name_, "cudaStreamSynchronize");
}

void IpcRingCore::AttachOwnRegion() {
  AttachPeerRegion(rank_, region_, kIpcRingDataOffset);
}

void IpcRingCore::AttachPeerRegion(int peer, void* base, size_t data_offset) {
  peers_.progress[peer] = static_cast<uint64_t*>(base);
  peers_.data[peer] = static_cast<char*>(base) + data_offset;
}

size_t IpcRingCore::CapacityOf(DataType type) const {
  return buffer_bytes_ / DataTypeSize(type);
}

void IpcRingCore::AllReduce(void* buffer, size_t count, DataType type,
                            ReduceOp op) {
  char* const data = static_cast<char*>(buffer);
  if (count == 0) return;  // agreed on in the kernel only when data moves
  const size_t size = DataTypeSize(type), capacity = CapacityOf(type);
  const bool one_shot =
      count * size <= tuning_.oneshot_bytes && count <= capacity;
  for (size_t offset = 0; offset < count; offset += capacity) {
    IpcRingLaunch launch;
    launch.kind = one_shot ? IpcRingKind::kOneShot : IpcRingKind::kRing;
    launch.type = type;
    launch.in = launch.out = data + offset * size;
    launch.count = std::min(capacity, count - offset);
    launch.average = op == ReduceOp::kAvg;
    launch.chunks =
        IpcRingChunks(launch.count, world_size_, tuning_.chunk_bytes, size);
    Run(launch, "AllReduce");
  }
}

void IpcRingCore::Broadcast(void* buffer, size_t count, DataType type,
                            int root) {
  char* const data = static_cast<char*>(buffer);
  if (count == 0) return;
  const size_t size = DataTypeSize(type), capacity = CapacityOf(type);
  for (size_t offset = 0; offset < count; offset += capacity) {
    IpcRingLaunch launch;
    launch.kind = IpcRingKind::kBroadcast;
    launch.type = type;
    launch.in = launch.out = data + offset * size;
    launch.count = std::min(capacity, count - offset);
    launch.root = root;
    Run(launch, "Broadcast");
  }
}

// Each piece: every rank posts its part of its block in its registered
// buffer, then copies every peer's (ipc_ring_kernels.cu, AllGather).
void IpcRingCore::AllGather(const void* send_buffer, void* recv_buffer,
                            size_t count, DataType type) {
  const char* const send = static_cast<const char*>(send_buffer);
  char* const recv = static_cast<char*>(recv_buffer);
  if (count == 0) return;
  const size_t size = DataTypeSize(type), capacity = CapacityOf(type);
  if (world_size_ == 1) {
    if (send != recv) {
      CudaCheck(cudaMemcpy(recv, send, count * size, cudaMemcpyDeviceToDevice),
                name_, "cudaMemcpy (AllGather of one rank)");
    }
    return;
  }
  for (size_t offset = 0; offset < count; offset += capacity) {
    IpcRingLaunch launch;
    launch.kind = IpcRingKind::kAllGather;
    launch.type = type;
    launch.in = send + offset * size;
    launch.out = recv + offset * size;
    launch.count = std::min(capacity, count - offset);
    launch.stride = count;
    Run(launch, "AllGather");
  }
}

void IpcRingCore::Barrier() {
  if (world_size_ == 1) return;
  IpcRingLaunch launch;
  launch.kind = IpcRingKind::kBarrier;
  Run(launch, "Barrier");
}

// Launches one collective and waits for it under the deadline.
void IpcRingCore::Run(IpcRingLaunch launch, const char* what) {
  BeforeLaunch(what);
  launch.rank = rank_;
  launch.world_size = world_size_;
  launch.base = base_;
  launch.timeout_ns = static_cast<int64_t>(timeout_.count()) * 1000000;
  launch.status = status_dev_;
  status_->code = kIpcRingOk;
  status_->abort = 0;
  if (legacy_done_ != nullptr) {
    cudaError_t err = cudaEventRecord(legacy_done_, cudaStreamLegacy);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(stream_, legacy_done_, 0);
    CudaCheck(err, name_, "ordering after the legacy stream");
  }
  const cudaError_t launched = LaunchIpcRing(peers_, launch, stream_);
  // Even a launch that reported an error may be running (an older error
  // can surface here): the stream says when nothing runs.
  in_flight_ = true;
  base_ += IpcRingUnits(launch);
  if (launched != cudaSuccess) {
    StopKernel();
    CudaCheck(launched, name_, std::string(what) + " kernel launch");
  }
  Wait(what, IpcRingDescribe(launch));
}

// The host half of the deadline: the kernel gives up by itself at the
// deadline, so the host waits longer (twice, plus slack for kernels that
// time-slice with other processes' on a shared GPU) and meanwhile watches
// for gone peers, raising the abort word when one is.
void IpcRingCore::Wait(const char* what, const IpcRingDescriptor& ours) {
  const auto deadline = Clock::now() + 2 * timeout_ + std::chrono::seconds(5);
  int dead = -1;
  bool host_timeout = false;
  auto stop_deadline = Clock::time_point::max();
  PollPacer pacer;
  for (;; pacer.Pause()) {
    const cudaError_t query = cudaStreamQuery(stream_);
    if (query == cudaSuccess) break;
    if (query != cudaErrorNotReady) {
      in_flight_ = false;  // a sticky error: nothing runs any more
      // A peer that died mid-collective is the likelier story (its memory
      // went away under our mapping): name it first.
      dead = GonePeer();
      if (dead >= 0) {
        throw CommError(std::string(name_) + ": rank " + std::to_string(dead) +
                        " died during " + what + " (CUDA error " +
                        cudaGetErrorName(query) + ")");
      }
      CudaCheck(query, name_, std::string(what) + " kernel");
    }
    if (!pacer.CheckDue()) continue;
    const auto now = Clock::now();
    if (stop_deadline == Clock::time_point::max()) {
      dead = GonePeer();
      host_timeout = dead < 0 && now > deadline;
      if (dead >= 0 || host_timeout) {
        status_->abort = 1;
        stop_deadline = now + std::chrono::seconds(5);
      }
    } else if (now > stop_deadline) {
      // The kernel ignores the abort word (it never got a time slice?):
      // leave it, and its memory, alone rather than free what it uses.
      throw CommError(std::string(name_) + ": " + what + " on rank " +
                      std::to_string(rank_) +
                      " did not stop after an abort; its kernel is still "
                      "running");
    }
  }
  in_flight_ = false;
  if (status_->code == kIpcRingOk) return;  // finished before any abort
  ThrowKernelFailure(what, ours, dead, host_timeout);
}

void IpcRingCore::ThrowKernelFailure(const char* what,
                                     const IpcRingDescriptor& ours, int dead,
                                     bool host_timeout) {
  const int code = status_->code;
  const std::string where = Where(status_->phase, status_->step);
  const std::string name(name_);
  if (code == kIpcRingMismatch) {
    const IpcRingDescriptor theirs{{status_->theirs[0], status_->theirs[1]}};
    std::string text = IpcRingDescriptorText(theirs);
    if (text == IpcRingDescriptorText(ours)) {
      text += " after a different sequence of calls";
    }
    throw CommError(name + ": mismatched collectives: rank " +
                    std::to_string(rank_) + " is in " +
                    IpcRingDescriptorText(ours) + " but rank " +
                    std::to_string(status_->peer) + " is in " + text);
  }
  // A peer that exited explains a timeout or a poisoned counter best.
  if (dead < 0) dead = GonePeer();
  if (dead >= 0) {
    throw CommError(name + ": rank " + std::to_string(dead) + " died during " +
                    what + " (" + where + ")");
  }
  const std::string seconds = SecondsText(timeout_);
  if (code == kIpcRingTimeout) {
    throw CommError(name + ": timed out after " + seconds +
                    " waiting for rank " + std::to_string(status_->peer) +
                    " in " + what + " (" + where + ")");
  }
  if (code == kIpcRingPoisoned) {
    throw CommError(name + ": rank " + std::to_string(status_->peer) +
                    " failed in " + what + " (" + where + ")");
  }
  throw CommError(
      name + ": rank " + std::to_string(rank_) +
      (host_timeout ? " timed out after " + seconds : std::string(" aborted")) +
      " in " + what + " (" + where + "; the kernel made no progress)");
}

bool IpcRingCore::StopKernel() noexcept {
  if (!in_flight_ || status_ == nullptr || stream_ == nullptr) {
    in_flight_ = false;
    return true;
  }
  status_->abort = 1;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (cudaStreamQuery(stream_) == cudaErrorNotReady) {
    if (Clock::now() > deadline) return false;  // keep in_flight_
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  in_flight_ = false;
  return true;
}

void IpcRingCore::FreeResources(bool peers_done) noexcept {
  if (region_ != nullptr) {
    if (peers_done) {
      cudaFree(region_);
    } else {
      std::fprintf(stderr,
                   "%s: rank %d leaves its %zu-byte buffer allocated: a peer "
                   "may still map it\n",
                   name_, rank_, kIpcRingDataOffset + buffer_bytes_);
    }
  }
  region_ = nullptr;
  if (status_ != nullptr) cudaFreeHost(const_cast<IpcRingStatus*>(status_));
  status_ = nullptr;
  status_dev_ = nullptr;
  if (legacy_done_ != nullptr) cudaEventDestroy(legacy_done_);
  legacy_done_ = nullptr;
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

}  // namespace ringlab::comm
