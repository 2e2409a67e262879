// shm_ring's broadcast (the one-shot banks for small buffers, a pipelined
// chain from the root for large ones) and barrier.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm::shm {

void ShmRing::Broadcast(void* buffer, size_t count, DataType, int root) {
  float* const data = static_cast<float*>(buffer);
  Call call = Begin(CallKind::kBroadcast, count, ReduceOp::kSum, root);
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
}

void ShmRing::Barrier() {
  Call call = Begin(CallKind::kBarrier, 0, ReduceOp::kSum, 0);
  if (world_ == 1) return;
  Guarded(call, [&] { InlineAllReduce(call, nullptr, 0, ReduceOp::kSum); });
}

}  // namespace ringlab::comm::shm
