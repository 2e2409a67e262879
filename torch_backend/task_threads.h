// The threads of ringlab's torch.distributed backend: a queue of tasks and
// the threads that run them, in the order they were posted. The process
// group has a communication thread per channel (one thread, so a channel's
// collectives run in the order the caller issued them, which every rank
// shares) and the threads its Works' futures complete on, which grow when every
// thread is busy in a callback that waits for a later collective (1.13's
// PowerSGD hook does). What the threads touch lives in state they share, so
// that an owner destroyed from one of its own tasks (a callback that dropped
// the last reference to the group) leaves that thread to finish safely.
#ifndef RINGLAB_TORCH_BACKEND_TASK_THREADS_H_
#define RINGLAB_TORCH_BACKEND_TASK_THREADS_H_

#include <functional>
#include <memory>

namespace ringlab::torch_backend {

class TaskThreads {
 public:
  enum class Threads {
    kOne,   // one thread, tasks one at a time
    kGrow,  // another thread whenever the tasks outnumber the idle ones
  };
  explicit TaskThreads(Threads threads);
  ~TaskThreads();  // Stop()
  TaskThreads(const TaskThreads&) = delete;
  TaskThreads& operator=(const TaskThreads&) = delete;

  // Queues `task`; false (the task dropped) once Stop has begun. Tasks
  // report their own failures.
  bool Post(std::function<void()> task);
  // Refuses further tasks, runs every queued one, and joins the threads;
  // called from one of them, it leaves that one to end by itself.
  void Stop();

 private:
  struct State;
  static void ThreadMain(const std::shared_ptr<State>& state);
  std::shared_ptr<State> state_;
};

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_TASK_THREADS_H_
