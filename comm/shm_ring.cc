#include "comm/shm_ring.h"

#include <emmintrin.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/process.h"
#include "comm/store.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;

static_assert(sizeof(std::atomic<uint32_t>) == 4 &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain 32-bit integers");

constexpr uint64_t kMagic = 0x72696e676c616231ull;  // "ringlab1"
constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

enum class Kind : uint32_t { kAllReduce = 1, kBroadcast = 2, kBarrier = 3 };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "AllReduce";
    case Kind::kBroadcast:
      return "Broadcast";
    case Kind::kBarrier:
      return "Barrier";
  }
  return "?";
}

// What one call looks like; peers compare theirs with ours.
struct CallDesc {
  uint64_t seq = 0;
  uint64_t packed = 0;  // kind | op << 8 | root << 32
  uint64_t count = 0;

  bool operator==(const CallDesc& o) const {
    return seq == o.seq && packed == o.packed && count == o.count;
  }
  std::string ToString() const {
    Kind kind = static_cast<Kind>(packed & 0xff);
    std::string s = "call #" + std::to_string(seq) + " " + KindName(kind) +
                    "(count=" + std::to_string(count);
    if (kind == Kind::kAllReduce) {
      s += std::string(", op=") +
           ReduceOpName(static_cast<ReduceOp>((packed >> 8) & 0xff));
    }
    if (kind == Kind::kBroadcast) {
      s += ", root=" + std::to_string(static_cast<int32_t>(packed >> 32));
    }
    return s + ")";
  }
};

struct GlobalHeader {
  std::atomic<uint64_t> magic;
  uint64_t world_size;
  uint64_t chunk_bytes;
  uint64_t slots;
  uint64_t small_bytes;
  uint64_t oneshot_bytes;
  uint64_t stream_stores;
  uint64_t nonce;  // in the address rank 0 publishes: the right file
};

inline constexpr size_t kInlineFloats = 10;

struct alignas(64) InlineBox {
  // The call whose data is in here: low 32 bits in seq (the futex word),
  // high 32 bits in seq_hi, written before seq, so that a box last written
  // 2^32 calls ago is never taken for this call's.
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleepers;
  uint32_t seq_hi;
  uint32_t desc;  // kind | op << 8 | count << 16 (count <= kInlineFloats)
  uint64_t unused;
  float data[kInlineFloats];
};
static_assert(sizeof(InlineBox) == 64, "one cache line");

struct alignas(64) RankHeader {
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> aborted;
  char abort_message[240];
  // The call this rank is in, published at its start (seqlock on seq).
  alignas(64) std::atomic<uint64_t> call_seq;
  std::atomic<uint64_t> call_packed;
  std::atomic<uint64_t> call_count;
  // One-shot: the call whose data this rank has posted / finished reading.
  // One line, written only by its rank: a peer polling it pulls both.
  // The 32-bit words are only futex words (they wrap); readers decide on the
  // 64-bit copies, stored before them.
  alignas(64) std::atomic<uint32_t> posted;
  std::atomic<uint32_t> posted_sleepers;
  std::atomic<uint32_t> done;
  std::atomic<uint32_t> done_sleepers;
  std::atomic<uint64_t> posted64;
  std::atomic<uint64_t> done64;
  // Tiny messages and barriers, one per bank: flag, description and data
  // share one cache line, so a peer gets all three in one transfer.
  alignas(64) InlineBox box[2];
};

// One-shot area header, one per rank and bank.
struct alignas(64) SmallHeader {
  CallDesc desc;
};

// A mailbox slot from rank r to rank r+1. The sender owns seq, the receiver
// ack; they sit on different cache lines.
struct alignas(64) SlotHeader {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> seq_sleepers;
  CallDesc desc;
  uint64_t nbytes;
  alignas(64) std::atomic<uint32_t> ack;
  std::atomic<uint32_t> ack_sleepers;
};

void FutexWait(std::atomic<uint32_t>* word, uint32_t value,
               std::chrono::microseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000000),
              static_cast<long>(timeout.count() % 1000000) * 1000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, value, &ts,
          nullptr, 0);
}

void FutexWakeIfSleeping(std::atomic<uint32_t>* word,
                         std::atomic<uint32_t>* sleepers) {
  // seq_cst pairs with the sleeper's increment-then-load: one of the two sees
  // the other, so a wake-up is never lost.
  if (sleepers->load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
            nullptr, nullptr, 0);
  }
}

// Plain loops rather than memcpy (this file is built with
// -fno-tree-loop-distribute-patterns so they stay loops): glibc's memcpy uses
// `rep movsb` on AMD for mid-sized copies, which measured 1.3 GB/s instead of
// 20+ when source and destination differ by 16 mod 64 bytes, exactly the case
// of a malloc'd user buffer against a page-aligned mailbox.
// Each loop is built twice, for AVX2 and for any x86-64, and picked at load
// time: AVX2 measured about 1.5x on the cache-resident chunks the ring moves.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RINGLAB_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RINGLAB_SIMD_CLONES
#endif

RINGLAB_SIMD_CLONES
void CopyFloats(float* __restrict__ dst, const float* __restrict__ src,
                size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}
RINGLAB_SIMD_CLONES
void CopyFloats2(float* __restrict__ dst1, float* __restrict__ dst2,
                 const float* __restrict__ src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst1[i] = src[i];
    dst2[i] = src[i];
  }
}
RINGLAB_SIMD_CLONES
void AddFloats(float* __restrict__ out, const float* __restrict__ a,
               const float* __restrict__ b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
RINGLAB_SIMD_CLONES
void AccumulateFloats(float* __restrict__ acc, const float* __restrict__ in,
                      size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += in[i];
}
// acc = out = acc + in (the last reduce-scatter step keeps and forwards it).
RINGLAB_SIMD_CLONES
void AddFloats2(float* __restrict__ acc, float* __restrict__ out,
                const float* __restrict__ in, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = acc[i] + in[i];
    acc[i] = v;
    out[i] = v;
  }
}
RINGLAB_SIMD_CLONES
void AddDivideFloats2(float* __restrict__ acc, float* __restrict__ out,
                      const float* __restrict__ in, float d, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = (acc[i] + in[i]) / d;
    acc[i] = v;
    out[i] = v;
  }
}

