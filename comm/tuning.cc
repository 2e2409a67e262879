#include "comm/tuning.h"

#include <stdexcept>
#include <string>

namespace ringlab::comm {
namespace {

constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = 1 << 30;

template <typename T>
std::optional<uint64_t> Number(const std::optional<T>& value) {
  if (!value) return std::nullopt;
  return static_cast<uint64_t>(*value);
}

// Stores::kMeasured is "unset"; anything else is its number, so that a
// value cast from outside the enum fails the range check.
std::optional<uint64_t> StoresNumber(ShmRingTuning::Stores stores) {
  if (stores == ShmRingTuning::Stores::kMeasured) return std::nullopt;
  return static_cast<uint64_t>(stores);
}

// Captureless lambdas, so that the table holds plain function pointers.
#define RINGLAB_TUNING_FIELD(path)                        \
  [](const BackendTuning& t) -> std::optional<uint64_t> { \
    return static_cast<uint64_t>(t.path);                 \
  },                                                      \
      [](BackendTuning& t, uint64_t v) {                  \
        t.path = static_cast<decltype(t.path)>(v);        \
      }
#define RINGLAB_TUNING_OPTIONAL(path)                          \
  [](const BackendTuning& t) { return Number(t.path); },       \
      [](BackendTuning& t, uint64_t v) {                       \
        t.path = static_cast<decltype(t.path)::value_type>(v); \
      }

}  // namespace

const std::vector<TuningSetting>& TuningSettings() {
  static const auto* settings = new std::vector<TuningSetting>{
      {"shm_ring.oneshot_bytes", "RINGLAB_SHM_ONESHOT_BYTES", 0, 16 * kMiB,
       RINGLAB_TUNING_FIELD(shm_ring.oneshot_bytes)},
      {"shm_ring.chunk_bytes", "RINGLAB_SHM_CHUNK_BYTES", 4 * kKiB, 64 * kMiB,
       RINGLAB_TUNING_OPTIONAL(shm_ring.chunk_bytes)},
      {"shm_ring.stage_bytes", "RINGLAB_SHM_STAGE_BYTES", 64 * kKiB, 256 * kMiB,
       RINGLAB_TUNING_FIELD(shm_ring.stage_bytes)},
      {"shm_ring.ring_bytes", "RINGLAB_SHM_RING_BYTES", 0, uint64_t{1} << 40,
       RINGLAB_TUNING_OPTIONAL(shm_ring.ring_bytes)},
      {"shm_ring.stores", "RINGLAB_SHM_STREAM_STORES", 0, 1,
       [](const BackendTuning& t) { return StoresNumber(t.shm_ring.stores); },
       [](BackendTuning& t, uint64_t v) {
         t.shm_ring.stores = static_cast<ShmRingTuning::Stores>(v);
       }},
      {"shm_ring.debug", "RINGLAB_SHM_DEBUG", 0, 1,
       RINGLAB_TUNING_FIELD(shm_ring.debug)},
      {"ipc_ring.oneshot_bytes", "RINGLAB_IPC_RING_ONESHOT_BYTES", 0,
       uint64_t{1} << 40, RINGLAB_TUNING_FIELD(ipc_ring.oneshot_bytes)},
      {"ipc_ring.chunk_bytes", "RINGLAB_IPC_RING_CHUNK_BYTES", 4 * kKiB,
       64 * kMiB, RINGLAB_TUNING_FIELD(ipc_ring.chunk_bytes)},
      {"ipc_ring.buffer_bytes", "RINGLAB_IPC_RING_BUFFER_BYTES", 64 * kKiB,
       16 * kGiB, RINGLAB_TUNING_FIELD(ipc_ring.buffer_bytes)},
      {"mpi.check_calls", "RINGLAB_MPI_CHECK_CALLS", 0, 1,
       RINGLAB_TUNING_FIELD(mpi.check_calls)},
  };
  return *settings;
}

#undef RINGLAB_TUNING_FIELD
#undef RINGLAB_TUNING_OPTIONAL

void ValidateTuningValue(const TuningSetting& setting, uint64_t value) {
  if (value >= setting.min && value <= setting.max) return;
  throw std::invalid_argument(
      std::string(setting.name) + " = " + std::to_string(value) +
      " is outside [" + std::to_string(setting.min) + ", " +
      std::to_string(setting.max) + "] (" + setting.variable + ")");
}

void ValidateTuning(const BackendTuning& tuning) {
  for (const TuningSetting& setting : TuningSettings()) {
    if (const std::optional<uint64_t> value = setting.get(tuning)) {
      ValidateTuningValue(setting, *value);
    }
  }
}

}  // namespace ringlab::comm
