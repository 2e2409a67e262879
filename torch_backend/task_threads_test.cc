#include "torch_backend/task_threads.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ringlab::torch_backend {
namespace {

using std::chrono::seconds;

TEST(TaskThreadsTest, OneThreadRunsTasksInOrder) {
  std::vector<int> order;
  {
    TaskThreads threads(TaskThreads::Threads::kOne);
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(threads.Post([&order, i] { order.push_back(i); }));
    }
  }  // runs what was posted, then joins
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

// A task that waits for a later one (PowerSGD's callbacks wait for later
// allreduces) does not block it: another thread takes it.
TEST(TaskThreadsTest, GrowingThreadsRunATaskWhileAnEarlierOneWaits) {
  TaskThreads threads(TaskThreads::Threads::kGrow);
  std::promise<void> later_ran;
  std::future<void> later = later_ran.get_future();
  std::promise<bool> first_saw_it;
  std::future<bool> result = first_saw_it.get_future();
  threads.Post([&] {
    first_saw_it.set_value(later.wait_for(seconds(30)) ==
                           std::future_status::ready);
  });
  threads.Post([&] { later_ran.set_value(); });
  ASSERT_EQ(result.wait_for(seconds(60)), std::future_status::ready);
  EXPECT_TRUE(result.get());
}

TEST(TaskThreadsTest, NothingIsTakenAfterStop) {
  TaskThreads threads(TaskThreads::Threads::kOne);
  std::atomic<int> ran{0};
  threads.Post([&] { ++ran; });
  threads.Stop();
  EXPECT_EQ(ran, 1);
  EXPECT_FALSE(threads.Post([&] { ++ran; }));
  threads.Stop();  // again: nothing to do
  EXPECT_EQ(ran, 1);
}

// The owner destroyed inside one of its own tasks (a callback that held the
// last reference to the process group): that thread is left to end by
// itself, no self-join, and tasks queued behind still run.
TEST(TaskThreadsTest, DestroyedFromItsOwnTask) {
  for (auto kind : {TaskThreads::Threads::kOne, TaskThreads::Threads::kGrow}) {
    auto owner = std::make_shared<std::unique_ptr<TaskThreads>>(
        std::make_unique<TaskThreads>(kind));
    std::promise<void> posted, destroyed, behind;
    std::shared_future<void> both_posted = posted.get_future().share();
    std::future<void> done = destroyed.get_future();
    std::future<void> ran_behind = behind.get_future();
    (*owner)->Post([owner, both_posted, &destroyed] {
      both_posted.wait();
      owner->reset();
      destroyed.set_value();
    });
    (*owner)->Post([&behind] { behind.set_value(); });
    posted.set_value();
    ASSERT_EQ(done.wait_for(seconds(60)), std::future_status::ready);
    EXPECT_EQ(*owner, nullptr);
    EXPECT_EQ(ran_behind.wait_for(seconds(60)), std::future_status::ready);
  }
}

}  // namespace
}  // namespace ringlab::torch_backend
