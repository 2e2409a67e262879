#include "comm/ipc_ring.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/cuda_device.h"
#include "comm/ipc_ring_kernels.h"
#include "comm/store.h"

namespace ringlab::comm {
namespace {

constexpr char kName[] = "ipc_ring";
// Progress counters sit at the start of each rank's region, the data buffer
// after them at an offset that keeps it 16-byte (here 4 KiB) aligned.
constexpr size_t kDataOffset = 4096;
static_assert(kIpcRingControlWords * sizeof(uint64_t) <= kDataOffset);
using Clock = std::chrono::steady_clock;

std::atomic<int> g_instances{0};
// Ranks of one job in one process (threads) would each take their own
// g_instances number and never meet in the store: count the creations in
// progress, so that a second one at the same time fails at once and the first
// one's timeout says why.
std::atomic<int> g_creating{0};
std::atomic<int> g_refused_concurrent{0};

// Counts a multi-rank ipc_ring's creation while it runs.
class CreationGuard {
 public:
  explicit CreationGuard(bool counted) : counted_(counted) {
    if (counted_ && g_creating.fetch_add(1) > 0) {
      concurrent_ = true;
      g_refused_concurrent.fetch_add(1);
    }
  }
  ~CreationGuard() {
    if (counted_) g_creating.fetch_sub(1);
  }
  CreationGuard(const CreationGuard&) = delete;
  CreationGuard& operator=(const CreationGuard&) = delete;
  bool concurrent() const { return concurrent_; }

 private:
  const bool counted_;
  bool concurrent_ = false;
};

size_t EnvBytes(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') {
    throw std::invalid_argument(std::string("ipc_ring: ") + name + "='" + text +
                                "' is not a byte count");
  }
  return static_cast<size_t>(value);
}

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

class IpcRing : public Communicator {
 public:
  IpcRing(const RankContext& context, const CommOptions& options)
      : rank_(context.rank),
        world_size_(context.world_size),
        timeout_(options.timeout),
        join_timeout_(options.join_timeout),
        store_(context.store),
        prefix_("ipc_ring/" + std::to_string(g_instances.fetch_add(1))) {
    if (world_size_ < 1 || world_size_ > kIpcRingMaxRanks) {
      throw std::invalid_argument("ipc_ring: world size " +
                                  std::to_string(world_size_) + " outside 1.." +
                                  std::to_string(kIpcRingMaxRanks));
    }
    if (world_size_ > 1 && store_ == nullptr) {
      throw CommError("ipc_ring: needs a rendezvous store for the IPC handles");
    }
    std::memset(&peers_, 0, sizeof(peers_));
    CreationGuard creating(world_size_ > 1);
    if (creating.concurrent()) {
      throw CommError(
          "ipc_ring: two ranks are being created at once in process " +
          std::to_string(getpid()) + "; ipc_ring needs one process per rank");
    }
    device_ = SelectCudaDevice(options, context.local_rank, kName);
    try {
      Init();
    } catch (const CommError& e) {
      Release();
      if (g_refused_concurrent.load() > 0) {
        throw CommError(std::string(e.what()) +
                        " (another ipc_ring rank was created in this process "
                        "at the same time: ipc_ring needs one process per "
                        "rank)");
      }
      throw;
    } catch (...) {
      Release();
      throw;
    }
  }

  ~IpcRing() override { Release(); }

