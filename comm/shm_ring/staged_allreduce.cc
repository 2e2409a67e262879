// shm_ring's staged allreduce, for buffers too large for the one-shot banks
// and too small for the ring to pay off (the sizes come from
// ShmRingTuning's stage_bytes and ring_bytes). In pieces that fit the
// ranks' staging areas, with N segments per piece, segment j belonging to
// rank j:
//   post:    each rank copies its part of every other rank's segment into
//            its own staging area (slot j for segment j);
//   (every rank has posted)
//   reduce:  rank j sums segment j over the ranks, in rank order (its own
//            buffer for itself, the others' staging slots j), into its
//            buffer and into its staging slot j;
//   (every rank has reduced)
//   gather:  each rank copies every other rank's result (their slot j) into
//            segment j of its buffer.
// Each element is summed by one rank in one order: bitwise the same on every
// rank. A rank writes a slot again only after a synchronisation that every
// rank reaches once done reading it.
#include <algorithm>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm::shm {

void ShmRing::StagedAllReduce(Call& call, char* data, size_t count, ReduceOp op,
                              const Kernels& k) {
  const size_t n = static_cast<size_t>(world_);
  const size_t slot = StageSlotFloats() * sizeof(float) / k.size;  // elements
  const size_t per_piece = slot * n;
  const size_t line = 64 / k.size;  // elements per cache line
  sources_.resize(n);
  bool first = true;
  for (size_t at = 0; at < count; at += per_piece) {
    const size_t piece = std::min(per_piece, count - at);
    const size_t seg = RoundUp((piece + n - 1) / n, line);
    auto range = [&](size_t j, size_t* a, size_t* len) {
      *a = std::min(piece, j * seg);
      *len = std::min(piece, *a + seg) - *a;
    };
    char* x = data + at * k.size;
    size_t a, len;
    call.phase = "staged post";
    for (int j = 0; j < world_; ++j) {
      range(j, &a, &len);
      if (j != rank_) CopyBytes(Stage(rank_, j), x + a * k.size, len * k.size);
    }
    // The first synchronisation also checks that every rank's call agrees.
    if (first) {
      PostSmall(call, nullptr, 0);
      GatherSmall(call);
      first = false;
    } else {
      PhaseBarrier(call);
    }
    call.phase = "staged reduce";
    range(rank_, &a, &len);
    for (int q = 0; q < world_; ++q) {
      sources_[q] = q == rank_ ? static_cast<const void*>(x + a * k.size)
                               : Stage(q, rank_);
    }
    void* const dsts[2] = {x + a * k.size, Stage(rank_, rank_)};
    k.sum_into(sources_.data(), n, dsts, 2, len, AvgDivisor(op, world_));
    PhaseBarrier(call);
    call.phase = "staged gather";
    for (int j = 0; j < world_; ++j) {
      range(j, &a, &len);
      if (j != rank_) CopyBytes(x + a * k.size, Stage(j, j), len * k.size);
    }
  }
}

}  // namespace ringlab::comm::shm
