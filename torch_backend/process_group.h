// ringlab as a torch.distributed backend: a c10d::ProcessGroup whose
// collectives run over a ringlab Communicator (comm/communicator.h), with
// every collective ProcessGroupGloo has, so that PyTorch's DDP, its
// communication hooks and a user's own script run over ringlab. Each call
// returns at once with a Work. The collectives run on the group's channels,
// each a communicator with a communication thread of its own, taken in turn
// in the order the calls were made (every rank makes them in one order, so
// the k-th call meets on the same channel everywhere), as ProcessGroupGloo
// runs its queue on two threads over one context. Across hosts two channels
// let a bucket's call check and data move while the bucket before it still
// crosses the link; on one host one channel does (shared memory is not
// latency-bound, and the ranks' two cores are busy computing); rank 0's
// count holds for the group. Calls whose sizes the ranks learn only inside
// the call (alltoall with split sizes, sparse allreduce) run on a channel of
// their own that announces nothing ahead. A barrier waits for every earlier
// call. The Works complete in call order, their futures on other threads
// (task_threads.h).
//
// Sums and averages of float32, float16 and bfloat16 run on the
// communicator's own reduction; every other reduction the communicator
// lacks (integer sums, which DDP's find_unused_parameters makes, products,
// bitwise ops) gathers every rank's tensor and reduces the rows in rank
// order, the same on every rank. reduce, alltoall and the coalesced calls
// are built here, once, on the communicator's allreduce, broadcast and
// allgather, gather and scatter on a check of the ranks' calls and then
// direct messages between the root and each rank (mailbox.h), which move
// only what each rank needs; where the communicator sees only bytes, each
// rank's row carries the call as torch described it (torch_call.h), so that
// ranks that disagree on the op, the element type or the size all refuse.
// send and recv go over connections of their own between every pair of ranks
// (mailbox.h).
//
// The ranks meet through torch's own store (the one init_process_group
// made), which gathers every rank's peer information once. The backend
// follows from where the ranks are: shm_ring when they share a host, gloo
// across hosts. torch's store admits anyone who reaches it, so the job's
// secret (comm/store/job_secret.h) drawn by rank 0 travels through it: this
// group is as private as torch's store is, no more.
#ifndef RINGLAB_TORCH_BACKEND_PROCESS_GROUP_H_
#define RINGLAB_TORCH_BACKEND_PROCESS_GROUP_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "comm/call_agreement.h"
#include "comm/communicator.h"
#include "torch_backend/mailbox.h"
#include "torch_backend/task_threads.h"
#include "torch_backend/torch_call.h"
#include "torch_backend/torch_store.h"

namespace ringlab::torch_backend {

// RINGLAB_TORCH_STAGING=1: allreduces copy through registered memory instead
// of the backend's private path (docs/pytorch-backend.md: what it measured);
// 0 or unset: they do not. Anything else is refused.
inline constexpr char kStagingVariable[] = "RINGLAB_TORCH_STAGING";
// RINGLAB_TORCH_CHANNELS=N: the number of channels (1 to 8) in place of the
// default (2 across hosts, 1 on one host), to measure what they change.
inline constexpr char kChannelsVariable[] = "RINGLAB_TORCH_CHANNELS";

class ProcessGroupRinglab : public c10d::ProcessGroup {
 public:
  // Joins the group's ranks through `store` and creates the communicator;
  // throws c10::Error (RuntimeError in Python) when that fails by timeout.
  // Argument errors of the collectives are RuntimeErrors too, as gloo's.
  ProcessGroupRinglab(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                      int size, std::chrono::milliseconds timeout);
  // Runs the collectives already queued (the peers run them too; each ends
  // by its deadline), completes their futures, then joins the threads. May
  // run on a callback thread (a callback that held the last reference).
  ~ProcessGroupRinglab() override;

  const std::string getBackendName() const override { return "ringlab"; }
  // The ringlab backend the collectives run on ("shm_ring", "gloo").
  const std::string& communicator() const { return backend_; }
  int channels() const { return static_cast<int>(channels_.size()); }
  // A communicator of its own over the group's ranks, for collectives run
  // beside the group's channels (ringlab_torch.Synchronizer's). Collective:
  // every rank calls it at the same point of its calls; throws
  // std::exception when joining fails by the group's timeout.
  std::unique_ptr<comm::Communicator> CreateCommunicator();

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  // Built on the ones above (process_group_collectives.cc).
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts =
          c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  // Point to point, through the mailbox.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

