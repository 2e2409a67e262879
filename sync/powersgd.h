// PowerSGD (Vogels et al., 2019) as torch 1.13's powerSGD_hook computes it,
// a DDP communication hook (comm_hooks.h): per bucket, once `start_iter`
// steps of plain allreduce are over, each gradient matrix M (a weight viewed
// as shape[0] x rest; those too small to gain, the biases above all, are
// allreduced as they are) is replaced by a rank-r approximation P Q^T that
// the ranks agree on: P = M Q (Q drawn from torch.randn the first time, the
// last step's Q after), summed and orthogonalised; Q = M^T P, summed and
// divided by the world size. With error feedback what the approximation
// lost is added to the next step's gradients. The arithmetic is torch's,
// step by step (docs/pytorch-fidelity.md, "powerSGD_hook"): tensors in DDP's
// bucket order, P and Q grouped by shape, the seeds of numpy's RandomState,
// torch.randn, Gram-Schmidt with ATen's 8-lane norm for rank 1 (and 2),
// LAPACK's QR above, row-major sgemm products, the error over the whole
// bucket. Unlike torch 1.13, whose P and Q allreduces race with the next
// bucket's hook, the order of collectives is fixed: U, P, Q of each bucket,
// in bucket order.
#ifndef RINGLAB_SYNC_POWERSGD_H_
#define RINGLAB_SYNC_POWERSGD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "sync/bucket_reducer.h"
#include "sync/comm_hooks.h"
#include "sync/param_layout.h"

namespace ringlab::sync {

struct PowerSgdOptions {
  int rank = 1;                       // matrix_approximation_rank
  int64_t start_iter = 1000;          // start_powerSGD_iter
  double min_compression_rate = 2.0;  // min_compression_rate
  bool error_feedback = true;         // use_error_feedback
  bool warm_start = true;             // warm_start
  // batched_powerSGD_hook: each bucket (padded with zeros to the next
  // square, s x s) is one matrix, biases and all, the error over the padded
  // length; as 1.13 intends (its own hook passes a 2-D Q to an
  // orthogonalisation that asserts 3-D, and raises).
  bool batched = false;
};

// Throws std::invalid_argument for a rank below 1, a start below 2 with
// error feedback or warm start (torch refuses it: DDP rebuilds its buckets
// after step 0), a start past kMaxSteps or a compression rate below 1.
void ValidatePowerSgd(const PowerSgdOptions& options);

// The hook for `buckets` of `layout` (as the reducer assigns them).
std::unique_ptr<CommHook> MakePowerSgdHook(const ParamLayout& layout,
                                           std::vector<Bucket> buckets,
                                           const PowerSgdOptions& options);

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_POWERSGD_H_
