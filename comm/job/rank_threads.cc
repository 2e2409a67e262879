#include "comm/job/rank_threads.h"

#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "comm/job/job_environment.h"
#include "comm/store/local_store.h"

namespace ringlab::comm {
namespace {

// Shared with the rank threads, which may outlive RunRankThreads when stuck.
struct State {
  explicit State(int world) : done(world, false), errors(world) {}
  LocalStore store;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<bool> done;
  std::vector<std::string> errors;
  bool failed = false;
};

}  // namespace

bool RankThreadsResult::ok() const {
  if (!stuck.empty()) return false;
  for (const std::string& e : errors) {
    if (!e.empty()) return false;
  }
  return true;
}

std::string RankThreadsResult::Describe() const {
  std::string text;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) {
      text += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
    }
  }
  for (int r : stuck) {
    text += "rank " + std::to_string(r) +
            ": still running after another rank failed\n";
  }
  return text;
}

RankContext RankThreadContext(int rank, int world_size, Store* store) {
  RankContext context;
  context.rank = rank;
  context.world_size = world_size;
  context.local_rank = rank;
  context.store = store;
  context.peers.assign(world_size, ThisPeer("127.0.0.1"));
  return context;
}

void PrepareProcessForRankThreads() {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
}

RankThreadsResult RunRankThreads(
    int world_size, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds grace) {
  if (world_size < 1) {
    throw std::invalid_argument("RunRankThreads: world_size " +
                                std::to_string(world_size) + " < 1");
  }
  auto state = std::make_shared<State>(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([state, r, world_size, &body] {
      const RankContext context =
          RankThreadContext(r, world_size, &state->store);
      std::string error;
      try {
        body(context);
      } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = "exception with an empty message";
      } catch (...) {
        error = "unknown exception";
      }
      std::lock_guard<std::mutex> lock(state->mutex);
      state->done[r] = true;
      state->errors[r] = error;
      state->failed = state->failed || !error.empty();
      state->changed.notify_all();
    });
  }
  RankThreadsResult result;
  {
    std::unique_lock<std::mutex> lock(state->mutex);
    auto all_done = [&] {
      for (bool d : state->done) {
        if (!d) return false;
      }
      return true;
    };
    // No deadline while every rank is healthy (a job runs as long as it
    // runs; each rank's own waits are bounded); `grace` once one failed.
    state->changed.wait(lock, [&] { return all_done() || state->failed; });
    state->changed.wait_for(lock, grace, all_done);
    result.errors = state->errors;
    for (int r = 0; r < world_size; ++r) {
      if (!state->done[r]) result.stuck.push_back(r);
    }
  }
  for (int r = 0; r < world_size; ++r) {
    bool done;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      done = state->done[r];
    }
    if (done) {
      threads[r].join();
    } else {
      threads[r].detach();
    }
  }
  return result;
}

}  // namespace ringlab::comm
