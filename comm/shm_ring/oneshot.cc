// shm_ring's latency-bound allreduces: inline (up to 40 bytes, in the
// ranks' header lines), one-shot (every rank posts its buffer, then sums all
// in rank order) and registered (zero-copy, on Allocate'd memory). Each sums
// every element in one place in rank order (in float32 for the 16-bit
// types, rounded once): identical bits on every rank.
#include <algorithm>
#include <vector>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm::shm {

void ShmRing::OneShotAllReduce(Call& call, char* data, size_t count,
                               ReduceOp op, const Kernels& k) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  PostSmall(call, data, count * k.size);
  GatherSmall(call);
  if (count == 0) return;
  sources_.resize(world_);
  for (int p = 0; p < world_; ++p) sources_[p] = SmallData(p, bank);
  void* const dst = data;
  k.sum_into(sources_.data(), sources_.size(), &dst, 1, count,
             AvgDivisor(op, world_));
}

void ShmRing::InlineAllReduce(Call& call, char* data, size_t count, ReduceOp op,
                              const Kernels& k) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  const uint32_t seq = static_cast<uint32_t>(call.desc.seq);
  call.phase = "inline post";
  BankFree(call);
  InlineBox* mine = &Rank(rank_)->box[bank];
  if (count > 0) CopyBytes(mine->data, data, count * k.size);
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
  if (count == 0) return;
  // Rank order on every rank, as the one-shot path.
  sources_.resize(world_);
  for (int p = 0; p < world_; ++p) sources_[p] = Rank(p)->box[bank].data;
  void* const dst = data;
  k.sum_into(sources_.data(), sources_.size(), &dst, 1, count,
             AvgDivisor(op, world_));
}

void ShmRing::RegisteredAllReduce(Call& call, const std::vector<char*>& slots,
                                  size_t count, ReduceOp op, const Kernels& k) {
  // Every rank's input is in place, and every call agrees.
  PostSmall(call, nullptr, 0);
  GatherSmall(call);
  // Segments of whole cache lines, so that no two ranks write one line.
  call.phase = "registered reduce";
  const size_t line = 64 / k.size;
  const size_t seg = RoundUp((count + world_ - 1) / world_, line);
  const size_t a = std::min(count, static_cast<size_t>(rank_) * seg);
  const size_t b = std::min(count, a + seg);
  if (b > a) {
    sources_.resize(world_);
    targets_.resize(world_);
    for (int r = 0; r < world_; ++r) {
      targets_[r] = slots[r] + a * k.size;
      sources_[r] = targets_[r];
    }
    k.sum_into(sources_.data(), sources_.size(), targets_.data(),
               targets_.size(), b - a, AvgDivisor(op, world_));
  }
  // Returns only once every rank's segment is in every buffer.
  call.phase = "registered wait";
  RankHeader* me = Rank(rank_);
  me->done64.store(call.desc.seq, std::memory_order_release);
  me->done.store(static_cast<uint32_t>(call.desc.seq),
                 std::memory_order_seq_cst);
  FutexWakeIfSleeping(&me->done, &me->done_sleepers);
  const uint64_t seq = call.desc.seq;
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    RankHeader* h = Rank(p);
    Wait(call, &h->done, &h->done_sleepers, p, [h, seq](uint32_t) {
      return h->done64.load(std::memory_order_acquire) >= seq;
    });
  }
}

}  // namespace ringlab::comm::shm
