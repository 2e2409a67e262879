// ringlab as a torch.distributed backend: a c10d::ProcessGroup whose
// collectives run over a ringlab Communicator (comm/communicator.h), so that
// PyTorch's own DDP and its communication hooks run over ringlab's
// collectives. What DDP and its hooks use is here: allreduce (sum, avg;
// float32, float16, bfloat16), broadcast, allgather and barrier, each
// returning at once with a Work whose future completes on the group's
// communication thread, in the order the calls were made (every rank makes
// them in one order, so the collectives meet), as ProcessGroupGloo's do.
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
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::torch_backend {

// Where a collective's future completes and its callbacks run. Not on the
// communication thread: a callback may wait for a later collective (1.13's
// PowerSGD hook waits for its P and Q allreduces inside its callbacks), which
// only that thread can run. One thread, so callbacks run in completion
// order, and another whenever every thread is busy in a callback that waits.
class CallbackThreads {
 public:
  CallbackThreads() = default;
  ~CallbackThreads();  // runs what was posted, then joins
  CallbackThreads(const CallbackThreads&) = delete;
  CallbackThreads& operator=(const CallbackThreads&) = delete;
  void Post(std::function<void()> task);

 private:
  void ThreadMain();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stop_ = false;
};

class ProcessGroupRinglab : public c10d::ProcessGroup {
 public:
  // Joins the group's ranks through `store` and creates the communicator;
  // throws c10::Error (RuntimeError in Python) when that fails by timeout.
  ProcessGroupRinglab(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                      int size, std::chrono::milliseconds timeout);
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
  struct Job {
    c10::intrusive_ptr<RingWork> work;
    std::function<void()> run;
  };
  // Queues `run` for the communication thread; its Work completes with
  // `outputs` once it has run (or with its failure).
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type,
                                         std::vector<at::Tensor> outputs,
                                         std::function<void()> run);
  void ThreadMain();

  std::unique_ptr<comm::Store> store_;  // torch's, as ringlab's
  comm::RankContext context_;
  std::string backend_;
  std::unique_ptr<comm::Communicator> comm_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> queue_;
  bool stop_ = false;
  // Declared before thread_: outlives the communication thread that posts.
  CallbackThreads callbacks_;
  std::thread thread_;
};

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_PROCESS_GROUP_H_
