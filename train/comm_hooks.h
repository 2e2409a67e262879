// DDP's communication hooks (torch.distributed.algorithms.ddp_comm_hooks):
// how one bucket of this rank's gradients becomes what every rank applies,
// called by the bucket reducer once per bucket per step, in bucket order, on
// its communication thread while backward goes on. The default hook averages
// in float32; the compression hooks are fp16_compress_hook and
// bf16_compress_hook's recipe (cast, divide in the low type, sum, widen back),
// sending half the bytes.
#ifndef RINGLAB_TRAIN_COMM_HOOKS_H_
#define RINGLAB_TRAIN_COMM_HOOKS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "train/sync_tensor.h"

namespace ringlab::train {

// What a hook is given of a bucket, as torch's GradBucket: its index in this
// step's layout, its range [begin, end) of the flat gradient buffer, and
// whether it is the step's last (DDP's bucket.is_last()).
struct GradBucket {
  size_t index = 0;
  size_t begin = 0;
  size_t end = 0;
  bool is_last = true;
  size_t count() const { return end - begin; }
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  // The bucket's range of the flat gradient buffer `grads`, in the
  // communicator's memory, replaced in place by the result.
  virtual void Reduce(comm::Communicator& comm, const GradBucket& bucket,
                      float* grads) = 0;
  // The bus bytes of the bucket in the step about to be reduced, for the
  // traces.
  virtual uint64_t BusBytes(const GradBucket& bucket, int world_size) const = 0;
  // True where, for the bucket about to be reduced, the result of each
  // element depends only on that element across ranks (and the collective's
  // order of summing it), not on where the bucket's tensors lie: the bucket
  // reducer may then hand it the bucket in another buffer, in DDP's order of
  // its tensors.
  virtual bool elementwise() const { return false; }
  // Its state for checkpoints (Synchronizer::state); Restored is called once
  // a checkpoint's values are back in those vectors.
  virtual std::vector<SyncTensor> state() { return {}; }
  virtual void Restored() {}
};

// allreduce_hook: the average over the ranks in float32.
std::unique_ptr<CommHook> MakeAllReduceHook();

// fp16_compress_hook (type kFloat16) or bf16_compress_hook (kBFloat16): each
// gradient rounded to the type (nearest even), divided by the world size in
// the type (float32 division, rounded again: torch's h.div_(W)), summed over
// the ranks by the communicator in the type (rounded after each partial sum
// of its algorithm), widened back exactly. For 2 ranks the sum is correctly
// rounded and so bit for bit torch's over gloo. Its 16-bit twin of the flat
// buffer (max_count gradients, each bucket at its own offset, so that no
// bucket waits on another's) is the communicator's registered memory
// (collective: every rank makes the hook).
std::unique_ptr<CommHook> MakeCompressHook(comm::Communicator& comm,
                                           comm::DataType type,
                                           size_t max_count);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_COMM_HOOKS_H_
