// Device side of the ipc_ring backends: the kernels that run one collective
// between the registered buffers of all ranks (mapped into this process with
// CUDA IPC by ipc_ring, plain device pointers of one process's threads for
// ipc_ring_threads), and the plan that cuts a buffer into segments, chunks
// and per-block slices. Host code (ipc_ring_core.cc) owns the buffers and
// waits; this file only knows pointers.
//
// Synchronisation is pull-based: every rank writes only its own buffer and
// its own progress counters, and reads its peers'. Each of the kBlocks thread
// blocks owns the same slice of every chunk on every rank and a progress
// counter per rank: a producer block's threads write their slice, meet at a
// barrier, and one thread fences and writes the counter with st.release.sys;
// the consumer block on the next rank spins on that counter with
// ld.acquire.sys, then reads the slice (uncached loads). Counters only grow
// (the host adds the units each collective uses to a common base), so they
// never need resetting. Every rank checks, on entry, that every peer is in
// the same collective (its published descriptor), before it publishes
// anything a peer could take for the end of the call. A spinning block gives
// up at a deadline (%globaltimer) or when the host raises the abort word,
// records why in a host-mapped status (the first failing block of the launch
// only), and poisons its own counter so that waiting peers stop at once
// instead of at their own deadline.
//
// Element types: float32, float16 and bfloat16. Data moves in 16-byte
// packs (4 or 8 elements); a reduction widens each element to float32
// exactly, adds, and rounds back to the type after every partial sum, as
// gloo's and NCCL's rings do (the ring's last reduce-scatter step divides
// an average before that one rounding); the one-shot sums every rank's
// element in float32 in rank order and rounds once. Both are what
// comm/dtype's `add_divide2` and `sum_into` compute on the host.
#ifndef RINGLAB_COMM_IPC_RING_KERNELS_H_
#define RINGLAB_COMM_IPC_RING_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/dtype/dtype.h"

namespace ringlab::comm {

inline constexpr int kIpcRingMaxRanks = 16;
inline constexpr int kIpcRingBlocks = 16;
inline constexpr int kIpcRingThreads = 512;
// A progress counter with this bit set means "its owner failed".
inline constexpr uint64_t kIpcRingPoison = 1ull << 63;

// Pointers into every rank's registered allocation, valid in this process
// (own ones directly; peers' through cudaIpcOpenMemHandle between processes,
// as they are between threads of one process).
// progress[q] points to rank q's kIpcRingBlocks counters, followed by
// kIpcRingBlocks call descriptors of 2 words (IpcRingDescriptor), then the
// claim word: the first of this rank's blocks to fail in a launch records
// why (atomicMax of base + 1, so that it never needs resetting).
struct IpcRingPeers {
  void* data[kIpcRingMaxRanks];  // 16-byte aligned
  uint64_t* progress[kIpcRingMaxRanks];
};
inline constexpr size_t kIpcRingClaimWord = 3 * kIpcRingBlocks;
inline constexpr size_t kIpcRingControlWords = kIpcRingClaimWord + 1;

enum IpcRingCode : int {
  kIpcRingOk = 0,
  kIpcRingTimeout = 1,   // waited past the deadline for `peer`
  kIpcRingPoisoned = 2,  // `peer` failed and said so through its counter
  kIpcRingAborted = 3,   // the host raised `abort` (it saw a peer exit)
  kIpcRingMismatch = 4,  // `peer` is in another collective (`theirs`)
};

enum IpcRingPhase : int {
  kIpcRingEntry = 0,  // waiting for a peer's input to be in place
  kIpcRingReduceScatter = 1,
  kIpcRingAllGather = 2,
  kIpcRingExitBarrier = 3,  // all read; waiting before buffers are reused
};

// In host memory mapped into the device (cudaHostAllocMapped): the host
// clears it before a launch and reads it after; the device writes it only on
// failure (one block per launch: the one that won the claim word), and reads
// `abort`.
struct IpcRingStatus {
  volatile int code;
  volatile int peer;
  volatile int phase;
  volatile int step;
  volatile int abort;
  volatile uint64_t theirs[2];  // kIpcRingMismatch: the peer's descriptor
};

enum class IpcRingKind { kRing, kOneShot, kBroadcast, kBarrier, kAllGather };

struct IpcRingLaunch {
  IpcRingKind kind = IpcRingKind::kRing;
  int rank = 0;
  int world_size = 1;
  DataType type = DataType::kFloat32;
  // The caller's device buffer (may equal out), aligned to its type only.
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;  // elements, at most the registered capacity
  // kAllGather: every rank's piece of `count` elements lands at out + q *
  // stride elements (the caller's count per rank; pieces of it when larger
  // than the registered buffer).
  size_t stride = 0;
  bool average = false;
  int root = 0;       // kBroadcast
  int chunks = 1;     // per segment (kRing)
  uint64_t base = 0;  // every counter's value before this launch
  int64_t timeout_ns = 0;
  IpcRingStatus* status = nullptr;  // device view of the mapped status
};

// What a rank is doing, published next to its counters so that peers check
// that they are in the same collective (as shm_ring does): word 0 holds the
// kind, op, type, root and the low 32 bits of the base (the call history),
// word 1 the count (an allgather's: the caller's count per rank, its
// stride).
struct IpcRingDescriptor {
  uint64_t word[2];
};
IpcRingDescriptor IpcRingDescribe(const IpcRingLaunch& launch);
// In the words of every backend's mismatch reports (the conformance suite
// looks for them): "AllReduce(count=1021, op=avg; one-shot)",
// "Broadcast(count=5, root=1)", "AllGather(count=8)", "Barrier"; the type
// where it is not float32 ("AllReduce(count=8, dtype=float16, op=sum; ring)").
std::string IpcRingDescriptorText(const IpcRingDescriptor& descriptor);

// Counter increments one launch makes (the same on every rank and block).
uint64_t IpcRingUnits(const IpcRingLaunch& launch);

// Chunks per segment for the ring of `count` elements of `element_bytes`:
// about chunk_bytes each, at most 64, so that reading chunk k+1 from the left
// overlaps reducing chunk k.
int IpcRingChunks(size_t count, int world_size, size_t chunk_bytes,
                  size_t element_bytes);

// [begin, end) of the elements that block `block` handles in chunk `chunk`
// of segment `segment` (all ranges start at a multiple of 16 bytes, so the
// 16-byte packs stay aligned). Host-callable so that tests can check the
// partition.
struct IpcRingRange {
  size_t begin;
  size_t end;
};
IpcRingRange IpcRingSlice(size_t count, int world_size, int chunks, int segment,
                          int chunk, int block, size_t element_bytes);

// Enqueues one collective on `stream`; returns the launch's error, if any:
// the error state is cleared first, so that an older error is not taken for
// this launch's (the caller must still treat the kernel as possibly running
// until the stream says otherwise).
cudaError_t LaunchIpcRing(const IpcRingPeers& peers,
                          const IpcRingLaunch& launch, cudaStream_t stream);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_IPC_RING_KERNELS_H_