  const char* backend() const override { return kName; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  MemoryKind memory() const override { return MemoryKind::kDevice; }
  uint64_t bytes_sent() const override { return bytes_sent_; }

  void AllReduce(float* data, size_t count, ReduceOp op) override {
    CheckUsable("AllReduce");
    if (data == nullptr && count > 0) {
      throw std::invalid_argument("ipc_ring: null data");
    }
    if (count == 0 || world_size_ == 1) return;  // sum or mean of one: itself
    const bool one_shot =
        count * sizeof(float) <= one_shot_bytes_ && count <= capacity_;
    for (size_t offset = 0; offset < count; offset += capacity_) {
      IpcRingLaunch launch;
      launch.kind = one_shot ? IpcRingKind::kOneShot : IpcRingKind::kRing;
      launch.in = launch.out = data + offset;
      launch.count = std::min(capacity_, count - offset);
      launch.average = op == ReduceOp::kAvg;
      launch.chunks = IpcRingChunks(launch.count, world_size_, chunk_bytes_);
      Run(launch, "AllReduce");
    }
    bytes_sent_ += AllReduceBusBytes(count, world_size_);
  }

  void Broadcast(float* data, size_t count, int root) override {
    CheckUsable("Broadcast");
    if (root < 0 || root >= world_size_) {
      throw std::invalid_argument("ipc_ring: Broadcast root " +
                                  std::to_string(root) + " out of range");
    }
    if (data == nullptr && count > 0) {
      throw std::invalid_argument("ipc_ring: null data");
    }
    if (count == 0 || world_size_ == 1) return;
    for (size_t offset = 0; offset < count; offset += capacity_) {
      IpcRingLaunch launch;
      launch.kind = IpcRingKind::kBroadcast;
      launch.in = launch.out = data + offset;
      launch.count = std::min(capacity_, count - offset);
      launch.root = root;
      Run(launch, "Broadcast");
    }
    bytes_sent_ += BroadcastBusBytes(count, world_size_);
  }

  void Barrier() override {
    CheckUsable("Barrier");
    if (world_size_ == 1) return;
    IpcRingLaunch launch;
    launch.kind = IpcRingKind::kBarrier;
    Run(launch, "Barrier");
  }

 private:
  void Init() {
    CudaCheck(cudaStreamCreate(&stream_), kName, "cudaStreamCreate");
    CudaCheck(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), kName,
              "cudaEventCreate");
    if (world_size_ == 1) return;  // nothing to share

    // Rank 0 decides the tuning so that every rank runs the same schedule.
    if (rank_ == 0) {
      std::ostringstream config;
      config << EnvBytes("RINGLAB_IPC_RING_ONESHOT_BYTES",
                         kIpcRingDefaultOneShotBytes)
             << ' '
             << EnvBytes("RINGLAB_IPC_RING_CHUNK_BYTES",
                         kIpcRingDefaultChunkBytes)
             << ' '
             << EnvBytes("RINGLAB_IPC_RING_BUFFER_BYTES",
                         kIpcRingDefaultBufferBytes);
      store_->Set(prefix_ + "/config", config.str());
    }
    std::istringstream config(store_->Get(prefix_ + "/config", join_timeout_));
    size_t buffer_bytes = 0;
    config >> one_shot_bytes_ >> chunk_bytes_ >> buffer_bytes;
    capacity_ = std::max<size_t>(4, buffer_bytes / sizeof(float) & ~size_t{3});

    void* status = nullptr;
    CudaCheck(
        cudaHostAlloc(&status, sizeof(IpcRingStatus), cudaHostAllocMapped),
        kName, "cudaHostAlloc(status)");
    std::memset(status, 0, sizeof(IpcRingStatus));
    status_ = static_cast<IpcRingStatus*>(status);
    void* status_dev = nullptr;
    CudaCheck(cudaHostGetDevicePointer(&status_dev, status, 0), kName,
              "cudaHostGetDevicePointer(status)");
    status_dev_ = static_cast<IpcRingStatus*>(status_dev);

    const size_t region_bytes = kDataOffset + capacity_ * sizeof(float);
    CudaCheck(cudaMalloc(&region_, region_bytes), kName,
              "cudaMalloc(" + std::to_string(region_bytes) + " bytes)");
    // Counters start at 0 on every rank; they must be before a peer reads.
    CudaCheck(cudaMemset(region_, 0, kDataOffset), kName, "cudaMemset");
    CudaCheck(cudaDeviceSynchronize(), kName, "cudaDeviceSynchronize");
    peers_.progress[rank_] = static_cast<uint64_t*>(region_);
    peers_.data[rank_] =
        reinterpret_cast<float*>(static_cast<char*>(region_) + kDataOffset);

    // The handle names the allocation; peers add the offsets to its base.
    cudaIpcMemHandle_t handle;
    CudaCheck(cudaIpcGetMemHandle(&handle, region_), kName,
              "cudaIpcGetMemHandle");
    char bus_id[64] = {};
    CudaCheck(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_), kName,
              "cudaDeviceGetPCIBusId");
    // Host and pid too: CUDA cannot open a process's own IPC handle, so two
    // ranks in one process must fail with a message rather than a CUDA code.
    const std::string host = HostIdentity();
    const long pid = static_cast<long>(getpid());
    store_->Set(prefix_ + "/handle/" + std::to_string(rank_),
                ToHex(&handle, sizeof(handle)) + " " +
                    std::to_string(kDataOffset) + " " + bus_id + " " + host +
                    " " + std::to_string(pid));
    exported_ = true;
    watch_ = PeerWatch(store_, prefix_, rank_, world_size_, join_timeout_);

