// DDP's communication hooks (torch.distributed.algorithms.ddp_comm_hooks):
// how one bucket of this rank's gradients becomes what every rank applies,
// called by the bucket reducer once per bucket per step, in bucket order, on
// its communication thread while backward goes on. The default hook averages
// in float32; compressors make others (compressor.h), PowerSGD its own
// (powersgd.h).
#ifndef RINGLAB_SYNC_COMM_HOOKS_H_
#define RINGLAB_SYNC_COMM_HOOKS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "sync/sync_tensor.h"

namespace ringlab::sync {

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

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_COMM_HOOKS_H_
