// The collective-communication front every caller uses, as PyTorch's
// ProcessGroup is over its Backends: one non-virtual Communicator per rank,
// over the backend a name chose (shm_ring, gloo, mpi, nccl, ipc_ring, ...;
// comm/backend.h). What every backend would otherwise repeat lives here,
// once: the argument checks (count, op, element type, root, pointers and
// their alignment), the agreement of the ranks on each call for backends
// that cannot notice a mismatch themselves, the bus-byte accounting, the
// state after a failure, and the wording of these errors. A backend only
// moves data. comm knows nothing of neural networks: it moves and reduces
// buffers of numbers, in host or device memory as memory() says.
#ifndef RINGLAB_COMM_COMMUNICATOR_H_
#define RINGLAB_COMM_COMMUNICATOR_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/dtype/dtype.h"
#include "comm/peers.h"
#include "comm/tuning.h"

namespace ringlab::comm {

class Backend;
struct BackendDescription;
class CallMesh;
struct CallDescription;
class Store;
enum class CallKind : int64_t;

enum class ReduceOp { kSum, kAvg, kMax, kMin };
enum class MemoryKind { kHost, kDevice };

const char* ReduceOpName(ReduceOp op);

// Every failure of a collective (a peer that died or timed out, calls that
// disagree across ranks, a system call that failed, an op or element type
// the backend does not have) is reported as a CommError whose message names
// what was waited for, e.g.
// "shm_ring: rank 1 exited during AllReduce (step 2 of reduce-scatter)".
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// nccl-tests' bus bytes of a buffer of `bytes`: 2(N-1)/N of it for an
// allreduce, all of it for a broadcast, (N-1)/N of the gathered buffer (N
// blocks of `bytes`) for an allgather; nothing moves at world size 1.
uint64_t AllReduceBusBytes(uint64_t bytes, int world_size);
uint64_t BroadcastBusBytes(uint64_t bytes, int world_size);
uint64_t AllGatherBusBytes(uint64_t bytes, int world_size);
// A reduce-scatter's, of N blocks of `bytes` into one: (N-1)/N of the N
// blocks, as an allgather of `bytes` moves.
uint64_t ReduceScatterBusBytes(uint64_t bytes, int world_size);

struct CommOptions {
  // Every wait of a collective ends by this deadline with a CommError.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Creation, where ranks find and map each other, has its own deadline: a
  // short one for collectives must not also bound a slow start.
  std::chrono::milliseconds join_timeout{std::chrono::seconds(60)};
  // CUDA device for GPU backends (usually LOCAL_RANK); -1: LOCAL_RANK mod the
  // device count.
  int cuda_device = -1;
  // The settings of the front (comm.*) and of the backends (comm/tuning.h),
  // validated by CreateCommunicator; binaries fill them from RINGLAB_*
  // variables with comm/tuning_env.h.
  BackendTuning tuning;
  // The parts of the hierarchical backend (hier): the backend among the
  // ranks of one host and the one between hosts, by name.
  std::string intra_host = "shm_ring";
  std::string inter_host = "gloo";
};

// Everything a backend needs to find its peers: made by the job's rendezvous
// (comm/job/rendezvous.h), the rank-threads runner or a test's.
struct RankContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  // The job's store; null for backends that bring their own (mpi under
  // mpirun without MASTER_PORT). A communicator's backend is given a
  // PrefixStore of its own over it.
  Store* store = nullptr;
  // The job's secret (raw bytes, at least 16; see comm/store/job_secret.h):
  // what the store demanded of every rank's connection, known only to the
  // job's processes. A backend that must recognise something of its own job
  // through a channel strangers could write (a segment name in the store, a
  // file in /dev/shm) tags it with JobTag(job_secret, purpose), which nobody
  // without the secret can forge. Empty only where there is no store.
  std::string job_secret;
  // Every rank's host, process and address, indexed by rank, gathered once
  // when the job started (comm/peers.h); empty where there is no store.
  std::vector<PeerInfo> peers;
};