// Variants that write the mailbox side (`out`, 16-byte aligned: slots are
// page-aligned) with non-temporal stores, so the lines go to memory rather
// than into this core's cache, from where the peer would have to snoop them.
// Chosen by RINGLAB_SHM_STREAM_STORES; PostSend fences before publishing.
void StreamCopy(float* __restrict__ out, const float* __restrict__ src,
                size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_stream_ps(out + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) out[i] = src[i];
}
void StreamCopy2(float* __restrict__ local, float* __restrict__ out,
                 const float* __restrict__ in, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_loadu_ps(in + i);
    _mm_storeu_ps(local + i, v);
    _mm_stream_ps(out + i, v);
  }
  for (; i < n; ++i) local[i] = out[i] = in[i];
}
void StreamAdd(float* __restrict__ out, const float* __restrict__ a,
               const float* __restrict__ b, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    _mm_stream_ps(out + i,
                  _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}
void StreamAdd2(float* __restrict__ acc, float* __restrict__ out,
                const float* __restrict__ in, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_add_ps(_mm_loadu_ps(acc + i), _mm_loadu_ps(in + i));
    _mm_storeu_ps(acc + i, v);
    _mm_stream_ps(out + i, v);
  }
  for (; i < n; ++i) acc[i] = out[i] = acc[i] + in[i];
}
void StreamAddDivide2(float* __restrict__ acc, float* __restrict__ out,
                      const float* __restrict__ in, float d, size_t n) {
  const __m128 dv = _mm_set1_ps(d);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v =
        _mm_div_ps(_mm_add_ps(_mm_loadu_ps(acc + i), _mm_loadu_ps(in + i)), dv);
    _mm_storeu_ps(acc + i, v);
    _mm_stream_ps(out + i, v);
  }
  for (; i < n; ++i) acc[i] = out[i] = (acc[i] + in[i]) / d;
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

size_t EnvBytes(const char* name, size_t fallback, size_t lo, size_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != '\0' || n < lo || n > hi) {
    throw std::invalid_argument(std::string(name) + "=" + v +
                                ": expected bytes in [" + std::to_string(lo) +
                                ", " + std::to_string(hi) + "]");
  }
  return static_cast<size_t>(n);
}

class ShmRing final : public Communicator {
 public:
  ShmRing(const RankContext& context, const CommOptions& options);
  ~ShmRing() override;

  const char* backend() const override { return "shm_ring"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  void AllReduce(float* data, size_t count, ReduceOp op) override;
  void Broadcast(float* data, size_t count, int root) override;
  void Barrier() override;
  uint64_t bytes_sent() const override { return bytes_sent_; }

 private:
  // Everything about the call in progress, for waits and error messages.
  struct Call {
    CallDesc desc;
    Kind kind;
    Clock::time_point deadline;
    const char* phase = "";
    int step = -1;
  };

  void Map(size_t bytes, int fd);
  RankHeader* Rank(int r) const {
    return reinterpret_cast<RankHeader*>(base_ + rank_offset_) + r;
  }
  SlotHeader* Slot(int r, uint64_t i) const {
    return reinterpret_cast<SlotHeader*>(base_ + slot_offset_) +
           static_cast<size_t>(r) * slots_ + i;
  }
  float* SlotData(int r, uint64_t i) const {
    return reinterpret_cast<float*>(
        base_ + data_offset_ + (static_cast<size_t>(r) * slots_ + i) * chunk_);
  }
  SmallHeader* Small(int r, int bank) const {
    return reinterpret_cast<SmallHeader*>(base_ + small_offset_ +
                                          (static_cast<size_t>(r) * 2 + bank) *
                                              (small_ + kPage));
  }
  float* SmallData(int r, int bank) const {
    return reinterpret_cast<float*>(reinterpret_cast<char*>(Small(r, bank)) +
                                    kPage);
  }

  Call Begin(Kind kind, size_t count, ReduceOp op, int root);
  // Runs fn, turning any failure into a CommError that also marks this rank
  // aborted in the segment, so that peers waiting on it fail fast.
  template <typename Fn>
  void Guarded(Call& call, Fn fn);
  [[noreturn]] void Fail(const std::string& message);

  // Waits until ready(word) holds; peer is the rank expected to change it.
  template <typename Ready>
  void Wait(Call& call, std::atomic<uint32_t>* word,
            std::atomic<uint32_t>* sleepers, int peer, Ready ready);
  void SlowChecks(Call& call, int peer);
  void CheckDesc(const Call& call, const CallDesc& theirs, int peer) const;

  // Ring mailbox from this rank to the right neighbour.
  float* AcquireSend(Call& call);
  void PostSend(Call& call, size_t nbytes);
  const float* AcquireRecv(Call& call, size_t expect_bytes);
  void ReleaseRecv();

  void OneShotAllReduce(Call& call, float* data, size_t count, ReduceOp op);
  void InlineAllReduce(Call& call, float* data, size_t count, ReduceOp op);
  void RingAllReduce(Call& call, float* data, size_t count, ReduceOp op);
  void BankFree(Call& call);
  // The one-shot exchange through the small banks: every rank posts its call
  // (and data, when given) and checks every peer's, so ranks that disagree
  // on count, op or root fail on every rank.
  void PostSmall(Call& call, const float* data, size_t count);
  void GatherSmall(Call& call);

  int rank_, world_;
  int left_, right_;
  CommOptions options_;
  char* base_ = nullptr;
  size_t map_bytes_ = 0;
  size_t chunk_ = 0;  // bytes
  uint64_t slots_ = 0;
  size_t small_ = 0;
  size_t oneshot_ = 0;
  size_t rank_offset_ = 0, slot_offset_ = 0, small_offset_ = 0,
         data_offset_ = 0;
  uint64_t calls_ = 0;
  bool stream_ = false;  // non-temporal stores into the mailbox
  uint64_t stream_mode_ = 2;
  bool oversubscribed_ = false;  // more ranks than CPUs the ranks may use
  int ncpu_ = 1;  // CPUs in the union of the ranks' affinity masks
  std::chrono::nanoseconds spin_{0};
  uint64_t sent_ = 0;   // messages posted to the right neighbour
  uint64_t recvd_ = 0;  // messages taken from the left neighbour
  uint64_t bytes_sent_ = 0;
  std::string broken_;
};

std::atomic<uint64_t> g_instances{0};

ShmRing::ShmRing(const RankContext& context, const CommOptions& options)
    : rank_(context.rank),
      world_(context.world_size),
      left_((context.rank + context.world_size - 1) % context.world_size),
      right_((context.rank + 1) % context.world_size),
      options_(options) {
  // First, before anything can throw: every rank's counter moves in step, so
  // the keys of the next communicator still match across ranks.
  const std::string prefix =
      "shm_ring/" + std::to_string(g_instances.fetch_add(1)) + "/";
  if (context.store == nullptr) {
    throw std::invalid_argument(
        "shm_ring needs a rendezvous store (set MASTER_ADDR and MASTER_PORT)");
  }
  Store& store = *context.store;
  const auto timeout = options.join_timeout;
  const auto deadline = Clock::now() + timeout;
  int fd = -1;
  bool published = false;  // rank 0: the segment's address is in the store
  bool reported = false;   // a failure of ours is in the store
  // Peers learn about a failure from the store at once instead of at their
  // deadline: "error" holds the message, "state" goes negative.
  auto report = [&](const std::string& message) {
    if (reported) return;
    reported = true;
    try {
      if (rank_ == 0 && !published)
        store.Set(prefix + "name", "error:" + message);
      store.Set(prefix + "error",
                "rank " + std::to_string(rank_) + ": " + message);
      store.Add(prefix + "state", -(int64_t{1} << 40));
    } catch (...) {
      // The store itself failed: peers will time out; nothing better to do.
    }
  };
  // The ranks that have not mapped the segment yet, for timeout messages
  // (a rank stores its pid in its header once it has).
  auto unmapped = [&]() -> std::string {
    std::string ranks;
    for (int p = 0; p < world_; ++p) {
      if (Rank(p)->pid.load(std::memory_order_acquire) != 0) continue;
      ranks += (ranks.empty() ? "rank " : ", rank ") + std::to_string(p);
    }
    return ranks.empty() ? "" : "; not mapped by " + ranks;
  };
  auto fail_message = [&]() -> std::string {
    try {
      return store.Get(prefix + "error", std::chrono::seconds(5));
    } catch (const std::exception& e) {
      return std::string("(no message: ") + e.what() + ")";
    }
  };
  try {
    // Every rank validates the tuning variables, so that a bad value fails
    // on every rank alike; rank 0's values are the ones used.
    oneshot_ = EnvBytes("RINGLAB_SHM_ONESHOT_BYTES",
                        kShmRingDefaultOneShotBytes, 0, 16 << 20);
    const bool chunk_set = std::getenv("RINGLAB_SHM_CHUNK_BYTES") != nullptr &&
                           *std::getenv("RINGLAB_SHM_CHUNK_BYTES") != '\0';
    chunk_ = RoundUp(EnvBytes("RINGLAB_SHM_CHUNK_BYTES",
                              kShmRingDefaultChunkBytes, 4096, 64 << 20),
                     kPage);
    small_ = RoundUp(std::max<size_t>(oneshot_, kPage), kPage);
    // 0: cached stores, 1: streaming stores, 2 (unset): measure.
    stream_mode_ = EnvBytes("RINGLAB_SHM_STREAM_STORES", 2, 0, 1);
    // The wavefront schedule in RingAllReduce never deadlocks when a mailbox
    // holds two wavefronts of 2(N-1) messages each.
    slots_ = std::max<uint64_t>(4, 4 * static_cast<uint64_t>(world_));
    // So that the segment grows as N rather than N^2: with the default chunk
    // a rank's mailbox is at most 8 MiB (from 17 ranks up, smaller chunks).
    if (!chunk_set) {
      constexpr size_t kMaxMailboxBytes = 8 << 20;
      chunk_ = std::max(
          kPage, std::min(chunk_, kMaxMailboxBytes / slots_ / kPage * kPage));
    }
    // Rank 0 decides the layout; the others read it from the segment.
    auto layout = [&] {
      rank_offset_ = kPage;
      slot_offset_ = rank_offset_ + RoundUp(sizeof(RankHeader) * world_, kPage);
      small_offset_ =
          slot_offset_ + RoundUp(sizeof(SlotHeader) * world_ * slots_, kPage);
      data_offset_ = small_offset_ + world_ * 2 * (small_ + kPage);
      return data_offset_ + world_ * slots_ * chunk_;
    };
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) CPU_SET(0, &cpus);
    auto cpus_hex = [](const cpu_set_t& set) {
      std::string hex;
      const auto* b = reinterpret_cast<const unsigned char*>(&set);
      for (size_t i = 0; i < sizeof(set); ++i) {
        char h[3];
        std::snprintf(h, sizeof(h), "%02x", b[i]);
        hex += h;
      }
      return hex;
    };
    store.Set(prefix + "cpus/" + std::to_string(rank_), cpus_hex(cpus));
    if (rank_ == 0) {
      // An anonymous file: nothing is ever named in /dev/shm, so nothing can
      // be left there, however any rank exits. Peers open it through
      // /proc/<pid>/fd/<fd> while this rank holds it open (same user, same
      // machine and PID namespace, which shm_ring needs anyway).
      const size_t bytes = layout();
      fd = memfd_create("ringlab-shm_ring", MFD_CLOEXEC);
      if (fd < 0) {
        throw CommError(std::string("shm_ring: memfd_create failed: ") +
                        std::strerror(errno));
      }
      // Owner only (memfds start 0777): reaching /proc/<pid>/fd already needs
      // this user's rights, and the file says so too.
      if (fchmod(fd, 0600) != 0) {
        throw CommError(std::string("shm_ring: fchmod(0600) failed: ") +
                        std::strerror(errno));
      }
      // ftruncate reserves nothing: on a full tmpfs the first touch of a
      // page would be a SIGBUS. Reserve it all now and fail cleanly.
      int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (err != 0) {
        throw CommError("shm_ring: cannot reserve " +
                        std::to_string(bytes >> 20) +
                        " MiB of shared memory for " + std::to_string(world_) +
                        " ranks: " + std::strerror(err) +
                        (err == ENOSPC || err == ENOMEM
                             ? " (too little free memory; a smaller "
                               "RINGLAB_SHM_CHUNK_BYTES shrinks the segment)"
                             : ""));
      }
      Map(bytes, fd);
      uint64_t nonce = 0;
      if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) {
        nonce = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
      }
      auto* g = reinterpret_cast<GlobalHeader*>(base_);
      g->world_size = static_cast<uint64_t>(world_);
      g->chunk_bytes = chunk_;
      g->slots = slots_;
      g->small_bytes = small_;
      g->oneshot_bytes = oneshot_;
      g->stream_stores = stream_mode_;
      g->nonce = nonce;
      g->magic.store(kMagic, std::memory_order_release);
      Rank(rank_)->pid.store(getpid(), std::memory_order_release);
      store.Set(prefix + "name", "memfd:" + std::to_string(getpid()) + ":" +
                                     std::to_string(fd) + ":" +
                                     std::to_string(nonce));
      published = true;
      // Wait until every peer has mapped the segment (or one failed): only
      // then may the descriptor they open go.
      auto pause = std::chrono::microseconds(100);
      for (;;) {
        if (store.Add(prefix + "state", 0) < 0) {
          throw CommError("shm_ring: a rank failed to join: " + fail_message());
        }
        int64_t mapped = store.Add(prefix + "mapped", 0);
        if (mapped >= world_ - 1) break;
        if (Clock::now() > deadline) {
          throw CommError(
              "shm_ring: timed out after " +
              std::to_string(std::chrono::duration<double>(timeout).count()) +
              " s: only " + std::to_string(mapped) + " of " +
              std::to_string(world_ - 1) + " peers mapped the segment" +
              unmapped());
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(5000));
      }
      close(fd);
      fd = -1;
      // Oversubscribed when the ranks together may use fewer CPUs than there
      // are ranks (the union of their masks: each rank pinned to its own CPU
      // is not oversubscribed, all pinned to one CPU is).
      cpu_set_t all;
      CPU_ZERO(&all);
      for (int p = 0; p < world_; ++p) {
        std::string hex = store.Get(prefix + "cpus/" + std::to_string(p),
                                    std::chrono::seconds(5));
        auto* b = reinterpret_cast<unsigned char*>(&all);
        for (size_t i = 0; i < sizeof(all) && 2 * i + 1 < hex.size(); ++i) {
          b[i] |= static_cast<unsigned char>(
              std::stoul(hex.substr(2 * i, 2), nullptr, 16));
        }
      }
      ncpu_ = std::max(1, CPU_COUNT(&all));
      store.Add(prefix + "state", ncpu_);
    } else {
      std::string where;
      try {
        where = store.Get(prefix + "name", timeout);
      } catch (const CommError& e) {
        throw CommError(
            "shm_ring: rank 0 did not publish its segment within " +
            std::to_string(std::chrono::duration<double>(timeout).count()) +
            " s (it died or never started): " + e.what());
      }
      if (where.rfind("error:", 0) == 0) {
        reported = true;  // it is rank 0's failure, already in the store
        throw CommError("shm_ring: rank 0 failed to create the segment: " +
                        where.substr(6));
      }
      long long pid0 = 0, fd0 = 0;
      unsigned long long nonce = 0;
      if (std::sscanf(where.c_str(), "memfd:%lld:%lld:%llu", &pid0, &fd0,
                      &nonce) != 3) {
        throw CommError("shm_ring: bad segment address '" + where + "'");
      }
      const std::string path =
          "/proc/" + std::to_string(pid0) + "/fd/" + std::to_string(fd0);
      fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0 && store.Add(prefix + "state", 0) < 0) {
        // Rank 0 let the file go because some rank failed: name that one.
        reported = true;
        throw CommError("shm_ring: a rank failed to join: " + fail_message());
      }
      if (fd < 0) {
        throw CommError("shm_ring: rank " + std::to_string(rank_) +
                        " cannot open rank 0's segment at " + path + ": " +
                        std::strerror(errno) +
                        " (rank 0 gone, or not the same user, machine and PID "
                        "namespace)");
      }
      struct stat st;
      if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kPage)) {
        throw CommError("shm_ring: segment at " + path + " too small");
      }
      Map(static_cast<size_t>(st.st_size), fd);
      close(fd);
      fd = -1;
      auto* g = reinterpret_cast<GlobalHeader*>(base_);
      if (g->magic.load(std::memory_order_acquire) != kMagic ||
          g->nonce != nonce) {
        throw CommError("shm_ring: " + path + " is not rank 0's segment");
      }
      if (g->world_size != static_cast<uint64_t>(world_)) {
        throw CommError("shm_ring: rank " + std::to_string(rank_) +
                        " has world_size " + std::to_string(world_) +
                        " but rank 0 has " + std::to_string(g->world_size));
      }
      chunk_ = g->chunk_bytes;
      slots_ = g->slots;
      small_ = g->small_bytes;
      oneshot_ = g->oneshot_bytes;
      stream_mode_ = g->stream_stores;
      if (layout() != map_bytes_) {
        throw CommError("shm_ring: segment at " + path + " has the wrong size");
      }
      Rank(rank_)->pid.store(getpid(), std::memory_order_release);
      store.Add(prefix + "mapped", 1);
      // Rank 0 says when everyone is in; polled, so that its death or a
      // peer's failure ends the wait at once.
      auto pause = std::chrono::microseconds(100);
      for (;;) {
        int64_t state = store.Add(prefix + "state", 0);
        if (state < 0) {
          reported = true;
          throw CommError("shm_ring: a rank failed to join: " + fail_message());
        }
        if (state > 0) {
          ncpu_ = static_cast<int>(state);
          break;
        }
        if (ProcessExited(static_cast<pid_t>(pid0))) {
          throw CommError("shm_ring: rank 0 (pid " + std::to_string(pid0) +
                          ") died while the ranks were joining");
        }
        if (Clock::now() > deadline) {
          throw CommError(
              "shm_ring: timed out after " +
              std::to_string(std::chrono::duration<double>(timeout).count()) +
              " s waiting for the other ranks to map the segment" + unmapped());
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(5000));
      }
    }
    oversubscribed_ = world_ > ncpu_;
    spin_ = oversubscribed_ ? std::chrono::nanoseconds(2000)
                            : std::chrono::nanoseconds(200000);
    if (std::getenv("RINGLAB_SHM_DEBUG") != nullptr) {
      std::fprintf(stderr, "shm_ring: rank %d: %d ranks on %d CPUs -> %s\n",
                   rank_, world_, ncpu_,
                   oversubscribed_ ? "oversubscribed" : "not oversubscribed");
    }
    stream_ = stream_mode_ == 1;
    if (stream_mode_ == 2 && world_ > 1) {
      // Whether the mailbox should bypass this core's cache depends on how
      // far apart the ranks' cores are. Measured on a 2-vCPU VM whose vCPUs
      // the host moves about: where a barrier takes ~0.2 us (cores sharing a
      // cache), cached stores were 2-2.7x faster from 16 KiB up; where it
      // takes ~0.58 us, streaming stores were 2x faster, since the peer then
      // reads from memory instead of snooping a distant cache. The median of
      // a few barriers decides, averaged over ranks so that all decide alike.
      std::vector<double> t(65);
      for (double& x : t) {
        auto t0 = Clock::now();
        Barrier();
        x = std::chrono::duration<double>(Clock::now() - t0).count();
      }
      std::nth_element(t.begin(), t.begin() + 32, t.end());
      float median = static_cast<float>(t[32]);
      AllReduce(&median, 1, ReduceOp::kAvg);
      stream_ = median > 0.4e-6f;
      if (rank_ == 0 && std::getenv("RINGLAB_SHM_DEBUG") != nullptr) {
        std::fprintf(stderr, "shm_ring: barrier median %.3f us -> %s stores\n",
                     median * 1e6, stream_ ? "streaming" : "cached");
      }
    }
  } catch (const std::exception& e) {
    report(e.what());
    if (fd >= 0) close(fd);
    if (base_ != nullptr) {
      // Peers that mapped already learn of it in their first wait.
      RankHeader* me = Rank(rank_);
      if (me->aborted.load() == 0) {
        std::snprintf(me->abort_message, sizeof(me->abort_message), "%s",
                      e.what());
        me->aborted.store(1, std::memory_order_release);
      }
      munmap(base_, map_bytes_);
    }
    base_ = nullptr;
    throw;
  }
}

ShmRing::~ShmRing() {
  if (base_ != nullptr) munmap(base_, map_bytes_);
}

void ShmRing::Map(size_t bytes, int fd) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    throw CommError(std::string("shm_ring: mmap failed: ") +
                    std::strerror(errno));
  }
  base_ = static_cast<char*>(p);
  map_bytes_ = bytes;
}

ShmRing::Call ShmRing::Begin(Kind kind, size_t count, ReduceOp op, int root) {
  if (!broken_.empty()) {
    throw CommError("shm_ring: unusable after an earlier error: " + broken_);
  }
  Call call;
  call.kind = kind;
  call.desc.seq = ++calls_;
  call.desc.packed = static_cast<uint64_t>(kind) |
                     (static_cast<uint64_t>(op) << 8) |
                     (static_cast<uint64_t>(static_cast<uint32_t>(root)) << 32);
  call.desc.count = count;
  call.deadline = Clock::now() + options_.timeout;
  RankHeader* me = Rank(rank_);
  me->call_seq.store(0, std::memory_order_relaxed);
  // Seqlock: the 0 must be visible before the new description is.
  std::atomic_thread_fence(std::memory_order_release);
  me->call_packed.store(call.desc.packed, std::memory_order_relaxed);
  me->call_count.store(call.desc.count, std::memory_order_relaxed);
  me->call_seq.store(call.desc.seq, std::memory_order_release);
  return call;
}

void ShmRing::Fail(const std::string& message) {
  broken_ = message;
  RankHeader* me = Rank(rank_);
  if (me->aborted.load() == 0) {
    std::snprintf(me->abort_message, sizeof(me->abort_message), "%s",
                  message.c_str());
    me->aborted.store(1, std::memory_order_release);
  }
  throw CommError(message);
}

template <typename Fn>
void ShmRing::Guarded(Call& call, Fn fn) {
  try {
    fn();
    // Every collective ends by saying so: the one-shot banks are reused two
    // calls later only once every peer has finished with them.
    RankHeader* me = Rank(rank_);
    me->done64.store(call.desc.seq, std::memory_order_release);
    me->done.store(static_cast<uint32_t>(call.desc.seq),
                   std::memory_order_seq_cst);
    FutexWakeIfSleeping(&me->done, &me->done_sleepers);
  } catch (const CommError& e) {
    if (broken_.empty()) Fail(e.what());
    throw;
  }
}

void ShmRing::CheckDesc(const Call& call, const CallDesc& theirs,
                        int peer) const {
  if (theirs == call.desc) return;
  throw CommError("shm_ring: mismatched collectives: rank " +
                  std::to_string(rank_) + " is in " + call.desc.ToString() +
                  " but rank " + std::to_string(peer) + " is in " +
                  theirs.ToString());
}

void ShmRing::SlowChecks(Call& call, int peer) {
  std::string where =
      std::string(KindName(call.kind)) +
      (call.step >= 0 ? std::string(" (") + call.phase + " step " +
                            std::to_string(call.step) + ")"
                      : std::string(" (") + call.phase + ")");
  for (int p = 0; p < world_; ++p) {
    RankHeader* h = Rank(p);
    if (p != rank_ && h->aborted.load(std::memory_order_acquire) != 0) {
      char msg[sizeof(h->abort_message) + 1] = {};
      std::memcpy(msg, h->abort_message, sizeof(h->abort_message));
      throw CommError("shm_ring: rank " + std::to_string(p) + " failed in " +
                      where + ": " + msg);
    }
    // A peer in the same call with a different description: report it now
    // rather than at the deadline.
    uint64_t seq = h->call_seq.load(std::memory_order_acquire);
    if (p != rank_ && seq == call.desc.seq) {
      CallDesc theirs{seq, h->call_packed.load(std::memory_order_relaxed),
                      h->call_count.load(std::memory_order_relaxed)};
      std::atomic_thread_fence(std::memory_order_acquire);
      if (h->call_seq.load(std::memory_order_relaxed) == seq) {
        CheckDesc(call, theirs, p);
      }
    }
  }
  pid_t pid = Rank(peer)->pid.load();
  if (ProcessExited(pid)) {
    throw CommError("shm_ring: rank " + std::to_string(peer) + " (pid " +
                    std::to_string(pid) + ") died during " + where);
  }
  if (Clock::now() > call.deadline) {
    throw CommError(
        "shm_ring: timed out after " +
        std::to_string(
            std::chrono::duration<double>(options_.timeout).count()) +
        " s waiting for rank " + std::to_string(peer) + " in " + where);
  }
}

template <typename Ready>
void ShmRing::Wait(Call& call, std::atomic<uint32_t>* word,
                   std::atomic<uint32_t>* sleepers, int peer, Ready ready) {
  // Spin first: with a core per rank the peer answers within microseconds,
  // and a futex sleep and wake-up costs more than a whole 128 KiB chunk. With
  // more ranks than cores spin only briefly: the peer may need this core.
  if (ready(word->load(std::memory_order_acquire))) return;
  const auto spin_until = Clock::now() + spin_;
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready(word->load(std::memory_order_acquire))) return;
      CpuRelax();
    }
  } while (Clock::now() < spin_until);
  if (oversubscribed_) {
    for (int i = 0; i < 16; ++i) {
      if (ready(word->load(std::memory_order_acquire))) return;
      sched_yield();
    }
  }
  auto next_check = Clock::now();
  for (;;) {
    sleepers->fetch_add(1, std::memory_order_seq_cst);
    uint32_t v = word->load(std::memory_order_seq_cst);
    if (!ready(v)) FutexWait(word, v, std::chrono::milliseconds(5));
    sleepers->fetch_sub(1, std::memory_order_seq_cst);
    if (ready(word->load(std::memory_order_acquire))) return;
    if (Clock::now() >= next_check) {
      SlowChecks(call, peer);
      next_check = Clock::now() + std::chrono::milliseconds(5);
    }
  }
}

float* ShmRing::AcquireSend(Call& call) {
  uint64_t id = sent_ + 1;  // ids start at 1; slot (id-1) % slots
  SlotHeader* s = Slot(rank_, (id - 1) % slots_);
  if (id > slots_) {
    uint32_t want = static_cast<uint32_t>(id - slots_);
    Wait(call, &s->ack, &s->ack_sleepers, right_,
         [want](uint32_t v) { return v == want; });
  }
  return SlotData(rank_, (id - 1) % slots_);
}

void ShmRing::PostSend(Call& call, size_t nbytes) {
  uint64_t id = ++sent_;
  SlotHeader* s = Slot(rank_, (id - 1) % slots_);
  if (stream_) _mm_sfence();  // the data's streaming stores come first
  s->desc = call.desc;
  s->nbytes = nbytes;
  s->seq.store(static_cast<uint32_t>(id), std::memory_order_seq_cst);
  FutexWakeIfSleeping(&s->seq, &s->seq_sleepers);
}

const float* ShmRing::AcquireRecv(Call& call, size_t expect_bytes) {
  uint64_t id = recvd_ + 1;
  SlotHeader* s = Slot(left_, (id - 1) % slots_);
  uint32_t want = static_cast<uint32_t>(id);
  Wait(call, &s->seq, &s->seq_sleepers, left_,
       [want](uint32_t v) { return v == want; });
  CheckDesc(call, s->desc, left_);
  if (s->nbytes != expect_bytes) {
    throw CommError("shm_ring: rank " + std::to_string(left_) + " sent " +
                    std::to_string(s->nbytes) + " bytes where rank " +
                    std::to_string(rank_) + " expected " +
                    std::to_string(expect_bytes));
  }
  return SlotData(left_, (id - 1) % slots_);
}

void ShmRing::ReleaseRecv() {
  uint64_t id = ++recvd_;
  SlotHeader* s = Slot(left_, (id - 1) % slots_);
  s->ack.store(static_cast<uint32_t>(id), std::memory_order_seq_cst);
  FutexWakeIfSleeping(&s->ack, &s->ack_sleepers);
}

void ShmRing::BankFree(Call& call) {
  // Bank b was last written in call seq-2: every peer must have read it.
  if (call.desc.seq <= 2) return;
  const uint64_t want = call.desc.seq - 2;
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    RankHeader* h = Rank(p);
    Wait(call, &h->done, &h->done_sleepers, p, [h, want](uint32_t) {
      return h->done64.load(std::memory_order_acquire) >= want;
    });
  }
}

void ShmRing::PostSmall(Call& call, const float* data, size_t count) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  RankHeader* me = Rank(rank_);
  call.phase = "one-shot post";
  BankFree(call);
  if (data != nullptr && count > 0) {
    CopyFloats(SmallData(rank_, bank), data, count);
  }
  Small(rank_, bank)->desc = call.desc;
  me->posted64.store(call.desc.seq, std::memory_order_release);
  me->posted.store(static_cast<uint32_t>(call.desc.seq),
                   std::memory_order_seq_cst);
  FutexWakeIfSleeping(&me->posted, &me->posted_sleepers);
}

void ShmRing::GatherSmall(Call& call) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  call.phase = "one-shot gather";
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    RankHeader* h = Rank(p);
    const uint64_t seq64 = call.desc.seq;
    Wait(call, &h->posted, &h->posted_sleepers, p, [h, seq64](uint32_t) {
      return h->posted64.load(std::memory_order_acquire) >= seq64;
    });
    CheckDesc(call, Small(p, bank)->desc, p);
  }
}

void ShmRing::OneShotAllReduce(Call& call, float* data, size_t count,
                               ReduceOp op) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  PostSmall(call, data, count);
  GatherSmall(call);
  if (count > 0) {
    // Rank order 0, 1, ..., N-1 on every rank: identical bits everywhere.
    CopyFloats(data, SmallData(0, bank), count);
    for (int p = 1; p < world_; ++p) {
      AccumulateFloats(data, SmallData(p, bank), count);
    }
    if (op == ReduceOp::kAvg) {
      const float n = static_cast<float>(world_);
      for (size_t i = 0; i < count; ++i) data[i] /= n;
    }
  }
}

void ShmRing::InlineAllReduce(Call& call, float* data, size_t count,
                              ReduceOp op) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  const uint32_t seq = static_cast<uint32_t>(call.desc.seq);
  call.phase = "inline post";
  BankFree(call);
  InlineBox* mine = &Rank(rank_)->box[bank];
  for (size_t i = 0; i < count; ++i) mine->data[i] = data[i];
  mine->seq_hi = static_cast<uint32_t>(call.desc.seq >> 32);
  mine->desc = static_cast<uint32_t>((call.desc.packed & 0xffff) |
                                     (call.desc.count << 16));
  mine->seq.store(seq, std::memory_order_seq_cst);
  FutexWakeIfSleeping(&mine->seq, &mine->sleepers);
  call.phase = "inline gather";
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    InlineBox* box = &Rank(p)->box[bank];
    // Exact: a peer cannot write this bank again before this rank is done
    // with the call (BankFree), so the box holds this call or an older one.
    const uint32_t seq_hi = static_cast<uint32_t>(call.desc.seq >> 32);
    Wait(call, &box->seq, &box->sleepers, p, [box, seq, seq_hi](uint32_t v) {
      return v == seq && box->seq_hi == seq_hi;
    });
    CheckDesc(call,
              CallDesc{call.desc.seq, box->desc & 0xffffu,
                       static_cast<uint64_t>(box->desc >> 16)},
              p);
  }
  // Rank order on every rank, as the one-shot path.
  for (size_t i = 0; i < count; ++i) {
    float acc = Rank(0)->box[bank].data[i];
    for (int p = 1; p < world_; ++p) acc += Rank(p)->box[bank].data[i];
    data[i] = op == ReduceOp::kAvg ? acc / static_cast<float>(world_) : acc;
  }
}

void ShmRing::RingAllReduce(Call& call, float* data, size_t count,
                            ReduceOp op) {
  const size_t n = static_cast<size_t>(world_);
  const size_t seg_len = (count + n - 1) / n;
  const size_t chunk = chunk_ / sizeof(float);
  const size_t m = std::max<size_t>(1, (seg_len + chunk - 1) / chunk);
  const int steps = 2 * (world_ - 1);
  const float n_ranks = static_cast<float>(world_);
  // Element range of chunk k of segment j.
  auto range = [&](int j, size_t k, size_t* a, size_t* b) {
    size_t seg_begin = std::min(static_cast<size_t>(j) * seg_len, count);
    size_t seg_end = std::min(seg_begin + seg_len, count);
    *a = std::min(seg_begin + k * chunk, seg_end);
    *b = std::min(*a + chunk, seg_end);
  };
  auto mod = [&](int x) { return ((x % world_) + world_) % world_; };
  // Segment this rank sends / receives in step s (reduce-scatter for
  // s < N-1, all-gather after).
  auto send_seg = [&](int s) {
    return s < world_ - 1 ? mod(rank_ - s) : mod(rank_ + 1 - (s - world_ + 1));
  };
  auto recv_seg = [&](int s) {
    return s < world_ - 1 ? mod(rank_ - s - 1) : mod(rank_ - (s - world_ + 1));
  };
  auto send_raw = [&](size_t k) {
    call.phase = "reduce-scatter";
    call.step = 0;
    size_t a, b;
    range(send_seg(0), k, &a, &b);
    float* out = AcquireSend(call);
    if (stream_) {
      StreamCopy(out, data + a, b - a);
    } else {
      CopyFloats(out, data + a, b - a);
    }
    PostSend(call, (b - a) * sizeof(float));
  };
  // Wavefront order: message (s, k) travels in wavefront s + k, and within a
  // wavefront in increasing s. Sender and receiver follow the same order, and
  // a rank that is sending wavefront t+1 has finished reducing wavefront t-1,
  // so mailboxes of two wavefronts never deadlock.
  send_raw(0);
  for (size_t t = 0; t + 1 < m + static_cast<size_t>(steps); ++t) {
    if (t + 1 < m) send_raw(t + 1);
    for (int s = 0; s < steps; ++s) {
      if (static_cast<size_t>(s) > t || t - s >= m) continue;
      const size_t k = t - s;
      call.phase = s < world_ - 1 ? "reduce-scatter" : "all-gather";
      call.step = s < world_ - 1 ? s : s - (world_ - 1);
      size_t a, b;
      range(recv_seg(s), k, &a, &b);
      const size_t len = b - a;
      float* local = data + a;
      float* out = s + 1 < steps ? AcquireSend(call) : nullptr;
      const float* in = AcquireRecv(call, len * sizeof(float));
      if (s < world_ - 2) {
        // Partial sums only travel on: this rank never needs them again.
        if (stream_) {
          StreamAdd(out, local, in, len);
        } else {
          AddFloats(out, local, in, len);
        }
      } else if (s == world_ - 2) {
        if (op == ReduceOp::kAvg) {
          if (stream_) {
            StreamAddDivide2(local, out, in, n_ranks, len);
          } else {
            AddDivideFloats2(local, out, in, n_ranks, len);
          }
        } else if (stream_) {
          StreamAdd2(local, out, in, len);
        } else {
          AddFloats2(local, out, in, len);
        }
      } else {
        if (out != nullptr && stream_) {
          StreamCopy2(local, out, in, len);
        } else if (out != nullptr) {
          CopyFloats2(local, out, in, len);
        } else {
          CopyFloats(local, in, len);
        }
      }
      ReleaseRecv();
      if (out != nullptr) PostSend(call, len * sizeof(float));
    }
  }
}

void ShmRing::AllReduce(float* data, size_t count, ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) {
    throw std::invalid_argument("shm_ring: unsupported reduce op");
  }
  if (data == nullptr && count > 0) {
    throw std::invalid_argument("shm_ring: AllReduce of null data");
  }
  Call call = Begin(Kind::kAllReduce, count, op, 0);
  if (world_ == 1) return;  // the sum (and average) of one rank is itself
  Guarded(call, [&] {
    // RINGLAB_SHM_ONESHOT_BYTES=0 sends everything but count 0 through the
    // ring (the tests use it to cover the ring with tiny counts).
    if (count == 0 ||
        (count <= kInlineFloats && count * sizeof(float) <= oneshot_)) {
      InlineAllReduce(call, data, count, op);
    } else if (count * sizeof(float) <= oneshot_) {
      OneShotAllReduce(call, data, count, op);
    } else {
      RingAllReduce(call, data, count, op);
    }
  });
  bytes_sent_ += AllReduceBusBytes(count, world_);
}

void ShmRing::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= world_) {
    throw std::invalid_argument("shm_ring: Broadcast root " +
                                std::to_string(root) + " not in [0, " +
                                std::to_string(world_) + ")");
  }
  if (data == nullptr && count > 0) {
    throw std::invalid_argument("shm_ring: Broadcast of null data");
  }
  Call call = Begin(Kind::kBroadcast, count, ReduceOp::kSum, root);
  if (world_ == 1) return;
  Guarded(call, [&] {
    // Every rank posts its call and checks every peer's first, the root
    // with its data when that fits: ranks that disagree on the root or the
    // count fail on every rank, where a chain alone would let each
    // self-declared root send and return.
    const bool small = count * sizeof(float) <= small_;
    PostSmall(call, rank_ == root && small ? data : nullptr, count);
    GatherSmall(call);
    if (small) {
      if (rank_ != root && count > 0) {
        CopyFloats(data, SmallData(root, static_cast<int>(call.desc.seq & 1)),
                   count);
      }
      return;
    }
    // A pipelined chain root -> root+1 -> ... -> root-1, chunk by chunk.
    const size_t chunk = chunk_ / sizeof(float);
    const size_t m = (count + chunk - 1) / chunk;
    const bool forward = right_ != root;
    call.phase = "chain";
    for (size_t k = 0; k < m; ++k) {
      size_t a = k * chunk, len = std::min(chunk, count - a);
      if (rank_ == root) {
        float* out = AcquireSend(call);
        if (stream_) {
          StreamCopy(out, data + a, len);
        } else {
          CopyFloats(out, data + a, len);
        }
        PostSend(call, len * sizeof(float));
        continue;
      }
      float* out = forward ? AcquireSend(call) : nullptr;
      const float* in = AcquireRecv(call, len * sizeof(float));
      if (out != nullptr) {
        if (stream_) {
          StreamCopy2(data + a, out, in, len);
        } else {
          CopyFloats2(data + a, out, in, len);
        }
      } else {
        CopyFloats(data + a, in, len);
      }
      ReleaseRecv();
      if (out != nullptr) PostSend(call, len * sizeof(float));
    }
  });
  bytes_sent_ += BroadcastBusBytes(count, world_);
}

void ShmRing::Barrier() {
  Call call = Begin(Kind::kBarrier, 0, ReduceOp::kSum, 0);
  if (world_ == 1) return;
  Guarded(call, [&] { InlineAllReduce(call, nullptr, 0, ReduceOp::kSum); });
}

const bool kRegistered = RegisterCommunicator(
    "shm_ring", [](const RankContext& context, const CommOptions& options) {
      return CreateShmRing(context, options);
    });

}  // namespace

std::unique_ptr<Communicator> CreateShmRing(const RankContext& context,
                                            const CommOptions& options) {
  RequireOneHost(context, "shm_ring");
  return std::make_unique<ShmRing>(context, options);
}

}  // namespace ringlab::comm
