// ipc_ring's tuning settings, shared by ipc_ring and ipc_ring_threads (both
// descriptions list them), and the same values typed. Defaults not yet
// measured on a GPU: bench/allreduce_threads_bench (or allreduce_bench with
// ipc_ring) with oneshot_bytes 0 (ring only) against a large value (one-shot
// only) gives the crossover that should replace this guess.
#ifndef RINGLAB_COMM_IPC_RING_TUNING_H_
#define RINGLAB_COMM_IPC_RING_TUNING_H_

#include <cstddef>
#include <vector>

#include "comm/tuning.h"

namespace ringlab::comm {

struct IpcRingTuning {
  static constexpr size_t kDefaultOneShotBytes = 256 << 10;
  static constexpr size_t kDefaultChunkBytes = 1 << 20;
  static constexpr size_t kDefaultBufferBytes = 64 << 20;

  // Buffers up to this many bytes (and within the registered buffer) take
  // the one-shot kernel.
  size_t oneshot_bytes = kDefaultOneShotBytes;
  // About this many bytes per chunk of a ring segment (at most 64 chunks).
  size_t chunk_bytes = kDefaultChunkBytes;
  // Each rank's registered device buffer; larger buffers go through it in
  // pieces.
  size_t buffer_bytes = kDefaultBufferBytes;

  // The values `tuning` sets, the defaults for the rest.
  static IpcRingTuning From(const BackendTuning& tuning);
  BackendTuning ToTuning() const;
};

// ipc_ring.oneshot_bytes, .chunk_bytes, .buffer_bytes (RINGLAB_IPC_RING_*).
const std::vector<TuningSetting>& IpcRingSettings();

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_IPC_RING_TUNING_H_
