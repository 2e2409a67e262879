// shm_ring's insides, shared by the files that implement it (not a public
// header: see shm_ring.h). The segment every rank maps holds one page of
// global header, a header per rank (its abort flag and message, the call it
// is in, the one-shot flags and two inline boxes), the ring's mailboxes
// (slots of one chunk from each rank to its right neighbour) and the
// one-shot banks (two per rank, used by alternate calls). The files:
//   segment.cc          how ranks come to share a segment (also regions')
//   join.cc             the ring's segment: tuning, layout, wait policy
//   mailbox.cc          calls, waits with deadlines, mailboxes, small banks
//   oneshot.cc          the inline, one-shot and registered allreduces
//   ring_allreduce.cc   the ring: reduce-scatter, then all-gather
//   staged_allreduce.cc through per-rank staging areas, piece by piece
//   broadcast.cc        broadcast and barrier
//   allgather.cc        allgather: one-shot, staged and ring
//   shm_ring.cc         choosing the algorithm, registration, the backend's
//                       description
#ifndef RINGLAB_COMM_SHM_RING_INTERNAL_H_
#define RINGLAB_COMM_SHM_RING_INTERNAL_H_

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/call_agreement.h"
#include "comm/dtype/kernels.h"
#include "comm/shm_ring/kernels.h"
#include "comm/shm_ring/regions.h"
#include "comm/shm_ring/segment.h"
#include "comm/shm_ring/tuning.h"

namespace ringlab::comm::shm {

using Clock = std::chrono::steady_clock;

static_assert(sizeof(std::atomic<uint32_t>) == 4 &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain 32-bit integers");

// Registered buffers of up to this many bytes take the inline and one-shot
// paths, which are faster there.
constexpr size_t kRegisteredMinBytes = 1024;

// ShmRingTuning::ring_bytes unset: the join chooses
// (ShmRing::ChooseWaitPolicy).
constexpr size_t kRingBytesChosenAtJoin = size_t{1} << 41;

constexpr size_t kPage = 4096;

inline size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// What the reduction kernels divide by (comm/dtype/kernels.h): the world
// size for an average, 0 (nothing) for a sum.
inline float AvgDivisor(ReduceOp op, int world) {
  return op == ReduceOp::kAvg ? static_cast<float>(world) : 0.0f;
}

// Set in a call's description when its buffer is registered memory, so that
// ranks that disagree on it fail as mismatched instead of waiting on
// different mailboxes.
constexpr uint64_t kRegisteredBit = uint64_t{1} << 16;

// What one call looks like; peers compare theirs with ours.
struct CallDesc {
  uint64_t seq = 0;
  // kind | op << 8 | element type << 12 | kRegisteredBit | root << 32
  uint64_t packed = 0;
  uint64_t count = 0;

  bool operator==(const CallDesc& o) const {
    return seq == o.seq && packed == o.packed && count == o.count;
  }
  std::string ToString() const {
    CallDescription call;
    call.seq = static_cast<int64_t>(seq);
    call.kind = static_cast<CallKind>(packed & 0xff);
    call.count = count;
    call.op = static_cast<ReduceOp>((packed >> 8) & 0xf);
    call.type = static_cast<DataType>((packed >> 12) & 0xf);
    call.root = static_cast<int32_t>(packed >> 32);
    std::string s = call.ToString();
    if (packed & kRegisteredBit) s.insert(s.size() - 1, ", registered");
    return s;
  }
};

// Rank 0's tuning, which every rank takes from here.
struct GlobalHeader {
  SegmentHeader segment;
  uint64_t chunk_bytes;
  uint64_t slots;
  uint64_t small_bytes;
  uint64_t oneshot_bytes;
  uint64_t stream_stores;
  uint64_t stage_bytes;
  uint64_t ring_bytes;
};

inline constexpr size_t kInlineFloats = 10;
inline constexpr size_t kInlineBytes = kInlineFloats * sizeof(float);

struct alignas(64) InlineBox {
  // The call whose data is in here: low 32 bits in seq (the futex word),
  // high 32 bits in seq_hi, written before seq, so that a box last written
  // 2^32 calls ago is never taken for this call's.
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleepers;
  uint32_t seq_hi;
  // The low 16 bits of CallDesc::packed | count << 16 (count * element size
  // <= kInlineBytes).
  uint32_t desc;
  uint64_t unused;
  float data[kInlineFloats];
};
static_assert(sizeof(InlineBox) == 64, "one cache line");

struct alignas(64) RankHeader {
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
  // Barriers inside one call (the staged allreduce's phases): how many this
  // rank has reached.
  alignas(64) std::atomic<uint32_t> phase;
  std::atomic<uint32_t> phase_sleepers;
  std::atomic<uint64_t> phase64;
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

// The ring's wavefront order, for the allreduce and the allgather alike:
// message (s, k), step s of chunk k, travels in wavefront s + k, and within
// a wavefront in increasing s, on sender and receiver alike. A rank that is
// sending wavefront t+1 has finished wavefront t-1, so mailboxes that hold
// two wavefronts never deadlock. first(k) posts chunk k of step 0 (this
// rank's own data); next(s, k) takes step s's chunk k in (and passes it on
// unless s is the last step).
template <typename First, typename Next>
void Wavefront(size_t chunks, int steps, First first, Next next) {
  first(size_t{0});
  for (size_t t = 0; t + 1 < chunks + static_cast<size_t>(steps); ++t) {
    if (t + 1 < chunks) first(t + 1);
    for (int s = 0; s < steps; ++s) {
      if (static_cast<size_t>(s) > t || t - s >= chunks) continue;
      next(s, t - s);
    }
  }
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t value,
               std::chrono::microseconds timeout);
// Wakes the word's sleepers, if any (a syscall only when one sleeps).
void FutexWakeIfSleeping(std::atomic<uint32_t>* word,
                         std::atomic<uint32_t>* sleepers);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class ShmRing final : public Backend {
 public:
  // Joins the ranks (join.cc); throws CommError naming what went wrong.
  ShmRing(const RankContext& context, const CommOptions& options);
  ~ShmRing() override;

  void AllReduce(void* data, size_t count, DataType type, ReduceOp op) override;
  void Broadcast(void* data, size_t count, DataType type, int root) override;
  void Barrier() override;
  void AllGather(const void* send, void* recv, size_t count,
                 DataType type) override;
  void* AllocateRegistered(size_t bytes) override;

 private:
  // Everything about the call in progress, for waits and error messages.
  struct Call {
    CallDesc desc;
    CallKind kind;
    Clock::time_point deadline;
    const char* phase = "";
    int step = -1;
  };

  // Tuning from options (rank 0's is the one used: the join copies it into
  // the segment's header, where the others read it).
  void ReadTuning(const BackendTuning& tuning);
  // The segment's layout from the tuning; returns its size.
  size_t Layout();
  // Rank 0 creates the segment, the others open it; every rank is in it when
  // this returns.
  void JoinSegment(SegmentJoin& join);
  void WriteHeader(char* base) const;
  void ReadHeader(const char* base, size_t bytes);
  // How many CPUs the ranks may use together (rank 0, once all are in).
  int CpusOfAllRanks(Store& store) const;
  // After a failure while joining: marks this rank aborted in the segment,
  // so that peers already in it fail fast, and lets go of it.
  void Abandon(const std::string& message);
  // How waits spin and whether mailbox stores bypass the cache, once the
  // ranks are in.
  void ChooseWaitPolicy();
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
  // Rank r's staging area, world_ slots of StageSlotFloats() each.
  float* Stage(int r, int slot) const {
    return reinterpret_cast<float*>(base_ + stage_offset_ +
                                    static_cast<size_t>(r) * stage_) +
           static_cast<size_t>(slot) * StageSlotFloats();
  }
  size_t StageSlotFloats() const {
    return stage_ / sizeof(float) / world_ / 16 * 16;
  }

  Call Begin(CallKind kind, size_t count, ReduceOp op, int root,
             bool registered = false, DataType type = DataType::kFloat32);
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

  // The allreduce's paths, on count elements of the kernels' type at data.
  using Kernels = dtype::ElementKernels;
  void OneShotAllReduce(Call& call, char* data, size_t count, ReduceOp op,
                        const Kernels& k);
  void InlineAllReduce(Call& call, char* data, size_t count, ReduceOp op,
                       const Kernels& k);
  void RingAllReduce(Call& call, char* data, size_t count, ReduceOp op,
                     const Kernels& k);
  void BankFree(Call& call);
  // The one-shot exchange through the small banks: every rank posts its call
  // (and `bytes` of data, when given) and checks every peer's, so ranks that
  // disagree on count, op, type or root fail on every rank.
  void PostSmall(Call& call, const void* data, size_t bytes);
  void GatherSmall(Call& call);
  // Returns once every rank has reached as many phases as this one.
  void PhaseBarrier(Call& call);
  // Through the staging areas, piece by piece, two synchronisations each:
  // every rank posts its contributions to the others' segments, reduces its
  // own segment from them, posts the result and copies the others'.
  void StagedAllReduce(Call& call, char* data, size_t count, ReduceOp op,
                       const Kernels& k);
  // Zero-copy: every rank's buffer is registered memory (slots[r] is rank
  // r's address of it); each rank reduces one segment into all of them.
  void RegisteredAllReduce(Call& call, const std::vector<char*>& slots,
                           size_t count, ReduceOp op, const Kernels& k);
  // The allgather's paths (allgather.cc), on blocks of `bytes`, bytes > 0
  // but for the one-shot: through the one-shot banks; through the staging
  // areas in pieces; round the ring through the mailboxes.
  void OneShotAllGather(Call& call, const char* send, char* recv, size_t bytes);
  void StagedAllGather(Call& call, const char* send, char* recv, size_t bytes);
  void RingAllGather(Call& call, const char* send, char* recv, size_t bytes);
  // Whether a move of `bytes` may use the non-temporal stores (chosen at
  // join): whole floats only.
  bool Streams(size_t bytes) const { return stream_ && bytes % 4 == 0; }
  // Copies `bytes` into the mailbox slot `out` (and into local, when not
  // null), streaming where Streams says.
  void CopyToMailbox(float* out, void* local, const void* in,
                     size_t bytes) const;
  // The ring's gather step, shared by allreduce and allgather: a chunk that
  // arrived (in) is stored into this rank's buffer (local) and, unless this
  // is its last hop, into the mailbox towards the right (out, or null), with
  // the store kind chosen at join.
  void StoreAndForward(void* local, float* out, const void* in,
                       size_t bytes) const;

  const int rank_, world_;
  const int left_, right_;
  const std::chrono::milliseconds timeout_;
  const std::vector<PeerInfo> peers_;
  ShmRingTuning tuning_;  // this rank's (debug is each rank's own)
  char* base_ = nullptr;
  size_t map_bytes_ = 0;
  size_t chunk_ = 0;  // bytes
  uint64_t slots_ = 0;
  size_t small_ = 0;
  size_t oneshot_ = 0;
  size_t stage_ = 0;  // bytes of staging area per rank
  size_t ring_ = 0;   // larger buffers take the ring, smaller ones are staged
  size_t rank_offset_ = 0, slot_offset_ = 0, small_offset_ = 0,
         data_offset_ = 0, stage_offset_ = 0;
  uint64_t phases_ = 0;  // PhaseBarriers passed
  uint64_t calls_ = 0;
  bool stream_ = false;          // non-temporal stores into the mailbox
  uint64_t stream_mode_ = 2;     // ShmRingTuning::Stores, as the header has it
  bool oversubscribed_ = false;  // more ranks than CPUs the ranks may use
  int ncpu_ = 1;  // CPUs in the union of the ranks' affinity masks
  std::chrono::nanoseconds spin_{0};   // of a wait, spinning
  std::chrono::nanoseconds yield_{0};  // of a wait, spinning or yielding
  uint64_t sent_ = 0;                  // messages posted to the right neighbour
  uint64_t recvd_ = 0;                 // messages taken from the left neighbour
  bool broken_ = false;  // a collective failed: peers were told, in the segment
  std::unique_ptr<ShmRegions> regions_;  // registered memory (Allocate)
  std::vector<char*> peer_slots_;        // scratch for regions_->Find
  // Scratch of world_ pointers for the reductions' sources and targets, so
  // that a call allocates nothing.
  std::vector<const void*> sources_;
  std::vector<void*> targets_;
};

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
    if (!broken_) Fail(e.what());
    throw;
  }
}

template <typename Ready>
void ShmRing::Wait(Call& call, std::atomic<uint32_t>* word,
                   std::atomic<uint32_t>* sleepers, int peer, Ready ready) {
  // Spin briefly (spin_): a peer with a core of its own answers within
  // microseconds, sooner than a futex wake-up. Then yield while waiting (up
  // to yield_): sched_yield returns at once when nothing else wants this
  // core, so with a core per rank it is still a spin; when something does
  // (the peer, or another process that took a core), that gets the core
  // instead of this rank burning it for hundreds of microseconds. Then sleep
  // on the futex, checking the peer and the deadline every 5 ms.
  if (ready(word->load(std::memory_order_acquire))) return;
  const auto start = Clock::now();
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready(word->load(std::memory_order_acquire))) return;
      CpuRelax();
    }
  } while (Clock::now() - start < spin_);
  do {
    if (ready(word->load(std::memory_order_acquire))) return;
    sched_yield();
  } while (Clock::now() - start < yield_);
  auto next_check = Clock::now();
  for (;;) {
    sleepers->fetch_add(1, std::memory_order_seq_cst);
    uint32_t v = word->load(std::memory_order_seq_cst);
    if (!ready(v)) FutexWait(word, v, std::chrono::milliseconds(5));
    sleepers->fetch_sub(1, std::memory_order_seq_cst);
    if (ready(word->load(std::memory_order_acquire))) return;
    if (Clock::now() >= next_check) {
      try {
        SlowChecks(call, peer);
      } catch (const CommError&) {
        // The peer may have answered between the look above and its exit
        // (its last call done, it ended): what it wrote counts.
        if (ready(word->load(std::memory_order_acquire))) return;
        throw;
      }
      next_check = Clock::now() + std::chrono::milliseconds(5);
    }
  }
}

}  // namespace ringlab::comm::shm

#endif  // RINGLAB_COMM_SHM_RING_INTERNAL_H_
