#include "comm/ipc_ring/ipc_ring_threads.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/cuda_support.h"
#include "comm/ipc_ring/core.h"
#include "comm/job/thread_group.h"
#include "comm/store/store.h"

namespace ringlab::comm {
namespace {

constexpr char kName[] = "ipc_ring_threads";

// CUDA's hardware queues per context: 8 unless the process set more.
int MaxConnections() {
  const char* text = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (text == nullptr || *text == '\0') return 8;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && value > 0 ? static_cast<int>(value) : 8;
}

class IpcRingThreads : public IpcRingCore {
 public:
  IpcRingThreads(const RankContext& context, const CommOptions& options)
      : IpcRingCore(kName, context, options), store_(context.store) {
    if (world_size_ > 1) {
      if (world_size_ > MaxConnections()) {
        throw CommError(
            "ipc_ring_threads: " + std::to_string(world_size_) +
            " ranks need as many hardware queues, and "
            "CUDA_DEVICE_MAX_CONNECTIONS allows " +
            std::to_string(MaxConnections()) +
            " (call comm::PrepareProcessForRankThreads() before CUDA starts)");
      }
      // Host checks first: ranks in other processes are named before any
      // CUDA call (also on machines without a GPU).
      group_ = ThreadGroup::Join(context, join_timeout_, kName);
    }
    try {
      CommOptions one_device = options;
      if (one_device.cuda_device < 0) one_device.cuda_device = 0;
      device_ = SelectCudaDevice(one_device, context.local_rank, kName);
      Init();
    } catch (...) {
      Release();
      throw;
    }
  }

  ~IpcRingThreads() override { Release(); }

 protected:
  // A peer that left after the line-up either finished this collective or
  // poisoned its counters on the way out: the kernel ends by itself, so the
  // host has nothing to abort for (departures before it are the line-up's).
  int GonePeer() const override { return -1; }

  void BeforeLaunch(const char* what) override {
    group_->Arrive(rank_, what, /*call=*/"", timeout_);
  }

 private:
  void Init() {
    if (world_size_ == 1) return;  // nothing to share, nothing to launch
    AgreeOnTuning(store_);
    CreateResources(cudaStreamNonBlocking, /*wait_for_legacy=*/true);
    AttachOwnRegion();
    char bus_id[64] = {};
    CudaCheck(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_), kName,
              "cudaDeviceGetPCIBusId");
    std::ostringstream mine;
    mine << reinterpret_cast<uintptr_t>(region_) << ' ' << kIpcRingDataOffset
         << ' ' << device_ << ' ' << bus_id;
    const std::vector<std::string> all =
        group_->Exchange(rank_, mine.str(), join_timeout_);
    for (int q = 0; q < world_size_; ++q) {
      if (q == rank_) continue;
      std::istringstream in(all[q]);
      uintptr_t base = 0;
      size_t data_offset = 0;
      int device = -1;
      std::string bus;
      if (!(in >> base >> data_offset >> device >> bus) || base == 0) {
        throw CommError("ipc_ring_threads: malformed buffer of rank " +
                        std::to_string(q) + ": '" + all[q] + "'");
      }
      if (device != device_) {
        throw CommError("ipc_ring_threads: ranks " + std::to_string(rank_) +
                        " and " + std::to_string(q) +
                        " are on different devices (" + bus_id + ", " + bus +
                        "); ranks as threads share one device");
      }
      AttachPeerRegion(q, reinterpret_cast<void*>(base), data_offset);
    }
  }

  void Release() noexcept {
    // A kernel that would not stop may still read peers' regions: leave
    // nothing and free nothing (peers then leak theirs at their deadline).
    if (!StopKernel()) return;
    bool peers_done = true;
    if (group_) {
      group_->Leave(rank_);
      peers_done =
          region_ == nullptr || group_->WaitForPeersToLeave(rank_, timeout_);
      group_.reset();
    }
    FreeResources(peers_done);
  }

  Store* const store_;
  std::shared_ptr<ThreadGroup> group_;
};

BackendDescription Description() {
  BackendDescription d;
  d.name = kName;
  d.summary =
      "ipc_ring's kernels with the ranks as threads of one process on one "
      "GPU, each with its own stream";
  d.memory = MemoryKind::kDevice;
  d.launch = RankLaunch::kThreads;
  d.spans_hosts = false;
  d.checks_calls = true;     // every launch compares the ranks' descriptors
  d.types = AllDataTypes();  // rounded as kernels.h says
  d.tuning = IpcRingSettings();
  d.create = FactoryOf<IpcRingThreads>();
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm
