#include "comm/shm_ring/tuning.h"

namespace ringlab::comm {
namespace {

constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;

const TuningSetting& Setting(size_t i) { return ShmRingSettings().at(i); }

}  // namespace

const std::vector<TuningSetting>& ShmRingSettings() {
  static const auto* settings = new std::vector<TuningSetting>{
      {"shm_ring.oneshot_bytes", "RINGLAB_SHM_ONESHOT_BYTES", "oneshot", 0,
       16 * kMiB, ShmRingTuning::kDefaultOneShotBytes,
       "buffers up to this size take the one-shot path (0: only count 0)"},
      {"shm_ring.chunk_bytes", "RINGLAB_SHM_CHUNK_BYTES", "chunk", 4 * kKiB,
       64 * kMiB, std::nullopt,
       "the ring's chunk, rounded up to pages; unset: 128 KiB, less from 17 "
       "ranks up (a mailbox within 8 MiB)"},
      {"shm_ring.stage_bytes", "RINGLAB_SHM_STAGE_BYTES", "stage", 64 * kKiB,
       256 * kMiB, ShmRingTuning::kDefaultStageBytes,
       "the staged path's area per rank, rounded up to pages"},
      {"shm_ring.ring_bytes", "RINGLAB_SHM_RING_BYTES", "ring", 0,
       uint64_t{1} << 40, std::nullopt,
       "buffers from this size take the ring, smaller ones the staged path; "
       "unset: the ring with a core per rank, else staged"},
      {"shm_ring.stores", "RINGLAB_SHM_STREAM_STORES", "stream", 0, 1,
       std::nullopt,
       "mailbox stores: 0 cached, 1 streaming; unset: chosen from the "
       "measured barrier latency"},
      {"shm_ring.debug", "RINGLAB_SHM_DEBUG", "debug", 0, 1, 0,
       "1: print on stderr what the ranks chose at creation"},
  };
  return *settings;
}

ShmRingTuning ShmRingTuning::From(const BackendTuning& tuning) {
  ShmRingTuning t;
  t.oneshot_bytes = tuning.GetOr(Setting(0));
  if (const auto v = tuning.Get(Setting(1).name)) t.chunk_bytes = *v;
  t.stage_bytes = tuning.GetOr(Setting(2));
  if (const auto v = tuning.Get(Setting(3).name)) t.ring_bytes = *v;
  if (const auto v = tuning.Get(Setting(4).name)) {
    t.stores = *v == 0 ? Stores::kCached : Stores::kStreaming;
  }
  t.debug = tuning.GetOr(Setting(5)) != 0;
  return t;
}

BackendTuning ShmRingTuning::ToTuning() const {
  BackendTuning tuning;
  tuning.Set(Setting(0).name, oneshot_bytes);
  if (chunk_bytes) tuning.Set(Setting(1).name, *chunk_bytes);
  tuning.Set(Setting(2).name, stage_bytes);
  if (ring_bytes) tuning.Set(Setting(3).name, *ring_bytes);
  if (stores != Stores::kMeasured) {
    tuning.Set(Setting(4).name, static_cast<uint64_t>(stores));
  }
  tuning.Set(Setting(5).name, debug ? 1 : 0);
  return tuning;
}

}  // namespace ringlab::comm
