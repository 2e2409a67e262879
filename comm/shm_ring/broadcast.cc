// shm_ring's broadcast (the one-shot banks for small buffers, a pipelined
// chain from the root for large ones) and barrier.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm::shm {

void ShmRing::Broadcast(void* buffer, size_t count, DataType type, int root) {
  char* const data = static_cast<char*>(buffer);
  const size_t bytes = count * DataTypeSize(type);
  Call call =
      Begin(CallKind::kBroadcast, count, ReduceOp::kSum, root, false, type);
  Guarded(call, [&] {
    // Every rank posts its call and checks every peer's first, the root
    // with its data when that fits: ranks that disagree on the root or the
    // count fail on every rank, where a chain alone would let each
    // self-declared root send and return.
    const bool small = bytes <= small_;
    PostSmall(call, rank_ == root && small ? data : nullptr, bytes);
    GatherSmall(call);
    if (small) {
      if (rank_ != root && count > 0) {
        CopyBytes(data, SmallData(root, static_cast<int>(call.desc.seq & 1)),
                  bytes);
      }
      return;
    }
    // A pipelined chain root -> root+1 -> ... -> root-1, chunk by chunk.
    const size_t m = (bytes + chunk_ - 1) / chunk_;
    const bool forward = right_ != root;
    call.phase = "chain";
    for (size_t k = 0; k < m; ++k) {
      const size_t a = k * chunk_, len = std::min(chunk_, bytes - a);
      if (rank_ == root) {
        CopyToMailbox(AcquireSend(call), nullptr, data + a, len);
        PostSend(call, len);
        continue;
      }
      float* out = forward ? AcquireSend(call) : nullptr;
      const float* in = AcquireRecv(call, len);
      StoreAndForward(data + a, out, in, len);
      ReleaseRecv();
      if (out != nullptr) PostSend(call, len);
    }
  });
}

void ShmRing::Barrier() {
  Call call = Begin(CallKind::kBarrier, 0, ReduceOp::kSum, 0);
  if (world_ == 1) return;
  Guarded(call, [&] {
    InlineAllReduce(call, nullptr, 0, ReduceOp::kSum,
                    dtype::KernelsFor(DataType::kFloat32));
  });
}

}  // namespace ringlab::comm::shm
