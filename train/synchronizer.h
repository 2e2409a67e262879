// Gradient synchronisers, the thing a user swaps with --sync: `allreduce`
// averages gradients after every backward (PyTorch DDP), `param_avg` exchanges
// no gradients and averages parameters every K steps after a warm-up (local
// SGD, as torch.distributed's PeriodicModelAverager), `none` lets ranks train
// independently (a baseline). They work over any Communicator; where the
// communicator's memory differs from the model's (a CUDA model over shm_ring),
// buffers are staged through host memory.
#ifndef RINGLAB_TRAIN_SYNCHRONIZER_H_
#define RINGLAB_TRAIN_SYNCHRONIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "nn/mlp.h"
#include "train/bucket_reducer.h"
#include "train/trace.h"

namespace ringlab::train {

class Synchronizer {
 public:
  virtual ~Synchronizer() = default;
  virtual const char* name() const = 0;
  // What to pass to the model's ForwardBackward (null: nothing to observe):
  // allreduce's bucket reducer, which starts reducing during backward.
  virtual nn::BackwardObserver* backward_observer() { return nullptr; }
  // Between backward and the optimiser step: DDP's gradient averaging.
  virtual void AfterBackward(nn::Mlp& model) = 0;
  // After the optimiser step; step counts from 0 on each rank.
  virtual void AfterStep(nn::Mlp& model, int64_t step) = 0;
};

// The most steps a run may take (1e9 epochs of at most 1e9 steps): step
// numbers and settings counted in steps stay far below 2^63.
inline constexpr int64_t kMaxSteps = 1'000'000'000'000'000'000;

struct SyncOptions {
  int64_t avg_period = 4;  // param_avg: K
  int64_t avg_warmup = 0;  // param_avg: steps before the first average
  // allreduce: DDP's buckets (bucket_reducer.h) and whether their allreduces
  // overlap backward.
  size_t first_bucket_bytes = kFirstBucketBytes;
  size_t bucket_cap_bytes = size_t{25} << 20;  // DDP's bucket_cap_mb=25
  bool overlap = true;
};

// Throws std::invalid_argument unless name is "allreduce", "param_avg" or
// "none", the period in [1, kMaxSteps], the warm-up in [0, kMaxSteps] and
// both bucket caps positive.
void ValidateSync(const std::string& name, const SyncOptions& options);

// A synchroniser by name for this model; its options were validated once
// (ValidateSync), an unknown name is std::invalid_argument. Where the
// communicator cannot reach the model's memory (a CUDA model over a host
// communicator), allreduce stages the whole gradient buffer through host
// memory after backward instead of reducing buckets during it. tracer, when
// not null, records its communication.
std::unique_ptr<Synchronizer> CreateSynchronizer(const std::string& name,
                                                 comm::Communicator& comm,
                                                 nn::Mlp& model,
                                                 const SyncOptions& options,
                                                 Tracer* tracer = nullptr);

// True where PeriodicModelAverager.average_parameters() averages at this step.
bool IsAveragingStep(int64_t step, const SyncOptions& options);

enum class ModelBuffer { kParams, kGrads };

// Averages one of the model's flat buffers across ranks in place (staging
// through host memory when the communicator cannot reach the model's memory).
void AverageModelBuffer(comm::Communicator& comm, nn::Mlp& model,
                        ModelBuffer which);
// Rank root's parameters to every rank, as DDP's constructor does.
void BroadcastParams(comm::Communicator& comm, nn::Mlp& model, int root);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_SYNCHRONIZER_H_
