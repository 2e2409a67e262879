// shm_ring's ring allreduce: reduce-scatter, then all-gather, each segment
// cut into chunks that flow through the mailboxes as a wavefront. Partial
// sums travel in the buffer's own type, so a 16-bit sum is rounded after
// every hop, as in gloo's and NCCL's rings.
#include <algorithm>
#include <cstdint>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm::shm {

void ShmRing::RingAllReduce(Call& call, char* data, size_t count, ReduceOp op,
                            const Kernels& k) {
  const size_t n = static_cast<size_t>(world_);
  const size_t seg_len = (count + n - 1) / n;
  const size_t chunk = chunk_ / k.size;
  const size_t m = std::max<size_t>(1, (seg_len + chunk - 1) / chunk);
  const int steps = 2 * (world_ - 1);
  const float n_ranks = static_cast<float>(world_);
  // The streaming stores are float32's (Stream*): 16-bit partial sums take
  // the kernels' plain stores.
  const bool stream = stream_ && k.type == DataType::kFloat32;
  // Element range of chunk k of segment j.
  auto range = [&](int j, size_t c, size_t* a, size_t* b) {
    size_t seg_begin = std::min(static_cast<size_t>(j) * seg_len, count);
    size_t seg_end = std::min(seg_begin + seg_len, count);
    *a = std::min(seg_begin + c * chunk, seg_end);
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
  auto send_raw = [&](size_t c) {
    call.phase = "reduce-scatter";
    call.step = 0;
    size_t a, b;
    range(send_seg(0), c, &a, &b);
    CopyToMailbox(AcquireSend(call), nullptr, data + a * k.size,
                  (b - a) * k.size);
    PostSend(call, (b - a) * k.size);
  };
  Wavefront(m, steps, send_raw, [&](int s, size_t c) {
    call.phase = s < world_ - 1 ? "reduce-scatter" : "all-gather";
    call.step = s < world_ - 1 ? s : s - (world_ - 1);
    size_t a, b;
    range(recv_seg(s), c, &a, &b);
    const size_t len = b - a;
    char* local = data + a * k.size;
    float* out = s + 1 < steps ? AcquireSend(call) : nullptr;
    const float* in = AcquireRecv(call, len * k.size);
    float* local_f = reinterpret_cast<float*>(local);
    if (s < world_ - 2) {
      // Partial sums only travel on: this rank never needs them again.
      if (stream) {
        StreamAdd(out, local_f, in, len);
      } else {
        k.add(out, local, in, len);
      }
    } else if (s == world_ - 2) {
      if (op == ReduceOp::kAvg) {
        if (stream) {
          StreamAddDivide2(local_f, out, in, n_ranks, len);
        } else {
          k.add_divide2(local, out, in, n_ranks, len);
        }
      } else if (stream) {
        StreamAdd2(local_f, out, in, len);
      } else {
        k.add2(local, out, in, len);
      }
    } else {
      StoreAndForward(local, out, in, len * k.size);
    }
    ReleaseRecv();
    if (out != nullptr) PostSend(call, len * k.size);
  });
}

void ShmRing::CopyToMailbox(float* out, void* local, const void* in,
                            size_t bytes) const {
  // Streaming moves whole, aligned floats (a 16-bit buffer may be neither).
  auto aligned = [](const void* p) {
    return reinterpret_cast<uintptr_t>(p) % alignof(float) == 0;
  };
  const bool stream = Streams(bytes) && aligned(local) && aligned(in);
  const float* in_f = static_cast<const float*>(in);
  if (local == nullptr && stream) {
    StreamCopy(out, in_f, bytes / sizeof(float));
  } else if (local == nullptr) {
    CopyBytes(out, in, bytes);
  } else if (stream) {
    StreamCopy2(static_cast<float*>(local), out, in_f, bytes / sizeof(float));
  } else {
    CopyBytes2(local, out, in, bytes);
  }
}

void ShmRing::StoreAndForward(void* local, float* out, const void* in,
                              size_t bytes) const {
  if (out != nullptr) {
    CopyToMailbox(out, local, in, bytes);
  } else {
    CopyBytes(local, in, bytes);
  }
}

}  // namespace ringlab::comm::shm
