// shm_ring's allgather (NCCL's: rank r's count elements land at r * count of
// every rank's recv; it moves bytes, whatever their type), choosing its path by
// size as the allreduce does:
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
                        size_t count, DataType type) {
  const char* const send = static_cast<const char*>(send_buffer);
  char* const recv = static_cast<char*>(recv_buffer);
  Call call =
      Begin(CallKind::kAllGather, count, ReduceOp::kSum, 0, false, type);
  Guarded(call, [&] {
    // oneshot_bytes = 0 sends everything but count 0 through the
    // staged path or the ring (the tests use it to cover them with tiny
    // counts).
    const size_t bytes = count * DataTypeSize(type);
    if (count == 0 || bytes <= oneshot_) {
      OneShotAllGather(call, send, recv, bytes);
    } else if (bytes * world_ <= ring_) {
      StagedAllGather(call, send, recv, bytes);
    } else {
      RingAllGather(call, send, recv, bytes);
    }
  });
}

void ShmRing::OneShotAllGather(Call& call, const char* send, char* recv,
                               size_t bytes) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  PostSmall(call, send, bytes);
  GatherSmall(call);
  call.phase = "one-shot copy";
  for (int p = 0; p < world_; ++p) {
    char* block = recv + static_cast<size_t>(p) * bytes;
    if (p != rank_) {
      CopyBytes(block, SmallData(p, bank), bytes);
    } else if (block != send) {
      CopyBytes(block, send, bytes);
    }
  }
}

void ShmRing::StagedAllGather(Call& call, const char* send, char* recv,
                              size_t bytes) {
  // Every rank is in this call, so done with the previous one: nobody reads
  // this rank's staging area any more (the staged allreduce's last phase
  // reads it after its last synchronisation). The calls are checked here.
  PostSmall(call, nullptr, 0);
  GatherSmall(call);
  const size_t per_piece = stage_;
  char* const own = recv + static_cast<size_t>(rank_) * bytes;
  for (size_t at = 0; at < bytes; at += per_piece) {
    const size_t piece = std::min(per_piece, bytes - at);
    call.phase = "staged post";
    CopyBytes(Stage(rank_, 0), send + at, piece);
    PhaseBarrier(call);
    call.phase = "staged gather";
    for (int p = 0; p < world_; ++p) {
      if (p != rank_) {
        CopyBytes(recv + static_cast<size_t>(p) * bytes + at, Stage(p, 0),
                  piece);
      } else if (own != send) {
        CopyBytes(own + at, send + at, piece);
      }
    }
    // Every rank has read every area before any is written again, by the
    // next piece or the next call (which may write before it synchronises).
    call.phase = "staged done";
    PhaseBarrier(call);
  }
}

void ShmRing::RingAllGather(Call& call, const char* send, char* recv,
                            size_t bytes) {
  const size_t chunk = chunk_;
  const size_t m = (bytes + chunk - 1) / chunk;
  const int steps = world_ - 1;
  char* const own = recv + static_cast<size_t>(rank_) * bytes;
  const bool in_place = own == send;
  // Whose block arrives in step s: the left neighbour's own in step 0, its
  // left neighbour's in step 1, and so on round the ring.
  auto received = [&](int s) {
    const int q = ((rank_ - 1 - s) % world_ + world_) % world_;
    return recv + static_cast<size_t>(q) * bytes;
  };
  // Step 0: chunk k of this rank's block, into the mailbox (and into its own
  // block of recv, unless it is there already).
  auto send_own = [&](size_t k) {
    call.phase = "ring all-gather";
    call.step = 0;
    const size_t a = k * chunk, len = std::min(chunk, bytes - a);
    CopyToMailbox(AcquireSend(call), in_place ? nullptr : own + a, send + a,
                  len);
    PostSend(call, len);
  };
  Wavefront(m, steps, send_own, [&](int s, size_t k) {
    call.phase = "ring all-gather";
    call.step = s;
    const size_t a = k * chunk, len = std::min(chunk, bytes - a);
    char* local = received(s) + a;
    float* out = s + 1 < steps ? AcquireSend(call) : nullptr;
    const float* in = AcquireRecv(call, len);
    StoreAndForward(local, out, in, len);
    ReleaseRecv();
    if (out != nullptr) PostSend(call, len);
  });
}

}  // namespace ringlab::comm::shm
