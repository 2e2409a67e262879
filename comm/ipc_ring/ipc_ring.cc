#include "comm/ipc_ring/ipc_ring.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "comm/cuda_support.h"
#include "comm/ipc_ring/core.h"
#include "comm/ipc_ring/kernels.h"
#include "comm/peer_watch.h"
#include "comm/store/hex.h"
#include "comm/store/store.h"

namespace ringlab::comm {
namespace {

constexpr char kName[] = "ipc_ring";
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

const char kOnePerProcess[] =
    "; ipc_ring needs one process per rank (for ranks as threads of one "
    "process, use ipc_ring_threads)";

// One process per rank: peers' regions are mapped through CUDA IPC handles
// exchanged in the store, peers' processes watched (PeerWatch).
class IpcRing : public IpcRingCore {
 public:
  IpcRing(const RankContext& context, const CommOptions& options)
      : IpcRingCore(kName, context, options),
        store_(context.store),
        prefix_("ipc_ring/" + std::to_string(g_instances.fetch_add(1))) {
    if (world_size_ > 1 && store_ == nullptr) {
      throw CommError("ipc_ring: needs a rendezvous store for the IPC handles");
    }
    CreationGuard creating(world_size_ > 1);
    if (creating.concurrent()) {
      throw CommError(
          "ipc_ring: two ranks are being created at once in process " +
          std::to_string(getpid()) + kOnePerProcess);
    }
    device_ = SelectCudaDevice(options, context.local_rank, kName);
    try {
      Init();
    } catch (const CommError& e) {
      Release();
      if (g_refused_concurrent.load() > 0) {
        throw CommError(std::string(e.what()) +
                        " (another ipc_ring rank was created in this process "
                        "at the same time" +
                        kOnePerProcess + ")");
      }
      throw;
    } catch (...) {
      Release();
      throw;
    }
  }

  ~IpcRing() override { Release(); }

 protected:
  int GonePeer() const override { return watch_.FirstDeadPeer(); }

 private:
  void Init() {
    if (world_size_ == 1) return;  // nothing to share, nothing to launch
    AgreeOnTuning(store_, prefix_);
    // A blocking stream: the caller's work on the legacy default stream
    // (a cudaMemcpy still in flight) is ordered before the kernels.
    CreateResources(cudaStreamDefault, /*wait_for_legacy=*/false);
    AttachOwnRegion();

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
                    std::to_string(kIpcRingDataOffset) + " " + bus_id + " " +
                    host + " " + std::to_string(pid));
    exported_ = true;
    watch_ = PeerWatch(store_, prefix_, rank_, world_size_, join_timeout_);
    for (int q = 0; q < world_size_; ++q) {
      if (q != rank_) OpenPeer(q, host, pid, bus_id);
    }
  }

  void OpenPeer(int q, const std::string& host, long pid, const char* bus_id) {
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
      throw CommError("ipc_ring: ranks " + std::to_string(std::min(q, rank_)) +
                      " and " + std::to_string(std::max(q, rank_)) +
                      " are both in process " + std::to_string(pid) +
                      kOnePerProcess);
    }
    void* base = nullptr;
    CudaCheck(cudaIpcOpenMemHandle(&base, peer, cudaIpcMemLazyEnablePeerAccess),
              kName,
              "cudaIpcOpenMemHandle of rank " + std::to_string(q) + " (GPU " +
                  peer_bus + ", this rank on " + bus_id + ")");
    opened_[q] = base;
    AttachPeerRegion(q, base, data_offset);
  }

  // Every rank closes its mappings of the others' regions before any rank
  // frees its own (freeing memory a peer still maps is undefined): each rank
  // says so under its own key, and this one waits, bounded by the deadline,
  // until every peer has either said so or exited (its mappings died with
  // it). Per-rank keys rather than a count, so that a peer that exits after
  // saying so is not subtracted twice. False when some peer may still map
  // this rank's region: it is then leaked, not freed.
  bool WaitForPeersToUnmap() noexcept {
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
      return pending.empty();
    } catch (...) {  // the store is gone: nobody can say they unmapped
      return false;
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
    if (!StopKernel()) {
      // A kernel that would not stop may still touch all of it: leak it
      // rather than free memory in use. The process is expected to exit.
      return;
    }
    for (int q = 0; q < kIpcRingMaxRanks; ++q) {
      if (opened_[q] != nullptr) cudaIpcCloseMemHandle(opened_[q]);
      opened_[q] = nullptr;
    }
    AnnounceUnmapped();
    const bool unmapped = !exported_ || WaitForPeersToUnmap();
    FreeResources(unmapped);
  }

  Store* const store_;
  const std::string prefix_;
  void* opened_[kIpcRingMaxRanks] = {};
  bool exported_ = false;
  PeerWatch watch_;
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
