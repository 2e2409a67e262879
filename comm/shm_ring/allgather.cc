// shm_ring's allgather (NCCL's: rank r's count floats land at r * count of
// every rank's recv), choosing its path by size as the allreduce does:
//   one-shot (a rank's block up to oneshot_bytes, and count 0):
//     every rank posts its block in its one-shot bank, checks every peer's
//     call, then copies every peer's block;
//   staged (the gathered buffer below ring_bytes: with more
//     ranks than cores): after a first synchronisation that checks the
//     calls, in pieces of a staging area: every rank posts a piece of its
//     block in its own area; (every rank has posted) every rank copies every
//     peer's piece; (every rank has read) the areas are free again;
//   ring (with a core per rank): N-1 steps; in step s each rank passes on to
//     its right neighbour the block it received in step s-1 (its own in step
//     0), chunk by chunk through the mailboxes in the allreduce's wavefront
//     order, so that each rank sends (N-1) blocks, the bus bytes.
// Nothing is summed: every rank ends with the same bits. Every wait has the
// call's deadline and watches the peer it waits on (shm_mailbox.cc), and
// ranks that disagree on the count fail on every rank, as in the allreduce.
#include <algorithm>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm::shm {

void ShmRing::AllGather(const void* send_buffer, void* recv_buffer,
                        size_t count, DataType) {
  const float* const send = static_cast<const float*>(send_buffer);
  float* const recv = static_cast<float*>(recv_buffer);
  Call call = Begin(CallKind::kAllGather, count, ReduceOp::kSum, 0);
  Guarded(call, [&] {
    // oneshot_bytes = 0 sends everything but count 0 through the
    // staged path or the ring (the tests use it to cover them with tiny
    // counts).
    const size_t bytes = count * sizeof(float);
    if (count == 0 || bytes <= oneshot_) {
      OneShotAllGather(call, send, recv, count);
    } else if (bytes * world_ <= ring_) {
      StagedAllGather(call, send, recv, count);
    } else {
      RingAllGather(call, send, recv, count);
    }
  });
}

void ShmRing::OneShotAllGather(Call& call, const float* send, float* recv,
                               size_t count) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  PostSmall(call, send, count);
  GatherSmall(call);
  call.phase = "one-shot copy";
  for (int p = 0; p < world_; ++p) {
    float* block = recv + static_cast<size_t>(p) * count;
    if (p != rank_) {
      CopyFloats(block, SmallData(p, bank), count);
    } else if (block != send) {
      CopyFloats(block, send, count);
    }
  }
}

void ShmRing::StagedAllGather(Call& call, const float* send, float* recv,
                              size_t count) {
  // Every rank is in this call, so done with the previous one: nobody reads
  // this rank's staging area any more (the staged allreduce's last phase
  // reads it after its last synchronisation). The calls are checked here.
  PostSmall(call, nullptr, 0);
  GatherSmall(call);
  const size_t per_piece = stage_ / sizeof(float);
  float* const own = recv + static_cast<size_t>(rank_) * count;
  for (size_t at = 0; at < count; at += per_piece) {
    const size_t piece = std::min(per_piece, count - at);
    call.phase = "staged post";
    CopyFloats(Stage(rank_, 0), send + at, piece);
    PhaseBarrier(call);
    call.phase = "staged gather";
    for (int p = 0; p < world_; ++p) {
      if (p != rank_) {
        CopyFloats(recv + static_cast<size_t>(p) * count + at, Stage(p, 0),
                   piece);
      } else if (own != send) {
        CopyFloats(own + at, send + at, piece);
      }
    }
    // Every rank has read every area before any is written again, by the
    // next piece or the next call (which may write before it synchronises).
    call.phase = "staged done";
    PhaseBarrier(call);
  }
}

void ShmRing::RingAllGather(Call& call, const float* send, float* recv,
                            size_t count) {
  const size_t chunk = chunk_ / sizeof(float);
  const size_t m = (count + chunk - 1) / chunk;
  const int steps = world_ - 1;
  float* const own = recv + static_cast<size_t>(rank_) * count;
  const bool in_place = own == send;
  // Whose block arrives in step s: the left neighbour's own in step 0, its
  // left neighbour's in step 1, and so on round the ring.
  auto received = [&](int s) {
    const int q = ((rank_ - 1 - s) % world_ + world_) % world_;
    return recv + static_cast<size_t>(q) * count;
  };
  // Step 0: chunk k of this rank's block, into the mailbox (and into its own
  // block of recv, unless it is there already).
  auto send_own = [&](size_t k) {
    call.phase = "ring all-gather";
    call.step = 0;
    const size_t a = k * chunk, len = std::min(chunk, count - a);
    float* out = AcquireSend(call);
    if (in_place && stream_) {
      StreamCopy(out, send + a, len);
    } else if (in_place) {
      CopyFloats(out, send + a, len);
    } else if (stream_) {
      StreamCopy2(own + a, out, send + a, len);
    } else {
      CopyFloats2(own + a, out, send + a, len);
    }
    PostSend(call, len * sizeof(float));
  };
  Wavefront(m, steps, send_own, [&](int s, size_t k) {
    call.phase = "ring all-gather";
    call.step = s;
    const size_t a = k * chunk, len = std::min(chunk, count - a);
    float* local = received(s) + a;
    float* out = s + 1 < steps ? AcquireSend(call) : nullptr;
    const float* in = AcquireRecv(call, len * sizeof(float));
    StoreAndForward(local, out, in, len);
    ReleaseRecv();
    if (out != nullptr) PostSend(call, len * sizeof(float));
  });
}

}  // namespace ringlab::comm::shm
