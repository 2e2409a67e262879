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
#include "comm/store/hex.h"
#include "comm/store/store.h"

namespace ringlab::comm {
namespace {

constexpr char kName[] = "ipc_ring";
using Clock = std::chrono::steady_clock;

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
        watch_(context.peers, context.rank) {
    // CUDA cannot open a process's own IPC handle: ranks in one process
    // (threads) are refused at once, before any CUDA call, naming them.
    for (int q = 0; q < world_size_; ++q) {
      if (q != rank_ && context.peers[q].SameProcess(context.peers[rank_])) {
        throw CommError(
            "ipc_ring: ranks " + std::to_string(std::min(q, rank_)) + " and " +
            std::to_string(std::max(q, rank_)) + " are both in process " +
            std::to_string(context.peers[rank_].pid) + kOnePerProcess);
      }
    }
    device_ = SelectCudaDevice(options, context.local_rank, kName);
    try {
      Init();
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
    AgreeOnTuning(store_);
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
    store_->Set("handle/" + std::to_string(rank_),
                ToHex(&handle, sizeof(handle)) + " " +
                    std::to_string(kIpcRingDataOffset) + " " + bus_id);
    exported_ = true;
    store_->Wait(RankKeys("handle", world_size_), join_timeout_);
    for (int q = 0; q < world_size_; ++q) {
      if (q != rank_) OpenPeer(q, bus_id);
    }
  }

  void OpenPeer(int q, const char* bus_id) {
    std::istringstream in(store_->Get("handle/" + std::to_string(q),
                                      std::chrono::milliseconds(0)));
    std::string hex, peer_bus;
    size_t data_offset = 0;
    cudaIpcMemHandle_t peer;
    if (!(in >> hex >> data_offset >> peer_bus) ||
        !FromHex(hex, &peer, sizeof(peer))) {
      throw CommError("ipc_ring: malformed IPC handle of rank " +
                      std::to_string(q) + " in the store");
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
      auto key = [](int q) { return "unmapped/" + std::to_string(q); };
      const auto deadline = Clock::now() + timeout_;
      while (!pending.empty()) {
        std::vector<std::string> keys;
        for (int q : pending) keys.push_back(key(q));
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - Clock::now());
        try {
          store_->Wait(keys, std::clamp(left, std::chrono::milliseconds(0),
                                        std::chrono::milliseconds(20)));
          return true;
        } catch (const StoreTimeout&) {
          // A peer that exited is done too: its mappings died with it.
          pending.erase(std::remove_if(pending.begin(), pending.end(),
                                       [&](int q) {
                                         return watch_.Exited(q) ||
                                                store_->Check({key(q)});
                                       }),
                        pending.end());
          if (left.count() <= 0) return pending.empty();
        }
      }
      return true;
    } catch (...) {  // the store is gone: nobody can say they unmapped
      return false;
    }
  }

  // Tells the peers that this rank maps none of their regions any more (also
  // when Init failed before mapping any, so that they need not wait for it).
  void AnnounceUnmapped() noexcept {
    if (world_size_ == 1 || store_ == nullptr) return;
    try {
      store_->Set("unmapped/" + std::to_string(rank_), "1");
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
  const PeerWatch watch_;
  void* opened_[kIpcRingMaxRanks] = {};
  bool exported_ = false;
};

BackendDescription Description() {
  BackendDescription d;
  d.name = kName;
  d.summary =
      "ringlab's ring allreduce on GPUs over CUDA IPC, one process per rank "
      "on one host";
  d.memory = MemoryKind::kDevice;
  d.spans_hosts = false;
  d.checks_calls = true;     // every launch compares the ranks' descriptors
  d.types = AllDataTypes();  // rounded as kernels.h says
  d.tuning = IpcRingSettings();
  d.create = FactoryOf<IpcRing>();
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm
