// DiLoCo (Douillard et al., 2023) as a synchroniser: each rank takes H inner
// SGD steps on its own shard without communicating, then the ranks average
// how far their parameters moved from the shared outer parameters and an
// outer SGD with Nesterov momentum applies that average to them; every rank
// then continues from the new outer parameters. 1/H of DDP's bytes. The
// arithmetic is torch 1.13's, element by element, so that a PyTorch program
// doing the same (experiments/fashion_mnist/pytorch_ddp.py --sync=diloco)
// trains to the same bits; evaluation and the run's final parameters are the
// outer ones.
#ifndef RINGLAB_SYNC_DILOCO_H_
#define RINGLAB_SYNC_DILOCO_H_

#include <cstddef>

#include "sync/options.h"

namespace ringlab::sync {

// One outer step of torch.optim.SGD(lr, momentum, nesterov=True) on the
// outer parameters with gradient `delta` (the averaged change), in place:
// the momentum buffer is delta at the first step (torch clones it), else
// momentum * mu + delta; the parameters move by -lr * (delta + mu * buffer).
// The two multiply-adds that torch 1.13's CPU kernels fuse are fused here
// (std::fma), the buffer's update is not: both as measured on Debian's
// build (docs/pytorch-fidelity.md, "DiLoCo").
void OuterNesterovStep(const float* delta, float* momentum, bool first,
                       float lr, float mu, float* outer, size_t n);

// --inner_steps (H), --outer_lr and --outer_momentum, declared once for
// DiLoCo and the methods built on it.
OptionSpec InnerStepsOption();
OptionSpec OuterLrOption();
OptionSpec OuterMomentumOption();

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_DILOCO_H_