    for (int q = 0; q < world_size_; ++q) {
      if (q == rank_) continue;
      std::istringstream in(
          store_->Get(prefix_ + "/handle/" + std::to_string(q), join_timeout_));
      std::string hex, peer_bus, peer_host;
      size_t data_offset = 0;
      long peer_pid = 0;
      cudaIpcMemHandle_t peer;
      if (!(in >> hex >> data_offset >> peer_bus >> peer_host >> peer_pid) ||
          !FromHex(hex, &peer, sizeof(peer))) {
        throw CommError("ipc_ring: malformed IPC handle of rank " +
                        std::to_string(q) + " in the store");
      }
      if (peer_host == host && peer_pid == pid) {
        throw CommError(
            "ipc_ring: ranks " + std::to_string(std::min(q, rank_)) + " and " +
            std::to_string(std::max(q, rank_)) + " are both in process " +
            std::to_string(pid) + "; ipc_ring needs one process per rank");
      }
      void* base = nullptr;
      CudaCheck(
          cudaIpcOpenMemHandle(&base, peer, cudaIpcMemLazyEnablePeerAccess),
          kName,
          "cudaIpcOpenMemHandle of rank " + std::to_string(q) + " (GPU " +
              peer_bus + ", this rank on " + bus_id + ")");
      opened_[q] = base;
      peers_.progress[q] = static_cast<uint64_t*>(base);
      peers_.data[q] =
          reinterpret_cast<float*>(static_cast<char*>(base) + data_offset);
    }
  }

  void CheckUsable(const char* what) const {
    if (broken_) {
      throw CommError(std::string("ipc_ring: ") + what + " on rank " +
                      std::to_string(rank_) +
                      " after an earlier collective failed");
    }
  }

  // Launches one collective and waits for it under the deadline.
  void Run(IpcRingLaunch launch, const char* what) {
    launch.rank = rank_;
    launch.world_size = world_size_;
    launch.base = base_;
    launch.timeout_ns = static_cast<int64_t>(timeout_.count()) * 1000000;
    launch.status = status_dev_;
    status_->code = kIpcRingOk;
    status_->abort = 0;
    cudaError_t err = LaunchIpcRing(peers_, launch, stream_);
    if (err != cudaSuccess) {
      broken_ = true;
      CudaCheck(err, kName, std::string(what) + " kernel launch");
    }
    in_flight_ = true;
    base_ += IpcRingUnits(launch);
    err = cudaEventRecord(done_, stream_);
    if (err != cudaSuccess) {
      broken_ = true;
      StopKernel();
      CudaCheck(err, kName, "cudaEventRecord");
    }
    Wait(what, IpcRingDescribe(launch));
  }