class Communicator final {
 public:
  // A communicator over `backend` for `rank` of `world_size` (what
  // CreateCommunicator makes; tests give a backend of their own).
  Communicator(std::unique_ptr<Backend> backend,
               const BackendDescription& description, int rank, int world_size,
               const BackendTuning& tuning = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const char* backend() const;  // "shm_ring", "mpi", ...
  const BackendDescription& description() const { return description_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // Where the pointers given to the collectives must point.
  MemoryKind memory() const;

  // In place; count may be 0. Every rank must call with the same count, type
  // and op. Throws std::invalid_argument for null data with a positive
  // count, a pointer not aligned to its type or a count whose bytes do not
  // fit in memory; CommError for an op or type the backend does not have,
  // calls that disagree across ranks, or a failure.
  void AllReduce(void* data, size_t count, DataType type, ReduceOp op);
  void AllReduce(float* data, size_t count, ReduceOp op) {
    AllReduce(data, count, DataType::kFloat32, op);
  }
  // Root's buffer into every rank's; std::invalid_argument for a root
  // outside [0, world_size).
  void Broadcast(void* data, size_t count, DataType type, int root);
  void Broadcast(float* data, size_t count, int root) {
    Broadcast(data, count, DataType::kFloat32, root);
  }
  // NCCL's allgather: every rank contributes count elements from send, and
  // recv (world_size() * count elements) receives rank r's at r * count on
  // every rank. send may be recv + rank() * count (in place); otherwise the
  // two must not overlap.
  void AllGather(const void* send, void* recv, size_t count, DataType type);
  void AllGather(const float* send, float* recv, size_t count) {
    AllGather(send, recv, count, DataType::kFloat32);
  }
  // NCCL's reduce-scatter: send holds world_size() * count elements, and
  // recv (count elements) receives block rank() of their reduction over the
  // ranks by `op`: what AllReduce of send leaves in that block, up to the
  // order in which a backend's own reduce-scatter adds the ranks' elements
  // (exact inputs give the same bits). recv may be send + rank() * count (in
  // place); otherwise the two must not overlap. Errors as AllReduce's and
  // AllGather's.
  void ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                     ReduceOp op);
  void Barrier();

  // Starts the ranks' agreement on the next call this rank will make (after
  // those already made or announced), from any thread: a thread that hands
  // calls to a communication thread announces each as it hands it over, so
  // that the ranks' descriptions cross while earlier calls still run, and
  // the call, when it runs, only reads the peers'. Every rank announces the
  // same calls; each must then be made with the arguments announced (else a
  // CommError, which leaves the ranks in step). A no-op where the front does
  // not check calls over its own connections (comm/call_mesh.h: backends that
  // check calls themselves, jobs without a store, one rank,
  // comm.check_calls=0). For the enumerators of `kind`, comm/call_agreement.h.
  void Announce(CallKind kind, size_t count, DataType type,
                ReduceOp op = ReduceOp::kSum, int root = 0);

  // Bus bytes of every collective this rank completed since creation, as
  // nccl-tests counts them (AllReduceBusBytes, ...): what each rank moves in
  // a bandwidth-optimal algorithm, whatever algorithm the backend chose, so
  // reports compare across backends.
  // Read safely from any thread (a synchroniser may reduce on its own).
  uint64_t bytes_sent() const { return bytes_sent_.load(); }

  // Memory for count floats that the peers can reach directly (the idea of
  // NCCL's user-buffer registration and PyTorch's symmetric memory): a
  // collective on a range inside it copies nothing in or out. Collective:
  // every rank calls it with the same count, in the same order. Zeroed,
  // valid until the communicator is destroyed. Backends without such memory
  // hand out ordinary host memory (device backends: a CommError).
  float* Allocate(size_t count);

  // For a backend built on communicators (hier), which must answer for its
  // parts: whether this one's data moves only inside its calls, and moving
  // what its finished calls left queued (Backend::MovesDataOnlyInsideCalls).
  bool MovesDataOnlyInsideCalls() const;
  void Progress();

 private:
  friend std::unique_ptr<Communicator> CreateCommunicator(
      const std::string& name, const RankContext& context,
      const CommOptions& options);
  friend std::unique_ptr<Communicator> CreateGroupCommunicator(
      const std::string& name, const RankContext& job,
      const std::vector<int>& members, const CommOptions& options);

  // Agrees on the call where the backend cannot, runs `move` and counts its
  // bytes; a failure of the backend leaves the communicator broken.
  template <typename Move>
  void Run(CallKind kind, size_t count, DataType type, ReduceOp op, int root,
           uint64_t bus_bytes, Move move);
  // Runs fn, turning its failure into the communicator's end.
  template <typename Fn>
  void Guard(Fn fn);
  // The call's number into call.seq, and into words the elementwise maximum
  // over the ranks of its agreement words (call_agreement.h): through the
  // mesh where there is one (reading the peers' words of an announced
  // call), else through the backend. Returns the error of a call made
  // otherwise than announced (the ranks still in step), else "".
  std::string Agree(CallDescription& call, int64_t* words);
  void CheckUsable(const char* what) const;
  // The element type (supported: else CommError) and the buffer it is in
  // (std::invalid_argument for null data, misalignment, an impossible size).
  void CheckBuffer(DataType type, const void* data, size_t count,
                   const char* what) const;
  // An allgather's or reduce-scatter's buffers: `block` (count elements)
  // and `blocks` (world_size * count) checked as CheckBuffer does, and not
  // overlapping unless `block` is this rank's block of `blocks`.
  void CheckBlocks(const void* block, const void* blocks, size_t count,
                   DataType type, bool send_is_block, const char* what) const;
  const std::string& Name() const;

  // A group's keys in the job's store (CreateGroupCommunicator), then the
  // communicator's own in those (the backend's store); declared first, so
  // that they outlive the backend.
  std::unique_ptr<Store> group_store_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Backend> backend_;
  const BackendDescription& description_;
  const int rank_, world_size_;
  bool agree_ =
      false;  // the front checks calls (description, comm.check_calls)
  // The calls' own connections (null: the agreement runs on the backend).
  std::unique_ptr<CallMesh> mesh_;
  struct Announcement {
    std::vector<int64_t> words;  // EncodeForAgreement's, as posted
    std::string failure;         // the post's, for the call to report
  };
  std::mutex agreement_;  // calls_, announced_ and announcements_, the posts
  int64_t calls_ = 0;
  int64_t announced_ = 0;  // the number of the last call announced
  std::deque<Announcement> announcements_;  // announced, not yet run
  std::atomic<uint64_t> bytes_sent_{0};
  std::string broken_;  // the failure that ended this communicator
  std::vector<std::unique_ptr<float[]>> allocations_;
};

// The communicator of backend `name` for this rank. The factory of the
// backend named (comm/backend.h) builds it over a PrefixStore of its own
// (this rank's k-th communicator on the store meets the other ranks' k-th).
// Throws std::invalid_argument for an unknown name (listing the known
// ones), a context the backend cannot use (no store, ranks on several hosts
// for a one-host backend, no CUDA device where one is needed) or tuning
// outside its ranges, before anything is joined; CommError when the backend
// cannot start.
std::unique_ptr<Communicator> CreateCommunicator(const std::string& name,
                                                 const RankContext& context,
                                                 const CommOptions& options);

// The context of a group of the job's ranks, as torch.distributed.new_group
// makes one: `members` are job ranks in the order of their group ranks, this
// rank among them; rank, world size and peers are the group's, local_rank the
// job's (by which a GPU backend picks its device: a rank's stays its own, as
// in torch's groups). Its store is `store`.
RankContext GroupContext(const RankContext& job,
                         const std::vector<int>& members, Store* store);

// A communicator of backend `name` among `members` (every member calls it
// with the same list; several groups may be made at once, each rank making
// its own). Its keys lie under a prefix named by the members, so that groups
// of different members never meet. Throws std::invalid_argument for members
// out of range, repeated, or without this rank, then as CreateCommunicator.
std::unique_ptr<Communicator> CreateGroupCommunicator(
    const std::string& name, const RankContext& job,
    const std::vector<int>& members, const CommOptions& options);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_COMMUNICATOR_H_
