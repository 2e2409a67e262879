#include "torch_backend/task_threads.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ringlab::torch_backend {

struct TaskThreads::State {
  explicit State(Threads threads) : threads(threads) {}
  const Threads threads;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> tasks;
  std::vector<std::thread> running;
  int idle = 0;
  bool stop = false;
};

TaskThreads::TaskThreads(Threads threads)
    : state_(std::make_shared<State>(threads)) {}

TaskThreads::~TaskThreads() { Stop(); }

bool TaskThreads::Post(std::function<void()> task) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.stop) return false;
  s.tasks.push_back(std::move(task));
  // A thread already woken for an earlier task still counts as idle.
  const bool start = s.threads == Threads::kGrow
                         ? s.tasks.size() > static_cast<size_t>(s.idle)
                         : s.running.empty();
  if (start) {
    s.running.emplace_back([state = state_] { ThreadMain(state); });
  } else {
    s.changed.notify_one();
  }
  return true;
}

void TaskThreads::Stop() {
  std::vector<std::thread> running;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
    running.swap(state_->running);
  }
  state_->changed.notify_all();
  for (std::thread& t : running) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // its task is this call: it ends once that returns
    } else {
      t.join();
    }
  }
}

void TaskThreads::ThreadMain(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock<std::mutex> lock(s.mutex);
  while (true) {
    ++s.idle;
    s.changed.wait(lock, [&s] { return s.stop || !s.tasks.empty(); });
    --s.idle;
    if (s.tasks.empty()) return;  // stopped, nothing left
    std::function<void()> task = std::move(s.tasks.front());
    s.tasks.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // what it holds goes here, not under the lock
    lock.lock();
  }
}

}  // namespace ringlab::torch_backend
