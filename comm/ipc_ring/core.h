// What ipc_ring's two modes share: the collectives themselves. Each rank owns
// one device region (progress counters, call descriptors and a claim word,
// then the data buffer) and reaches every peer's through IpcRingPeers; an
// IpcRingCore launches the kernels of ipc_ring_kernels.h on its own stream,
// waits for them under the deadline, and turns what the kernel recorded into
// a CommError. How peers' regions got into IpcRingPeers (CUDA IPC handles
// between processes in ipc_ring.cc, plain device pointers between threads in
// ipc_ring_threads.cc), how a rank learns that a peer is gone, and when its
// own region may be freed are the modes' own, through the hooks below.
#ifndef RINGLAB_COMM_IPC_RING_CORE_H_
#define RINGLAB_COMM_IPC_RING_CORE_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/backend.h"
#include "comm/ipc_ring/kernels.h"
#include "comm/ipc_ring/tuning.h"
#include "comm/store/store.h"

namespace ringlab::comm {

// Progress counters sit at the start of each rank's region, the data buffer
// after them at an offset that keeps it 16-byte (here 4 KiB) aligned.
inline constexpr size_t kIpcRingDataOffset = 4096;
static_assert(kIpcRingControlWords * sizeof(uint64_t) <= kIpcRingDataOffset);

class IpcRingCore : public Backend {
 public:
  IpcRingCore(const IpcRingCore&) = delete;
  IpcRingCore& operator=(const IpcRingCore&) = delete;

  void AllReduce(void* data, size_t count, DataType type, ReduceOp op) override;
  void Broadcast(void* data, size_t count, DataType type, int root) override;
  void Barrier() override;
  void AllGather(const void* send, void* recv, size_t count,
                 DataType type) override;

 protected:
  // Throws std::invalid_argument for a world size outside 1..kIpcRingMaxRanks.
  IpcRingCore(const char* name, const RankContext& context,
              const CommOptions& options);

  // The lowest peer known to be gone for good (its process exited), or -1:
  // the host then raises the abort word instead of waiting out the deadline.
  virtual int GonePeer() const = 0;
  // Called before every launch, with every argument already checked (the
  // threads mode lines its ranks up here). May throw CommError.
  virtual void BeforeLaunch(const char* what) { (void)what; }

  // Rank 0 publishes its tuning (the ipc_ring.* settings) in the store;
  // every rank takes rank 0's, so all run one schedule.
  void AgreeOnTuning(Store* store);
  // The stream (with `flags`), the mapped status word and this rank's region
  // with its counters zeroed (stream-ordered, then that stream synchronised:
  // no device-wide synchronisation, which ranks-as-threads must avoid).
  // `wait_for_legacy`: every launch first waits for work already issued to
  // the legacy default stream (the caller's cudaMemcpy may still be in
  // flight when it returns), which a non-blocking stream would not.
  void CreateResources(unsigned stream_flags, bool wait_for_legacy);
  // Points peers_ at this rank's own region.
  void AttachOwnRegion();
  void AttachPeerRegion(int peer, void* base, size_t data_offset);

  // Asks a running kernel to stop and waits (5 s at most). False when it is
  // still running: then nothing it uses may be freed.
  bool StopKernel() noexcept;
  // Frees the region unless `peers_done` is false (a peer may still read
  // it: leaked, saying so on stderr), then the status word and the stream.
  void FreeResources(bool peers_done) noexcept;

  const char* const name_;
  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds join_timeout_;
  int device_ = -1;
  size_t buffer_bytes_ = 0;  // the registered buffer's, a multiple of 16
  void* region_ = nullptr;
  IpcRingPeers peers_;

 private:
  // Elements of `type` the registered buffer holds.
  size_t CapacityOf(DataType type) const;
  void Run(IpcRingLaunch launch, const char* what);
  void Wait(const char* what, const IpcRingDescriptor& ours);
  [[noreturn]] void ThrowKernelFailure(const char* what,
                                       const IpcRingDescriptor& ours, int dead,
                                       bool host_timeout);

  IpcRingTuning tuning_;  // this rank's until AgreeOnTuning, then rank 0's
  cudaStream_t stream_ = nullptr;
  cudaEvent_t legacy_done_ = nullptr;         // wait_for_legacy only
  volatile IpcRingStatus* status_ = nullptr;  // host view
  IpcRingStatus* status_dev_ = nullptr;       // device view
  uint64_t base_ = 0;
  bool in_flight_ = false;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_IPC_RING_CORE_H_
