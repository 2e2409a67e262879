// What a backend is to the rest of ringlab: the data movement it implements
// (Backend), and the one description it registers (BackendDescription) —
// its name, memory, where its ranks may run, what it supports, its tuning
// settings, what a job must arrange for it and what the conformance suite
// must expect of it. The factory (CreateCommunicator), the trainer's checks
// and --help, the benchmarks and the conformance suite read descriptions;
// none of them branches on a backend's name.
#ifndef RINGLAB_COMM_BACKEND_H_
#define RINGLAB_COMM_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/tuning.h"

namespace ringlab::comm {

// One backend's collectives, behind the Communicator front, which has
// checked every argument against the description, agreed on the call where
// the backend does not, and returns by itself at world size 1. Every rank
// calls with the same arguments (count may be 0, for backends that check
// calls themselves). Failures are CommErrors naming what was waited for.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual void AllReduce(void* data, size_t count, DataType type,
                         ReduceOp op) = 0;
  virtual void Broadcast(void* data, size_t count, DataType type, int root) = 0;
  // send is recv + rank * count (in place) or does not overlap recv.
  virtual void AllGather(const void* send, void* recv, size_t count,
                         DataType type) = 0;
  virtual void Barrier() = 0;
  // Communicator::ReduceScatter's, for a backend whose description says it
  // has one (BackendDescription::reduce_scatter): recv is send + rank *
  // count (in place) or does not overlap send.
  virtual void ReduceScatter(const void* send, void* recv, size_t count,
                             DataType type, ReduceOp op);
  // `bytes` of zeroed memory that the peers reach directly (collective:
  // every rank asks for the same size, in the same order); nullptr for a
  // backend without such memory.
  virtual void* AllocateRegistered(size_t bytes);
  // For backends that do not notice ranks in different calls
  // (BackendDescription::checks_calls false): the elementwise maximum over
  // the ranks of `words` (host memory, in place), on which the front's call
  // agreement runs where the job has no store for its own connections (and
  // on which the ranks agree at creation whether to check calls at all).
  virtual void MaxOverRanks(int64_t* words, size_t count);
  // Whether this rank's data moves only while the rank is inside one of the
  // backend's calls: Open MPI's TCP transport queues what a socket did not
  // take and writes it at the rank's next MPI call, so a call can return on
  // its sender while a peer still waits inside the backend for the rest.
  // The front then calls Progress while it waits for the peers outside the
  // backend (the call check over its own connections); else a rank waiting
  // there for a peer that waits for its data would wait for ever. Gloo's
  // and NCCL's data moves on threads of their own: false.
  virtual bool MovesDataOnlyInsideCalls() const;
  // Moves what this rank's finished calls left queued, without waiting.
  virtual void Progress();
};

// How a backend's ranks come to be: processes started by the job's launcher
// (ours, torchrun-style, Slurm's srun), threads of one process, or mpirun's
// processes.
enum class RankLaunch { kProcesses, kThreads, kMpirun };

struct BackendDescription {
  std::string name;     // "shm_ring"
  std::string summary;  // one line for --help
  MemoryKind memory = MemoryKind::kHost;
  RankLaunch launch = RankLaunch::kProcesses;
  // Whether its ranks may be on several hosts (RankContext::peers); one that
  // cannot refuses such a job at creation, naming the hosts.
  bool spans_hosts = false;
  // Needs the job's store (and so every rank's peer information).
  bool needs_store = true;
  // At most one rank per GPU (nccl).
  bool one_device_per_rank = false;
  std::vector<DataType> types = {DataType::kFloat32};
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kAvg};
  // Whether it notices ranks that disagree on a call (count, op, root,
  // type) by itself, before any data moves. If not, the front agrees on
  // every call, unless comm.check_calls is 0: over its own connections
  // (comm/call_mesh.h) where the job has a store, else through
  // Backend::MaxOverRanks.
  bool checks_calls = true;
  // Whether Backend::ReduceScatter is its own. Where not, the front reduces
  // a copy of the send buffer with AllReduce and keeps this rank's block:
  // the same bits as the backend's allreduce, at an allreduce's bus bytes
  // (twice a reduce-scatter's); host memory only.
  bool reduce_scatter = false;
  // Whether Backend::AllocateRegistered hands out peer-reachable memory.
  bool registers_memory = false;
  // Its tuning settings (comm/tuning.h), validated by the front.
  std::vector<TuningSetting> tuning;

  // What the conformance suite must expect of it that the interface does
  // not say.
  struct Conformance {
    // NCCL's ncclAvg pre-multiplies each input by 1/N and sums the products;
    // the others sum, then divide once by N. Equal when N is a power of two.
    bool avg_premultiplies = false;
    // Survivors of a dead rank fail by themselves, naming it. Under mpirun a
    // dead rank ends the whole job instead (mpirun names it).
    bool survives_peer_death = true;
    // How many join deadlines a death while joining may take to be noticed
    // (Gloo connects its pairs one by one and cannot be interrupted, so each
    // pair's connect may wait out the deadline before the death is seen).
    int join_deadlines_to_notice_death = 1;
    // How many collective deadlines a death after joining may take to be
    // noticed (Gloo's TCP transport does not fail a send still waiting for
    // its receiver to be ready when that receiver's pair breaks).
    int op_deadlines_to_notice_death = 0;
    // The suite also runs its cases with the ranks on this many hosts
    // (RunRanks' host identities), where the world size allows: for a
    // backend that works differently across hosts (hier).
    int suite_hosts = 1;
  } conformance;

  using Factory = std::function<std::unique_ptr<Backend>(
      const RankContext& context, const CommOptions& options)>;
  // Makes this rank's backend, joining the peers. context.store is the
  // communicator's own PrefixStore (when the job has a store), context has
  // passed the description's checks, options.tuning the validation.
  Factory create;

  bool Supports(ReduceOp op) const;
  bool Supports(DataType type) const;
};

// The factory of a backend whose constructor takes (context, options).
template <typename B>
BackendDescription::Factory FactoryOf() {
  return [](const RankContext& context, const CommOptions& options) {
    return std::make_unique<B>(context, options);
  };
}

// Backends register themselves at static-initialisation time (the GPU ones
// only when they are linked into the binary). Returns true; a second
// description of one name is a programming error (std::logic_error).
bool RegisterBackend(BackendDescription description);
// The registered backends' descriptions, by name.
std::vector<const BackendDescription*> RegisteredBackends();
std::vector<std::string> RegisteredBackendNames();
// nullptr for a name nobody registered.
const BackendDescription* FindBackend(const std::string& name);
// The description of `name`; std::invalid_argument listing the known ones
// otherwise, "unknown communicator 'x' (linked into this binary: a, b)".
const BackendDescription& BackendNamed(const std::string& name);

// For --help: a line per registered backend, its name, summary and
// requirements, then its settings with their variables and ranges.
std::string DescribeBackends();

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_BACKEND_H_