  // The host half of the deadline: the kernel gives up by itself at the
  // deadline, so the host waits longer (twice, plus slack for kernels that
  // time-slice with other processes' on a shared GPU) and meanwhile watches
  // the peers' processes, raising the abort word when one exits.
  void Wait(const char* what, const IpcRingDescriptor& ours) {
    const auto start = Clock::now();
    const auto deadline = start + 2 * timeout_ + std::chrono::seconds(5);
    int dead = -1;
    bool host_timeout = false;
    auto stop_deadline = Clock::time_point::max();
    PollPacer pacer;
    for (;; pacer.Pause()) {
      cudaError_t query = cudaEventQuery(done_);
      if (query == cudaSuccess) break;
      if (query != cudaErrorNotReady) {
        broken_ = true;
        in_flight_ = false;  // a sticky error: nothing runs any more
        // A peer that died mid-collective is the likelier story (its
        // memory went away under our mapping): name it first.
        dead = watch_.FirstDeadPeer();
        if (dead >= 0) {
          throw CommError("ipc_ring: rank " + std::to_string(dead) +
                          " died during " + what + " (CUDA error " +
                          cudaGetErrorName(query) + ")");
        }
        CudaCheck(query, kName, std::string(what) + " kernel");
      }
      if (!pacer.CheckDue()) continue;
      const auto now = Clock::now();
      if (stop_deadline == Clock::time_point::max()) {
        dead = watch_.FirstDeadPeer();
        host_timeout = dead < 0 && now > deadline;
        if (dead >= 0 || host_timeout) {
          status_->abort = 1;
          stop_deadline = now + std::chrono::seconds(5);
        }
      } else if (now > stop_deadline) {
        // The kernel ignores the abort word (it never got a time slice?):
        // leave it, and its memory, alone rather than free what it uses.
        broken_ = true;
        throw CommError(std::string("ipc_ring: ") + what + " on rank " +
                        std::to_string(rank_) +
                        " did not stop after an abort; its kernel is "
                        "still running");
      }
    }
    in_flight_ = false;
    const int code = status_->code;
    if (code == kIpcRingOk) return;  // finished before it saw an abort
    broken_ = true;
    const std::string where = Where(status_->phase, status_->step);
    if (code == kIpcRingMismatch) {
      const IpcRingDescriptor theirs{{status_->theirs[0], status_->theirs[1]}};
      std::string text = IpcRingDescriptorText(theirs);
      if (text == IpcRingDescriptorText(ours)) {
        text += " after a different sequence of calls";
      }
      throw CommError("ipc_ring: mismatched collectives: rank " +
                      std::to_string(rank_) + " is in " +
                      IpcRingDescriptorText(ours) + " but rank " +
                      std::to_string(status_->peer) + " is in " + text);
    }
    // A peer that exited explains a timeout or a poisoned counter best.
    if (dead < 0) dead = watch_.FirstDeadPeer();
    if (dead >= 0) {
      throw CommError("ipc_ring: rank " + std::to_string(dead) +
                      " died during " + what + " (" + where + ")");
    }
    const std::string seconds =
        std::to_string(std::chrono::duration<double>(timeout_).count());
    if (code == kIpcRingTimeout) {
      throw CommError("ipc_ring: timed out after " + seconds +
                      " s waiting for rank " + std::to_string(status_->peer) +
                      " in " + what + " (" + where + ")");
    }
    if (code == kIpcRingPoisoned) {
      throw CommError("ipc_ring: rank " + std::to_string(status_->peer) +
                      " failed in " + what + " (" + where + ")");
    }
    throw CommError("ipc_ring: rank " + std::to_string(rank_) +
                    (host_timeout ? " timed out after " + seconds + " s"
                                  : std::string(" aborted")) +
                    " in " + what + " (" + where +
                    "; the kernel made no "
                    "progress)");
  }

