// shm_ring's creation: its tuning (rank 0's, through the segment's header),
// the segment's layout, the join (segment.h: rank 0 creates, the others
// open and verify), and how waits spin and mailboxes store once the ranks
// are in.
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "comm/shm_ring/internal.h"
#include "comm/store/hex.h"
#include "comm/store/prefix_store.h"

namespace ringlab::comm::shm {

void ShmRing::ReadTuning(const BackendTuning& settings) {
  // CreateCommunicator validated the ranges; rank 0's values are the ones
  // used (the others take them from the segment's header).
  tuning_ = ShmRingTuning::From(settings);
  oneshot_ = tuning_.oneshot_bytes;
  chunk_ = RoundUp(
      tuning_.chunk_bytes.value_or(ShmRingTuning::kDefaultChunkBytes), kPage);
  small_ = RoundUp(std::max<size_t>(oneshot_, kPage), kPage);
  stream_mode_ = static_cast<uint64_t>(tuning_.stores);
  stage_ = RoundUp(tuning_.stage_bytes, kPage);
  ring_ = tuning_.ring_bytes.value_or(kRingBytesChosenAtJoin);
  // The wavefront schedule in RingAllReduce never deadlocks when a mailbox
  // holds two wavefronts of 2(N-1) messages each.
  slots_ = std::max<uint64_t>(4, 4 * static_cast<uint64_t>(world_));
  // So that the segment grows as N rather than N^2: with the default chunk a
  // rank's mailbox is at most 8 MiB (from 17 ranks up, smaller chunks).
  if (!tuning_.chunk_bytes) {
    constexpr size_t kMaxMailboxBytes = 8 << 20;
    chunk_ = std::max(
        kPage, std::min(chunk_, kMaxMailboxBytes / slots_ / kPage * kPage));
  }
}

// Rank 0 decides the layout; the others read its inputs from the segment.
size_t ShmRing::Layout() {
  rank_offset_ = kPage;
  slot_offset_ = rank_offset_ + RoundUp(sizeof(RankHeader) * world_, kPage);
  small_offset_ =
      slot_offset_ + RoundUp(sizeof(SlotHeader) * world_ * slots_, kPage);
  data_offset_ = small_offset_ + world_ * 2 * (small_ + kPage);
  stage_offset_ = data_offset_ + world_ * slots_ * chunk_;
  return stage_offset_ + world_ * stage_;
}

void ShmRing::WriteHeader(char* base) const {
  auto* g = reinterpret_cast<GlobalHeader*>(base);
  g->chunk_bytes = chunk_;
  g->slots = slots_;
  g->small_bytes = small_;
  g->oneshot_bytes = oneshot_;
  g->stream_stores = stream_mode_;
  g->stage_bytes = stage_;
  g->ring_bytes = ring_;
}

void ShmRing::ReadHeader(const char* base, size_t bytes) {
  const auto* g = reinterpret_cast<const GlobalHeader*>(base);
  chunk_ = g->chunk_bytes;
  slots_ = g->slots;
  small_ = g->small_bytes;
  oneshot_ = g->oneshot_bytes;
  stream_mode_ = g->stream_stores;
  stage_ = g->stage_bytes;
  ring_ = g->ring_bytes;
  if (Layout() != bytes) {
    throw CommError("shm_ring: rank 0's segment has the wrong size");
  }
}

// Oversubscribed when the ranks together may use fewer CPUs than there are
// ranks (the union of their masks: each rank pinned to its own CPU is not
// oversubscribed, all pinned to one CPU is).
int ShmRing::CpusOfAllRanks(Store& store) const {
  cpu_set_t all;
  CPU_ZERO(&all);
  auto* bytes = reinterpret_cast<unsigned char*>(&all);
  for (int p = 0; p < world_; ++p) {
    cpu_set_t theirs;
    if (!FromHex(store.Get("cpus/" + std::to_string(p),
                           std::chrono::milliseconds(0)),
                 &theirs, sizeof(theirs))) {
      throw CommError("shm_ring: malformed CPU mask of rank " +
                      std::to_string(p));
    }
    const auto* b = reinterpret_cast<const unsigned char*>(&theirs);
    for (size_t i = 0; i < sizeof(all); ++i) bytes[i] |= b[i];
  }
  return std::max(1, CPU_COUNT(&all));
}

void ShmRing::JoinSegment(SegmentJoin& join) {
  Mapping mapping;
  if (rank_ == 0) {
    mapping = join.Create(Layout(), [&](char* base) { WriteHeader(base); });
  } else {
    mapping = join.Open(
        [&](const char* base, size_t bytes) { ReadHeader(base, bytes); });
  }
  base_ = mapping.base;
  map_bytes_ = mapping.bytes;
}

void ShmRing::Abandon(const std::string& message) {
  if (base_ != nullptr) {
    // Peers that mapped already learn of it in their first wait.
    RankHeader* me = Rank(rank_);
    if (me->aborted.load() == 0) {
      std::snprintf(me->abort_message, sizeof(me->abort_message), "%s",
                    message.c_str());
      me->aborted.store(1, std::memory_order_release);
    }
    munmap(base_, map_bytes_);
    base_ = nullptr;
  }
}

void ShmRing::ChooseWaitPolicy() {
  oversubscribed_ = world_ > ncpu_;
  // Measured at 2 ranks with a core each, the ring beat the staged path at
  // every size from 64 KiB (8 vs 17 us at 64 KiB, 123 vs 155 us at 1 MiB);
  // at 4 ranks on 2 cores the staged path won at every size (152 vs 338 us
  // at 256 KiB, 3.4 vs 5.5 ms at 4 MiB): the ring's 2(N-1) hand-offs per
  // chunk each cost a sleep and a wake-up when ranks share cores.
  if (ring_ == kRingBytesChosenAtJoin) {
    ring_ = oversubscribed_ ? std::numeric_limits<size_t>::max() : 0;
  }
  spin_ = std::chrono::nanoseconds(2000);
  yield_ = oversubscribed_ ? std::chrono::nanoseconds(20000)
                           : std::chrono::nanoseconds(100000);
  if (tuning_.debug) {
    std::fprintf(stderr, "shm_ring: rank %d: %d ranks on %d CPUs -> %s\n",
                 rank_, world_, ncpu_,
                 oversubscribed_ ? "oversubscribed" : "not oversubscribed");
  }
  stream_ =
      stream_mode_ == static_cast<uint64_t>(ShmRingTuning::Stores::kStreaming);
  if (stream_mode_ != static_cast<uint64_t>(ShmRingTuning::Stores::kMeasured) ||
      world_ == 1) {
    return;
  }
  // Whether the mailbox should bypass this core's cache depends on how far
  // apart the ranks' cores are. Measured on a 2-vCPU VM whose vCPUs the host
  // moves about: where a barrier takes ~0.2 us (cores sharing a cache),
  // cached stores were 2-2.7x faster from 16 KiB up; where it takes ~0.58
  // us, streaming stores were 2x faster, since the peer then reads from
  // memory instead of snooping a distant cache. The median of a few barriers
  // decides, averaged over ranks so that all decide alike.
  std::vector<double> t(65);
  for (double& x : t) {
    const auto t0 = Clock::now();
    Barrier();
    x = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::nth_element(t.begin(), t.begin() + 32, t.end());
  float median = static_cast<float>(t[32]);
  AllReduce(&median, 1, DataType::kFloat32, ReduceOp::kAvg);
  stream_ = median > 0.4e-6f;
  if (rank_ == 0 && tuning_.debug) {
    std::fprintf(stderr, "shm_ring: barrier median %.3f us -> %s stores\n",
                 median * 1e6, stream_ ? "streaming" : "cached");
  }
}

ShmRing::ShmRing(const RankContext& context, const CommOptions& options)
    : rank_(context.rank),
      world_(context.world_size),
      left_((context.rank + context.world_size - 1) % context.world_size),
      right_((context.rank + 1) % context.world_size),
      timeout_(options.timeout),
      peers_(context.peers) {
  Store& store = *context.store;
  PrefixStore join_store("join", &store);
  SegmentJoin join(join_store, context, options.join_timeout, "the segment");
  try {
    ReadTuning(options.tuning);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) CPU_SET(0, &cpus);
    join_store.Set("cpus/" + std::to_string(rank_), ToHex(&cpus, sizeof(cpus)));
    JoinSegment(join);
    ncpu_ = std::stoi(join.Finish([&] {
      join.WaitForRanks("cpus", "every rank's CPUs");
      return std::to_string(CpusOfAllRanks(join_store));
    }));
    // Registered memory (Allocate) joins like the segment, through the same
    // store and peers.
    regions_ =
        std::make_unique<ShmRegions>(&store, context, options.join_timeout);
    ChooseWaitPolicy();
  } catch (const std::exception& e) {
    join.Report(e.what());
    Abandon(e.what());
    if (dynamic_cast<const CommError*>(&e) != nullptr) throw;
    throw CommError(std::string("shm_ring: ") + e.what());
  }
}

ShmRing::~ShmRing() {
  if (base_ != nullptr) munmap(base_, map_bytes_);
}

}  // namespace ringlab::comm::shm
