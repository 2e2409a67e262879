// The host half of a job whose ranks are threads of one process
// (ipc_ring_threads, and the CPU twin its tests run): how N threads find each
// other, exchange what each allocated (device pointers instead of IPC
// handles), line up before each collective, and learn that a peer has left.
// It knows nothing of CUDA, so that all of this is tested on machines without
// a GPU.
//
// Joining goes through the job's Store, as every backend's creation does; a
// job whose ranks turn out to be separate processes (the peers gathered at
// its start say so) fails at once, naming them, instead of waiting for peers
// that can never appear in this process. Every wait has a deadline and names
// the ranks it waited for.
#ifndef RINGLAB_COMM_JOB_THREAD_GROUP_H_
#define RINGLAB_COMM_JOB_THREAD_GROUP_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/store/store.h"

namespace ringlab::comm {

class ThreadGroup {
 public:
  // Joins the group that the ranks of one communicator share, through
  // context.store (the communicator's own keys). `backend` prefixes every
  // error. Throws std::invalid_argument for a bad rank or world size, no
  // store or no peer information, and CommError when a rank is in another
  // process, a rank joins twice, ranks disagree on the world size, or a rank
  // has not joined within `timeout` (naming it).
  static std::shared_ptr<ThreadGroup> Join(const RankContext& context,
                                           std::chrono::milliseconds timeout,
                                           const std::string& backend);

  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int world_size() const { return world_size_; }

  // Publishes this rank's value and returns every rank's, in rank order.
  // Throws CommError naming the ranks that did not publish within timeout,
  // or one that left.
  std::vector<std::string> Exchange(int rank, const std::string& mine,
                                    std::chrono::milliseconds timeout);

  // Before each collective: returns once every rank has arrived as many
  // times as this one. `what` names the call in errors ("AllReduce"); when
  // `call` is not empty every rank's must be equal ("AllReduce(count=8,
  // op=sum)"), else CommError("... mismatched collectives: rank 0 is in X but
  // rank 1 is in Y"). Throws CommError when a peer has left or has not
  // arrived within timeout (naming the ranks). Spins (yielding) for the first
  // 2 ms, since ranks usually arrive within microseconds, then sleeps 50 us
  // between looks.
  void Arrive(int rank, const std::string& what, const std::string& call,
              std::chrono::milliseconds timeout);

  // This rank is gone (its communicator is being destroyed): peers waiting
  // in Exchange or Arrive fail at once, naming it, and FirstGone says so.
  void Leave(int rank);
  // The lowest rank other than `except` that has left, or -1.
  int FirstGone(int except = -1) const;
  // Waits until every peer of `rank` has left, so that memory they read can
  // be freed. False at the deadline (the caller should leak rather than
  // free).
  bool WaitForPeersToLeave(int rank, std::chrono::milliseconds timeout);

 private:
  ThreadGroup(int world_size, std::string backend);
  void CheckRank(int rank, const char* what) const;
  std::string Error(const std::string& text) const;

  const int world_size_;
  const std::string backend_;
  std::unique_ptr<std::atomic<uint64_t>[]> arrived_;  // calls entered, per rank
  std::unique_ptr<std::atomic<bool>[]> left_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> joined_;
  std::vector<std::optional<std::string>> values_;  // Exchange
  // Each rank's call text by arrival parity: a peer can be at most one call
  // ahead, so it never overwrites the slot of the call being compared.
  std::vector<std::array<std::string, 2>> calls_;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_THREAD_GROUP_H_