  // Asks a running kernel to give up and waits (bounded) for it.
  void StopKernel() noexcept {
    if (!in_flight_ || status_ == nullptr) return;
    status_->abort = 1;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (cudaEventQuery(done_) == cudaErrorNotReady) {
      if (Clock::now() > deadline) return;  // still running: keep in_flight_
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    in_flight_ = false;
  }

  // Every rank closes its mappings of the others' regions before any rank
  // frees its own (freeing memory a peer still maps is undefined): each rank
  // says so under its own key, and this one waits, bounded by the deadline,
  // until every peer has either said so or exited (its mappings died with
  // it). Per-rank keys rather than a count, so that a peer that exits after
  // saying so is not subtracted twice.
  void WaitForPeersToUnmap() noexcept {
    try {
      std::vector<int> pending;
      for (int q = 0; q < world_size_; ++q) {
        if (q != rank_) pending.push_back(q);
      }
      const auto deadline = Clock::now() + timeout_;
      while (!pending.empty() && Clock::now() < deadline) {
        const int q = pending.back();
        bool done = watch_.Exited(q);
        if (!done) {
          try {
            store_->Get(prefix_ + "/unmapped/" + std::to_string(q),
                        std::chrono::milliseconds(20));
            done = true;
          } catch (const CommError&) {  // not yet
          }
        }
        if (done) pending.pop_back();
      }
    } catch (...) {  // the store is gone: nothing left to coordinate with
    }
  }

  // Tells the peers that this rank maps none of their regions any more (also
  // when Init failed before mapping any, so that they need not wait for it).
  void AnnounceUnmapped() noexcept {
    if (world_size_ == 1 || store_ == nullptr) return;
    try {
      store_->Set(prefix_ + "/unmapped/" + std::to_string(rank_), "1");
    } catch (...) {  // the store is gone: peers fall back on the deadline
    }
  }

  void Release() noexcept {
    StopKernel();
    if (in_flight_) {
      // A kernel that would not stop may still touch these: leak them rather
      // than free memory in use. The process is expected to exit.
      return;
    }
    for (int q = 0; q < kIpcRingMaxRanks; ++q) {
      if (opened_[q] != nullptr) cudaIpcCloseMemHandle(opened_[q]);
      opened_[q] = nullptr;
    }
    AnnounceUnmapped();
    if (exported_) WaitForPeersToUnmap();
    if (region_ != nullptr) cudaFree(region_);
    region_ = nullptr;
    if (status_ != nullptr) {
      cudaFreeHost(const_cast<IpcRingStatus*>(status_));
    }
    status_ = nullptr;
    if (done_ != nullptr) cudaEventDestroy(done_);
    done_ = nullptr;
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds join_timeout_;
  Store* const store_;
  const std::string prefix_;
  int device_ = -1;
  size_t one_shot_bytes_ = kIpcRingDefaultOneShotBytes;
  size_t chunk_bytes_ = kIpcRingDefaultChunkBytes;
  size_t capacity_ = 0;  // floats in the registered buffer
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* region_ = nullptr;
  void* opened_[kIpcRingMaxRanks] = {};
  bool exported_ = false;
  volatile IpcRingStatus* status_ = nullptr;  // host view
  IpcRingStatus* status_dev_ = nullptr;       // device view
  IpcRingPeers peers_;
  PeerWatch watch_;
  uint64_t base_ = 0;
  bool in_flight_ = false;
  bool broken_ = false;
  uint64_t bytes_sent_ = 0;
};

const bool kRegistered = RegisterCommunicator(
    kName, [](const RankContext& context, const CommOptions& options) {
      return CreateIpcRing(context, options);
    });

}  // namespace

std::unique_ptr<Communicator> CreateIpcRing(const RankContext& context,
                                            const CommOptions& options) {
  (void)kRegistered;
  RequireOneHost(context, "ipc_ring");
  return std::make_unique<IpcRing>(context, options);
}

}  // namespace ringlab::comm
