// Gradient synchronisers, the thing a user swaps with train's --sync or
// ringlab_torch.Synchronizer: each is one file that implements Synchronizer
// over a model's flat buffers (model.h) and registers its description (its
// name, what it does and sends, its options and its PyTorch counterpart, a
// factory). Everything else, the trainer's flags, checks, config.json,
// `train --list_syncs` and the Python front, is made from the descriptions;
// nothing dispatches on a synchroniser's name.
//
// A synchroniser works over any Communicator; where the communicator's memory
// differs from the model's (a CUDA model over shm_ring), it stages buffers
// through host memory or refuses, by its own description.
#ifndef RINGLAB_SYNC_SYNCHRONIZER_H_
#define RINGLAB_SYNC_SYNCHRONIZER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "sync/model.h"
#include "sync/options.h"
#include "sync/sync_tensor.h"
#include "trace/trace.h"

namespace ringlab::sync {

// Every method is called on every rank in the same order; step counts from
// 0 on each rank.
class Synchronizer {
 public:
  virtual ~Synchronizer() = default;
  // Once the model holds the run's starting parameters (rank 0's broadcast,
  // or a checkpoint's, in which case state() was read back from it first).
  virtual void Start(ModelBuffers& model, bool resumed) {}
  // What backward of this step reports to (null: nothing to observe): DDP's
  // bucket reducer, which reduces during backward.
  virtual GradObserver* backward_observer(int64_t step) { return nullptr; }
  // Between backward and the local optimiser's step: DDP's averaging.
  virtual void AfterBackward(ModelBuffers& model, int64_t step) = 0;
  // After the local optimiser's step: parameter averaging, outer steps.
  virtual void AfterStep(ModelBuffers& model, int64_t step) = 0;
  // Waits for communication still in flight (Streaming DiLoCo's overlapped
  // reductions), keeping its result for the step that applies it; rethrows
  // what failed there. Called before anything else uses the communicator
  // (the run's end); state() waits by itself.
  virtual void Finish() {}
  // Its state for checkpoints (pointers into this object; sizes fixed at
  // construction); empty for the stateless ones.
  virtual std::vector<SyncTensor> state() { return {}; }
  // The parameters evaluation and the run's final output use where they are
  // not the model's own (DiLoCo's outer parameters); null: the model's.
  virtual const std::vector<float>* evaluated_params() const { return nullptr; }

  // One step's synchronisation around the local optimiser's step (what a
  // training loop calls in place of optimizer.step(), after backward).
  void Step(ModelBuffers& model, int64_t step,
            const std::function<void()>& local_step) {
    AfterBackward(model, step);
    local_step();
    AfterStep(model, step);
  }
};

// What a synchroniser is made with.
struct SyncContext {
  comm::Communicator& comm;
  ModelBuffers& model;
  const OptionValues& options;
  trace::Tracer& tracer;
  // The ranks of this rank's host, where the description asks for it
  // (needs_host_comm) and the job has one; else null.
  comm::Communicator* host_comm = nullptr;
};

// Which of the model's buffers a synchroniser reduces in place every so
// often (so that a CPU model can keep them in the communicator's registered
// memory, which shm_ring reduces without a copy).
struct ReducedBuffers {
  bool grads = false, params = false;
};

struct SyncDescription {
  std::string name;     // --sync=name
  std::string summary;  // one line: what it does
  std::string sends;    // one line: what it sends per step
  std::string pytorch;  // its PyTorch counterpart, or "none"
  std::vector<OptionSpec> options;
  // Options (flag-style texts) under which a run of a few dozen steps shows
  // what it does (PowerSGD compressing, DiLoCo taking outer steps): the
  // conformance suite's runs use them.
  std::map<std::string, std::string> short_run;
  ReducedBuffers reduces;
  // True where, with these options, it needs the host's communicator
  // (post_local_sgd's intra-node subgroup).
  std::function<bool(const OptionValues&)> needs_host_comm;
  // Checks across options, beyond each one's range (std::invalid_argument).
  std::function<void(const OptionValues&)> check;
  // Checks against the model (Streaming DiLoCo's fragments, at most one per
  // tensor): std::invalid_argument. Null: any model.
  std::function<void(const OptionValues&, const ParamLayout&)> check_model;
  std::function<std::unique_ptr<Synchronizer>(const SyncContext&)> create;
};

// Adds a description to the registry (at static initialisation: see
// RINGLAB_REGISTER_SYNC). Throws std::logic_error for a name registered
// twice or an option declared otherwise by another synchroniser.
bool RegisterSync(SyncDescription description);

// Registers the description a function returns when the program starts.
#define RINGLAB_REGISTER_SYNC(describe)                  \
  static const bool ringlab_sync_registered_##describe = \
      ::ringlab::sync::RegisterSync(describe())

// Every registered synchroniser, by name.
std::vector<const SyncDescription*> AllSyncs();
// std::invalid_argument "unknown --sync=x (expected one of a, b, …)".
const SyncDescription& FindSync(const std::string& name);
// Every option any synchroniser declares, once each, by name.
std::vector<OptionSpec> AllSyncOptions();
// The synchronisers that declare an option: "param_avg, post_local_sgd".
std::string SyncsWithOption(const std::string& option);

// The options of `name` from flag-style texts (name -> text); an option of
// another synchroniser or of none is std::invalid_argument naming it, as is a
// value out of range or options that disagree (the description's check).
OptionValues ParseSyncOptions(const std::string& name,
                              const std::map<std::string, std::string>& given);

// The description's check_model, where a front knows the model before any
// rank starts (the trainer's --model).
void CheckSyncModel(const std::string& name, const OptionValues& options,
                    const ParamLayout& layout);

// The synchroniser `name` with validated options.
std::unique_ptr<Synchronizer> CreateSync(const std::string& name,
                                         const SyncContext& context);

// Refuses a communicator that reduces device memory, for a synchroniser that
// computes on the host: std::invalid_argument "<what> in host memory:
// --comm=<backend> reduces device memory" (what: "--sync=diloco averages").
void RequireHostMemory(const comm::Communicator& comm, const std::string& what);

// Rank root's parameters to every rank, as DDP's constructor does.
void BroadcastParams(comm::Communicator& comm, ModelBuffers& model, int root);

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_SYNCHRONIZER_H_
