// ringlab as a torch.distributed backend: a c10d::ProcessGroup whose
// collectives run over a ringlab Communicator (comm/communicator.h), so that
// PyTorch's own DDP and its communication hooks run over ringlab's
// collectives. What DDP and its hooks use is here: allreduce, broadcast,
// allgather and barrier, each returning at once with a Work; the collectives
// run on the group's communication thread in the order the calls were made
// (every rank makes them in one order, so they meet), as ProcessGroupGloo's
// do, and the Works' futures complete on other threads (task_threads.h).
// Sums and averages of float32, float16 and bfloat16 run on the
// communicator's own reduction; every other reduction the communicator
// lacks (integer sums, which DDP's find_unused_parameters makes, products,
// bitwise ops) gathers every rank's tensor and reduces the rows in rank
// order, the same on every rank.
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
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "comm/communicator.h"
#include "torch_backend/task_threads.h"

namespace ringlab::torch_backend {

// RINGLAB_TORCH_STAGING=1: allreduces copy through registered memory instead
// of the backend's private path (README: what it measured).
inline constexpr char kStagingVariable[] = "RINGLAB_TORCH_STAGING";

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

 private:
  class RingWork;
  // Queues `run` for the communication thread; its Work completes with
  // `outputs` once it has run (or with its failure).
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type,
                                         std::vector<at::Tensor> outputs,
                                         std::function<void()> run);
  // Every rank's `bytes` bytes at `data`, as the rows of a [size, padded]
  // uint8 tensor (padded to whole words of what the communicator moves).
  at::Tensor GatherBytes(const void* data, size_t bytes);
  // A reduction the communicator lacks, through GatherBytes (on the
  // communication thread).
  void GatheredAllReduce(const at::Tensor& t, c10d::ReduceOp op);
  // The allreduce of `t` copied through the communicator's registered
  // memory (grown to the largest tensor seen: every rank sees the same
  // calls, so the collective Allocate meets), where staging is on.
  void StagedAllReduce(const at::Tensor& t, comm::DataType type,
                       comm::ReduceOp op);

  std::unique_ptr<comm::Store> store_;  // torch's, as ringlab's
  comm::RankContext context_;
  std::string backend_;
  std::unique_ptr<comm::Communicator> comm_;
  bool staging_ = false;  // kStagingVariable, where the backend registers
  float* staged_ = nullptr;
  size_t staged_bytes_ = 0;
  // Declared first: outlives the communication thread that posts to it.
  TaskThreads callbacks_{TaskThreads::Threads::kGrow};
  TaskThreads communication_{TaskThreads::Threads::kOne};
};

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_PROCESS_GROUP_H_
