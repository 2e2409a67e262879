// N persistent threads, one per rank of a threads-mode job, that a benchmark
// drives one step at a time: every Run hands the same job to all ranks at
// once and returns when all are done, so that a rank keeps its communicator,
// stream and buffers in its own thread across benchmark rows (CUDA's current
// device and a communicator's host waits are per thread). Host-only.
#ifndef RINGLAB_BENCH_RANK_THREAD_POOL_H_
#define RINGLAB_BENCH_RANK_THREAD_POOL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ringlab::bench {

class RankThreadPool {
 public:
  // Starts `ranks` idle threads. `timeout` bounds every Barrier (and should
  // bound a job's other waits); a Run waits 2·timeout + 1 s.
  RankThreadPool(int ranks, std::chrono::milliseconds timeout);
  // Joins the threads; when a Run timed out they may be stuck in a job, and
  // are detached instead (the process should then exit).
  ~RankThreadPool();
  RankThreadPool(const RankThreadPool&) = delete;
  RankThreadPool& operator=(const RankThreadPool&) = delete;

  int ranks() const { return ranks_; }

  // Runs job(rank) on every rank's thread at once and returns each rank's
  // result. Throws std::runtime_error naming every rank that threw (with its
  // message), or, at its deadline, how many had not finished (the pool is
  // then unusable).
  std::vector<double> Run(const std::function<double(int rank)>& job);

  // Inside a job: returns once every rank has called it as often as this
  // one (spinning, then yielding: for timing, all ranks start together).
  // Throws std::runtime_error at the deadline, naming the absent ranks.
  void Barrier(int rank);

 private:
  void Work(int rank);

  const int ranks_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t generation_ = 0;  // of the job last handed out
  const std::function<double(int)>* job_ = nullptr;
  std::vector<double> results_;
  std::vector<std::string> errors_;
  int done_ = 0;
  bool stopping_ = false;
  bool stuck_ = false;
  std::unique_ptr<std::atomic<uint64_t>[]> barrier_;  // calls per rank
  std::vector<std::thread> threads_;
};

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_RANK_THREAD_POOL_H_
