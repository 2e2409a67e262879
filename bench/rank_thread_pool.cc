#include "bench/rank_thread_pool.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>

namespace ringlab::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::string Seconds(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", d.count() / 1000.0);
  return text;
}

}  // namespace

RankThreadPool::RankThreadPool(int ranks, std::chrono::milliseconds timeout)
    : ranks_(ranks),
      timeout_(timeout),
      results_(std::max(ranks, 0)),
      errors_(std::max(ranks, 0)),
      barrier_(new std::atomic<uint64_t>[std::max(ranks, 1)]) {
  if (ranks < 1) {
    throw std::invalid_argument("RankThreadPool: ranks " +
                                std::to_string(ranks) + " < 1");
  }
  for (int r = 0; r < ranks; ++r) barrier_[r].store(0);
  for (int r = 0; r < ranks; ++r) threads_.emplace_back([this, r] { Work(r); });
}

RankThreadPool::~RankThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : threads_) {
    if (stuck_) {
      t.detach();
    } else {
      t.join();
    }
  }
}

void RankThreadPool::Work(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<double(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    double result = 0;
    std::string error;
    try {
      result = (*job)(rank);
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "exception with an empty message";
    } catch (...) {
      error = "unknown exception";
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      results_[rank] = result;
      errors_[rank] = error;
      ++done_;
    }
    changed_.notify_all();
  }
}

std::vector<double> RankThreadPool::Run(
    const std::function<double(int rank)>& job) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stuck_) {
    throw std::runtime_error(
        "RankThreadPool: an earlier job never finished; the pool is unusable");
  }
  job_ = &job;
  done_ = 0;
  ++generation_;
  changed_.notify_all();
  // A job's own waits (Barrier, a communicator's) end by `timeout`: give
  // them time to fail by themselves, naming what they waited for.
  const auto limit = 2 * timeout_ + std::chrono::seconds(1);
  if (!changed_.wait_for(lock, limit, [&] { return done_ == ranks_; })) {
    // The job may still run on a thread and refer to `job`: never return to
    // a caller that would destroy it while the pool can be used again.
    stuck_ = true;
    throw std::runtime_error(
        "RankThreadPool: " + std::to_string(ranks_ - done_) + " of " +
        std::to_string(ranks_) + " rank(s) did not finish a job within " +
        Seconds(std::chrono::duration_cast<std::chrono::milliseconds>(limit)) +
        " s");
  }
  std::string failed;
  for (int r = 0; r < ranks_; ++r) {
    if (!errors_[r].empty()) {
      failed += (failed.empty() ? "" : "; ") + std::string("rank ") +
                std::to_string(r) + ": " + errors_[r];
    }
  }
  if (!failed.empty()) throw std::runtime_error(failed);
  return results_;
}

void RankThreadPool::Barrier(int rank) {
  const uint64_t mine = barrier_[rank].load(std::memory_order_relaxed) + 1;
  barrier_[rank].store(mine, std::memory_order_release);
  const auto start = Clock::now();
  for (int q = 0; q < ranks_; ++q) {
    for (uint32_t spins = 0; barrier_[q].load(std::memory_order_acquire) < mine;
         ++spins) {
      if ((spins & 1023) != 0) continue;
      if (Clock::now() - start > timeout_) {
        std::string absent;
        for (int p = 0; p < ranks_; ++p) {
          if (barrier_[p].load(std::memory_order_acquire) < mine) {
            absent += (absent.empty() ? "" : ", ") + std::to_string(p);
          }
        }
        throw std::runtime_error("RankThreadPool: barrier timed out after " +
                                 Seconds(timeout_) + " s waiting for rank(s) " +
                                 absent);
      }
      std::this_thread::yield();
    }
  }
}

}  // namespace ringlab::bench