 private:
  class RingWork;
  // A communicator, the thread its collectives run on, in order, and its
  // registered staging buffer (grown to the largest tensor seen: every rank
  // sees the same calls on a channel, so the collective Allocate meets).
  struct Channel {
    std::unique_ptr<comm::Communicator> comm;
    float* staged = nullptr;
    size_t staged_bytes = 0;
    TaskThreads thread{TaskThreads::Threads::kOne};
  };
  using Task = std::function<void(Channel&)>;
  using Completion = std::function<void()>;
  // The one communicator call a task makes, announced as it is queued
  // (Communicator::Announce): the ranks' checks of it then cross while the
  // channel still runs earlier calls.
  struct RingCall {
    comm::CallKind kind;
    size_t count = 0;
    comm::DataType type = comm::DataType::kFloat32;
    comm::ReduceOp op = comm::ReduceOp::kSum;
    int root = 0;
  };
  // Where a call runs: on the next channel in turn, there once every
  // earlier call's Work has completed (a barrier), or on the channel
  // whose calls are not announced: alltoall's and the sparse allreduce's
  // (their sizes are learnt inside), gather's and scatter's (direct
  // messages on rooted_mail_, which only that channel's thread uses).
  enum class Turn { kNext, kAfterAll, kSizesInside };
  // Queues `run`, which makes `calls` in order, for a channel's thread; its
  // Work completes with `outputs` once it has run (or with its failure, as
  // torch users read failures: AsTorchSees).
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type,
                                         std::vector<at::Tensor> outputs,
                                         const std::vector<RingCall>& calls,
                                         Task run, Turn turn = Turn::kNext);
  // The channels taken in turn, then the kSizesInside one.
  std::vector<Channel*> AllChannels();
  // A send's or receive's Work: `run` on `thread`, its future completed on
  // a callback thread; `run` returns the rank the data came from.
  c10::intrusive_ptr<c10d::Work> EnqueuePointToPoint(
      c10d::OpType type, std::vector<at::Tensor> outputs, TaskThreads& thread,
      std::function<int()> run);
  // The call GatherChecked makes for `bytes` bytes of data, and the one
  // BroadcastBytes makes.
  static RingCall GatherCall(size_t bytes);
  static RingCall BroadcastCall(size_t bytes, int root);
  // Hands call `call`'s completion to the callback threads once every
  // earlier call's has been: Works complete in call order whichever channel
  // finished first, as over one channel, so collectives that callbacks issue
  // (PowerSGD's) are issued in one order on every rank.
  void CompleteInOrder(uint64_t call, Completion completion);
  // Every rank's `bytes` bytes at `data` as the rows of a [size, bytes]
  // uint8 tensor, once every rank's `call` was found equal (else a
  // RuntimeError on every rank, naming both sides).
  at::Tensor GatherChecked(comm::Communicator& comm, const TorchCall& call,
                           const void* data, size_t bytes);
  // Root's `bytes` bytes at `data` into every rank's, in float32 words.
  void BroadcastBytes(comm::Communicator& comm, void* data, size_t bytes,
                      int root);
  // Every rank's bytes (lengths may differ), `call` checked as above; on
  // the kSizesInside channel only.
  std::vector<std::string> GatherVariable(comm::Communicator& comm,
                                          const TorchCall& call,
                                          const std::string& mine);
  // A reduction the communicator lacks, of `t` in place, by `call`'s op
  // (through GatherChecked, on a communication thread).
  void GatheredAllReduce(comm::Communicator& comm, const at::Tensor& t,
                         const TorchCall& call);
  // The Work of an allreduce of `t` in place, then `after` (may be empty):
  // on the communicator's reduction where it has the type and op, else
  // gathered.
  c10::intrusive_ptr<c10d::Work> AllReduceInto(c10d::OpType type,
                                               std::vector<at::Tensor> outputs,
                                               const at::Tensor& t,
                                               c10d::ReduceOp op,
                                               std::function<void()> after);
  // The sparse allreduce, as gloo's: every rank's indices and values
  // gathered and summed.
  c10::intrusive_ptr<c10d::Work> SparseAllReduce(const at::Tensor& t,
                                                 c10d::ReduceOp op);
  // alltoall and alltoall_base, on their parts (which may differ in size).
  c10::intrusive_ptr<c10d::Work> AllToAll(c10d::OpType type,
                                          std::vector<at::Tensor> outputs,
                                          std::vector<at::Tensor> inputs);
  // The parts of `t` along its first dimension, `splits` rows each (equal
  // parts where empty); a RuntimeError where they do not add up.
  std::vector<at::Tensor> SplitRows(const at::Tensor& t,
                                    const std::vector<int64_t>& splits);
  // Every rank's `call`, by rank, each rank's sent to every other over
  // rooted_mail_ (one message each way, no collective): what gather and
  // scatter check before their data moves directly.
  std::vector<TorchCall> ExchangeCalls(const TorchCall& call);
  // A receive into `t` from `src` (Mailbox::kAnyRank: any) under `tag`.
  c10::intrusive_ptr<c10d::Work> Receive(c10d::OpType type, const at::Tensor& t,
                                         int src, int tag);
  // A barrier with a timeout other than the group's, through the store.
  void StoreBarrier(uint64_t number, std::chrono::milliseconds timeout);
  // The allreduce of `t` copied through the channel's registered memory,
  // where staging is on.
  void StagedAllReduce(Channel& channel, const at::Tensor& t,
                       comm::DataType type, comm::ReduceOp op);

  std::unique_ptr<TorchStore> store_;  // torch's, as ringlab's
  comm::RankContext context_;
  comm::CommOptions options_;
  std::string backend_;
  bool staging_ = false;  // kStagingVariable, where the backend registers
  // Declared first: outlives the communication threads that post to it.
  TaskThreads callbacks_{TaskThreads::Threads::kGrow};
  std::mutex enqueue_;  // the order of the calls, the turn of the channels
  uint64_t next_call_ = 0;
  bool stopping_ = false;  // the destructor has begun: no new calls
  std::mutex completing_;
  uint64_t next_completion_ = 0;
  std::map<uint64_t, Completion> finished_early_;  // by call, out of turn
  std::vector<std::unique_ptr<Channel>> channels_;
  std::unique_ptr<Channel> sizes_inside_;  // Turn::kSizesInside's
  // The calls whose Works have not completed (a prefix may have), in order.
  std::deque<std::shared_future<void>> unfinished_;
  uint64_t barriers_ = 0;  // barriers with a timeout of their own, by store
  std::unique_ptr<Mailbox> mailbox_;  // send and recv's
  // gather's and scatter's, used on the kSizesInside channel's thread only.
  std::unique_ptr<Mailbox> rooted_mail_;
  TaskThreads sends_{TaskThreads::Threads::kOne};
  TaskThreads receives_{TaskThreads::Threads::kOne};
};

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_PROCESS_GROUP_H_
