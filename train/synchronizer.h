// Gradient synchronisers, the thing a user swaps with --sync: `allreduce`
// averages gradients after every backward (PyTorch DDP), `fp16` and `bf16`
// and `powersgd` compress them first (DDP's communication hooks:
// comm_hooks.h, powersgd.h), `param_avg` exchanges
// no gradients and averages parameters every K steps after a warm-up (local
// SGD, as torch.distributed's PeriodicModelAverager; the ranks train apart
// during the warm-up), `post_local_sgd` is DDP during the warm-up and then
// param_avg (PyTorch's post_localSGD_hook with one-rank subgroups plus
// PeriodicModelAverager), `diloco` averages every H steps the change of the
// parameters and applies it with an outer SGD with Nesterov momentum
// (train/diloco.h), `none` lets ranks train independently (a baseline). They
// work over any Communicator; where the communicator's memory differs from
// the model's (a CUDA model over shm_ring), buffers are staged through host
// memory.
#ifndef RINGLAB_TRAIN_SYNCHRONIZER_H_
#define RINGLAB_TRAIN_SYNCHRONIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "nn/mlp.h"
#include "train/bucket_reducer.h"
#include "train/powersgd.h"
#include "train/sync_tensor.h"
#include "train/trace.h"

namespace ringlab::train {

// Every method is called on every rank in the same order; step counts from
// 0 on each rank.
class Synchronizer {
 public:
  virtual ~Synchronizer() = default;
  virtual const char* name() const = 0;
  // Once the model holds the run's starting parameters (rank 0's broadcast,
  // or a checkpoint's, in which case state() was read back from it first).
  virtual void Start(const nn::Mlp& model, bool resumed) {}
  // What to pass to the model's ForwardBackward in this step (null: nothing
  // to observe): DDP's bucket reducer, which reduces during backward.
  virtual nn::BackwardObserver* backward_observer(int64_t step) {
    return nullptr;
  }
  // Between backward and the optimiser step: DDP's gradient averaging.
  virtual void AfterBackward(nn::Mlp& model, int64_t step) = 0;
  // After the optimiser step.
  virtual void AfterStep(nn::Mlp& model, int64_t step) = 0;
  // Its state for checkpoints (pointers into this object; sizes fixed at
  // construction); empty for the stateless ones.
  virtual std::vector<SyncTensor> state() { return {}; }
  // The parameters evaluation and the run's final output use where they are
  // not the model's own (DiLoCo's outer parameters); null: the model's.
  virtual const std::vector<float>* evaluated_params() const { return nullptr; }
};

// The most steps a run may take (1e9 epochs of at most 1e9 steps): step
// numbers and settings counted in steps stay far below 2^63.
inline constexpr int64_t kMaxSteps = 1'000'000'000'000'000'000;

struct SyncOptions {
  int64_t avg_period = 4;  // param_avg, post_local_sgd: K
  // param_avg, post_local_sgd: steps before the first average (of DDP
  // allreduce for post_local_sgd).
  int64_t avg_warmup = 0;
  // diloco: inner steps between outer steps (H), the outer SGD's learning
  // rate and Nesterov momentum.
  int64_t inner_steps = 16;
  float outer_lr = 0.7f;
  float outer_momentum = 0.9f;
  // post_local_sgd after the warm-up: false, each rank's gradients stay its
  // own (one-rank subgroups); true (--post_local_subgroup=host), they are
  // averaged among the ranks of its host (post_localSGD_hook's intra-node
  // subgroup) over the host communicator CreateSynchronizer is given.
  bool post_local_host_subgroup = false;
  PowerSgdOptions powersgd;  // powersgd
  // allreduce: DDP's buckets (bucket_reducer.h) and whether their allreduces
  // overlap backward.
  size_t first_bucket_bytes = kFirstBucketBytes;
  size_t bucket_cap_bytes = size_t{25} << 20;  // DDP's bucket_cap_mb=25
  bool overlap = true;
};

// The names --sync takes.
const std::vector<std::string>& SynchronizerNames();

// Throws std::invalid_argument unless name is one of SynchronizerNames(), the
// period and inner steps in [1, kMaxSteps], the warm-up in [0, kMaxSteps],
// the outer learning rate and momentum finite and >= 0 (momentum < 1) and
// both bucket caps positive.
void ValidateSync(const std::string& name, const SyncOptions& options);

// A synchroniser by name for this model; its options were validated once
// (ValidateSync), an unknown name is std::invalid_argument. Where the
// communicator cannot reach the model's memory (a CUDA model over a host
// communicator), allreduce stages the whole gradient buffer through host
// memory after backward instead of reducing buckets during it. tracer, when
// not null, records its communication. host_comm: the ranks of this rank's
// host (post_local_sgd with post_local_host_subgroup needs it; std::
// invalid_argument without).
std::unique_ptr<Synchronizer> CreateSynchronizer(
    const std::string& name, comm::Communicator& comm, nn::Mlp& model,
    const SyncOptions& options, Tracer* tracer = nullptr,
    comm::Communicator* host_comm = nullptr);

// True where PeriodicModelAverager.average_parameters() averages at this step.
bool IsAveragingStep(int64_t step, const SyncOptions& options);

// Which of the model's buffers the synchroniser `name` reduces in place every
// so often (so that a CPU model can keep them in the communicator's
// registered memory).
struct ReducedBuffers {
  bool grads = false, params = false;
};
ReducedBuffers BuffersReducedBy(const std::string& name);

// Rank root's parameters to every rank, as DDP's constructor does.
void BroadcastParams(comm::Communicator& comm, nn::Mlp& model, int root);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_SYNCHRONIZER_H_
