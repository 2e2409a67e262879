// shm_ring's tuning settings (its description's, comm/tuning.h), and the
// same values typed, as the backend reads them and its tests set them.
// Defaults measured with bench/allreduce_bench at 2 ranks (2-vCPU VM, under
// chrt -f 10): up to 10 floats the inline path (flag, description and data
// in one cache line) took 0.26-0.30 us against the ring's 0.45-0.5; at 1-4
// KiB one-shot and ring tied; from 16 KiB the ring was faster (1.2x at 16
// KiB, 2x at 256 KiB). Chunks of 16 KiB to 256 KiB were within noise of
// each other from 256 KiB to 64 MiB.
#ifndef RINGLAB_COMM_SHM_RING_TUNING_H_
#define RINGLAB_COMM_SHM_RING_TUNING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "comm/tuning.h"

namespace ringlab::comm {

struct ShmRingTuning {
  // The numbers are what the segment's header records.
  enum class Stores : uint32_t {
    kCached = 0,     // ordinary stores into the mailboxes
    kStreaming = 1,  // non-temporal stores (bypass this core's cache)
    kMeasured = 2,   // chosen at creation from the measured barrier latency
  };
  static constexpr size_t kDefaultOneShotBytes = 4 << 10;
  static constexpr size_t kDefaultChunkBytes = 128 << 10;
  static constexpr size_t kDefaultStageBytes = 1 << 20;

  // Buffers up to this many bytes take the one-shot path (every rank posts
  // its buffer, then sums all of them in rank order); 0: only count 0 does.
  size_t oneshot_bytes = kDefaultOneShotBytes;
  // The ring's chunk, rounded up to 4 KiB pages; unset: 128 KiB, smaller
  // from 17 ranks up so that a rank's mailbox stays within 8 MiB.
  std::optional<size_t> chunk_bytes;
  // The staged allreduce's area per rank, rounded up to pages.
  size_t stage_bytes = kDefaultStageBytes;
  // Buffers from this many bytes up take the ring, smaller ones the staged
  // path; unset: chosen at creation (the ring with a core per rank, staged
  // when ranks share cores).
  std::optional<size_t> ring_bytes;
  Stores stores = Stores::kMeasured;
  // Prints on stderr what the ranks chose at creation.
  bool debug = false;

  // The values `tuning` sets, the defaults for the rest.
  static ShmRingTuning From(const BackendTuning& tuning);
  // These values as settings (what tests and benchmarks pass in).
  BackendTuning ToTuning() const;
};

// shm_ring.oneshot_bytes, .chunk_bytes, .stage_bytes, .ring_bytes, .stores,
// .debug, with their variables (RINGLAB_SHM_*), ranges and defaults.
const std::vector<TuningSetting>& ShmRingSettings();

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_SHM_RING_TUNING_H_
