// shm_ring: calls and their descriptions, waits with deadlines, the ring's
// mailboxes and the one-shot banks (see shm_ring_internal.h).
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm::shm {

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

ShmRing::Call ShmRing::Begin(CallKind kind, size_t count, ReduceOp op, int root,
                             bool registered, DataType type) {
  Call call;
  call.kind = kind;
  call.desc.seq = ++calls_;
  call.desc.packed =
      (registered ? kRegisteredBit : 0) | static_cast<uint64_t>(kind) |
      (static_cast<uint64_t>(op) << 8) | (static_cast<uint64_t>(type) << 12) |
      (static_cast<uint64_t>(static_cast<uint32_t>(root)) << 32);
  call.desc.count = count;
  call.deadline = Clock::now() + timeout_;
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
  broken_ = true;
  RankHeader* me = Rank(rank_);
  if (me->aborted.load() == 0) {
    std::snprintf(me->abort_message, sizeof(me->abort_message), "%s",
                  message.c_str());
    me->aborted.store(1, std::memory_order_release);
  }
  throw CommError(message);
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
      std::string(CallKindName(call.kind)) +
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
  if (PeerExited(peers_[peer], peers_[rank_])) {
    // Every peer gone, not only the one waited for: it may have failed, and
    // exited, because another died first.
    throw CommError(
        "shm_ring: " +
        PeerWatch(peers_, rank_).ExitedWithin(std::chrono::milliseconds(0)) +
        " died during " + where);
  }
  if (Clock::now() > call.deadline) {
    throw CommError("shm_ring: timed out after " + SecondsText(timeout_) +
                    " waiting for rank " + std::to_string(peer) + " in " +
                    where);
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

void ShmRing::PostSmall(Call& call, const void* data, size_t bytes) {
  const int bank = static_cast<int>(call.desc.seq & 1);
  RankHeader* me = Rank(rank_);
  call.phase = "one-shot post";
  BankFree(call);
  if (data != nullptr && bytes > 0)
    CopyBytes(SmallData(rank_, bank), data, bytes);
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

void ShmRing::PhaseBarrier(Call& call) {
  const uint64_t target = ++phases_;
  RankHeader* me = Rank(rank_);
  me->phase64.store(target, std::memory_order_release);
  me->phase.store(static_cast<uint32_t>(target), std::memory_order_seq_cst);
  FutexWakeIfSleeping(&me->phase, &me->phase_sleepers);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    RankHeader* h = Rank(p);
    Wait(call, &h->phase, &h->phase_sleepers, p, [h, target](uint32_t) {
      return h->phase64.load(std::memory_order_acquire) >= target;
    });
  }
}

}  // namespace ringlab::comm::shm
