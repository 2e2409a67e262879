#include "comm/ipc_ring/tuning.h"

namespace ringlab::comm {
namespace {

constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = 1 << 30;

}  // namespace

const std::vector<TuningSetting>& IpcRingSettings() {
  static const auto* settings = new std::vector<TuningSetting>{
      {"ipc_ring.oneshot_bytes", "RINGLAB_IPC_RING_ONESHOT_BYTES", "oneshot", 0,
       uint64_t{1} << 40, IpcRingTuning::kDefaultOneShotBytes,
       "buffers up to this size take the one-shot kernel"},
      {"ipc_ring.chunk_bytes", "RINGLAB_IPC_RING_CHUNK_BYTES", "chunk",
       4 * kKiB, 64 * kMiB, IpcRingTuning::kDefaultChunkBytes,
       "about this many bytes per chunk of a ring segment"},
      {"ipc_ring.buffer_bytes", "RINGLAB_IPC_RING_BUFFER_BYTES", "buffer",
       64 * kKiB, 16 * kGiB, IpcRingTuning::kDefaultBufferBytes,
       "each rank's registered device buffer (larger buffers go in pieces)"},
  };
  return *settings;
}

IpcRingTuning IpcRingTuning::From(const BackendTuning& tuning) {
  const std::vector<TuningSetting>& s = IpcRingSettings();
  IpcRingTuning t;
  t.oneshot_bytes = tuning.GetOr(s[0]);
  t.chunk_bytes = tuning.GetOr(s[1]);
  t.buffer_bytes = tuning.GetOr(s[2]);
  return t;
}

BackendTuning IpcRingTuning::ToTuning() const {
  const std::vector<TuningSetting>& s = IpcRingSettings();
  BackendTuning tuning;
  tuning.Set(s[0].name, oneshot_bytes);
  tuning.Set(s[1].name, chunk_bytes);
  tuning.Set(s[2].name, buffer_bytes);
  return tuning;
}

}  // namespace ringlab::comm
