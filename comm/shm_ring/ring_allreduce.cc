// shm_ring's ring allreduce: reduce-scatter, then all-gather, each segment
// cut into chunks that flow through the mailboxes as a wavefront.
#include <algorithm>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm::shm {

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
  Wavefront(m, steps, send_raw, [&](int s, size_t k) {
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
      StoreAndForward(local, out, in, len);
    }
    ReleaseRecv();
    if (out != nullptr) PostSend(call, len * sizeof(float));
  });
}

void ShmRing::StoreAndForward(float* local, float* out, const float* in,
                              size_t len) const {
  if (out != nullptr && stream_) {
    StreamCopy2(local, out, in, len);
  } else if (out != nullptr) {
    CopyFloats2(local, out, in, len);
  } else {
    CopyFloats(local, in, len);
  }
}

}  // namespace ringlab::comm::shm
