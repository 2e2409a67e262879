// Backend tuning as typed options: the settings that choose a backend's
// algorithm thresholds and buffer sizes (shm_ring, ipc_ring, mpi), each with
// its default and its valid range, and the one rule that validates them all.
// They travel in CommOptions::tuning; CreateCommunicator validates them once,
// before any backend sees them, the same way for every backend. Library code
// never reads the environment for them: binaries' main turns the RINGLAB_*
// variables into these fields (comm/tuning_env.h). Where ranks could choose
// differently, rank 0's values are the ones every rank uses (shm_ring through
// its segment's header, ipc_ring through the store).
#ifndef RINGLAB_COMM_TUNING_H_
#define RINGLAB_COMM_TUNING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace ringlab::comm {

// shm_ring (comm/shm_ring/shm_ring.h). Defaults measured with
// bench/allreduce_bench at 2 ranks (2-vCPU VM, under chrt -f 10): up to 10
// floats the inline path (flag, description and data in one cache line) took
// 0.26-0.30 us against the ring's 0.45-0.5; at 1-4 KiB one-shot and ring tied;
// from 16 KiB the ring was faster (1.2x at 16 KiB, 2x at 256 KiB). Chunks of 16
// KiB to 256 KiB were within noise of each other from 256 KiB to 64 MiB.
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
  // Range [0, 16 MiB]; default 4 KiB. RINGLAB_SHM_ONESHOT_BYTES.
  size_t oneshot_bytes = kDefaultOneShotBytes;
  // The ring's chunk, rounded up to 4 KiB pages. Range [4 KiB, 64 MiB];
  // unset: 128 KiB, smaller from 17 ranks up so that a rank's mailbox stays
  // within 8 MiB. RINGLAB_SHM_CHUNK_BYTES.
  std::optional<size_t> chunk_bytes;
  // The staged allreduce's area per rank (larger buffers go through it in
  // pieces of about this size), rounded up to pages. Range [64 KiB, 256 MiB];
  // default 1 MiB. RINGLAB_SHM_STAGE_BYTES.
  size_t stage_bytes = kDefaultStageBytes;
  // Buffers from this many bytes up take the ring, smaller ones the staged
  // path. Range [0, 2^40]; unset: chosen at creation (the ring with a core
  // per rank, staged when ranks share cores). RINGLAB_SHM_RING_BYTES.
  std::optional<size_t> ring_bytes;
  // How the mailboxes are written. Default kMeasured;
  // RINGLAB_SHM_STREAM_STORES=0 (cached) or 1 (streaming).
  Stores stores = Stores::kMeasured;
  // Prints on stderr what the ranks chose at creation (oversubscribed or
  // not, cached or streaming stores). Default false; RINGLAB_SHM_DEBUG=1.
  bool debug = false;
};

// ipc_ring and ipc_ring_threads (comm/ipc_ring/ipc_ring.h). Defaults not yet
// measured on a GPU: bench/allreduce_threads_bench (or allreduce_bench with
// ipc_ring) with oneshot_bytes 0 (ring only) against a large value (one-shot
// only) gives the crossover that should replace this guess.
struct IpcRingTuning {
  static constexpr size_t kDefaultOneShotBytes = 256 << 10;
  static constexpr size_t kDefaultChunkBytes = 1 << 20;
  static constexpr size_t kDefaultBufferBytes = 64 << 20;

  // Buffers up to this many bytes (and within the registered buffer) take
  // the one-shot kernel. Range [0, 2^40]; default 256 KiB.
  // RINGLAB_IPC_RING_ONESHOT_BYTES.
  size_t oneshot_bytes = kDefaultOneShotBytes;
  // About this many bytes per chunk of a ring segment (at most 64 chunks).
  // Range [4 KiB, 64 MiB]; default 1 MiB. RINGLAB_IPC_RING_CHUNK_BYTES.
  size_t chunk_bytes = kDefaultChunkBytes;
  // Each rank's registered device buffer; larger buffers go through it in
  // pieces. Range [64 KiB, 16 GiB]; default 64 MiB.
  // RINGLAB_IPC_RING_BUFFER_BYTES.
  size_t buffer_bytes = kDefaultBufferBytes;
};

// mpi (comm/adapters/mpi.h).
struct MpiTuning {
  // Whether every collective first checks that all ranks make the same call
  // (one extra small MPI_Allreduce). false measures plain MPI_Allreduce, the
  // anchor other backends are compared with. Must be alike on every rank
  // (nothing checks it). Default true; RINGLAB_MPI_CHECK_CALLS=0 or 1.
  bool check_calls = true;
};

struct BackendTuning {
  ShmRingTuning shm_ring;
  IpcRingTuning ipc_ring;
  MpiTuning mpi;
};

// One setting as the validator, the environment parser and the tests see
// it: its name, the variable binaries read it from, its range, and how to
// read and write it as a number (get: nullopt when unset; enums and bools
// as their numbers, Stores as 0 cached, 1 streaming).
struct TuningSetting {
  const char* name;      // "shm_ring.chunk_bytes"
  const char* variable;  // "RINGLAB_SHM_CHUNK_BYTES"
  uint64_t min;
  uint64_t max;
  std::optional<uint64_t> (*get)(const BackendTuning& tuning);
  void (*set)(BackendTuning& tuning, uint64_t value);
};

// Every setting of BackendTuning.
const std::vector<TuningSetting>& TuningSettings();

// The one rule: every setting that is set lies in its range. Throws
// std::invalid_argument naming the first one that does not, its value, its
// range and its variable, e.g. "shm_ring.chunk_bytes = 12 is outside
// [4096, 67108864] (RINGLAB_SHM_CHUNK_BYTES)".
void ValidateTuning(const BackendTuning& tuning);
// The same rule for one value of one setting (what ValidateTuning applies to
// each), for parsers that must check a number before it is stored (a bool
// would keep 5 as true).
void ValidateTuningValue(const TuningSetting& setting, uint64_t value);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_TUNING_H_
