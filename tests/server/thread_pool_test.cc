#include "ucudnn/server/thread_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "support/process_usage.h"

namespace ucudnn::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int ThreadsOfThisProcess() { return test_support::ReadProcessUsage(getpid()).threads; }

TEST(ThreadPoolTest, OneThreadRunsTasksInTheOrderPosted) {
  ThreadPool pool(1, "test-pool");
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> done;
  for (int i = 0; i < 100; ++i) {
    pool.Post([&, i] {
      std::lock_guard lock(mu);
      order.push_back(i);
      if (i == 99) done.set_value();
    });
  }
  done.get_future().wait();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

TEST(ThreadPoolTest, TimedTasksRunWhenDueAndCancelledOnesNever) {
  ThreadPool pool(2, "test-pool");
  std::promise<Clock::time_point> ran;
  const auto due = Clock::now() + 100ms;
  pool.PostAt(due, [&] { ran.set_value(Clock::now()); });
  std::atomic<bool> cancelled_ran{false};
  const auto id = pool.PostAt(Clock::now() + 50ms, [&] { cancelled_ran = true; });
  EXPECT_TRUE(pool.Cancel(id));
  EXPECT_FALSE(pool.Cancel(id));  // gone already
  EXPECT_GE(ran.get_future().get(), due);
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(cancelled_ran.load());
}

TEST(ThreadPoolTest, AnEarlierTimedTaskWakesThreadsWaitingForALaterOne) {
  ThreadPool pool(1, "test-pool");
  pool.PostAt(Clock::now() + 1h, [] {});
  std::promise<void> early;
  const auto start = Clock::now();
  pool.PostAt(Clock::now() + 20ms, [&] { early.set_value(); });
  ASSERT_EQ(early.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(ThreadPoolTest, WaitingTasksHoldNoThread) {
  ThreadPool pool(4, "test-pool");
  std::this_thread::sleep_for(20ms);
  const int before = ThreadsOfThisProcess();
  std::atomic<int> ran{0};
  std::vector<ThreadPool::TimerId> ids;
  for (int i = 0; i < 1000; ++i) ids.push_back(pool.PostAt(Clock::now() + 1h, [&] { ++ran; }));
  EXPECT_EQ(ThreadsOfThisProcess(), before);
  for (auto id : ids) EXPECT_TRUE(pool.Cancel(id));
  EXPECT_EQ(ran.load(), 0);
}

TEST(ThreadPoolTest, StopRunsWhatIsLeftAndLaterTasksRunOnTheCaller) {
  std::atomic<int> ran{0};
  ThreadPool pool(2, "test-pool");
  for (int i = 0; i < 10; ++i) pool.PostAt(Clock::now() + 1h, [&] { ++ran; });
  pool.Post([&] { ++ran; });
  pool.Stop();
  EXPECT_EQ(ran.load(), 11);
  const auto caller = std::this_thread::get_id();
  std::thread::id where;
  pool.Post([&] { where = std::this_thread::get_id(); });
  EXPECT_EQ(where, caller);
  pool.PostAt(Clock::now() + 1h, [&] { ++ran; });
  EXPECT_EQ(ran.load(), 12);
}

TEST(ThreadPoolTest, AThrowingTaskDoesNotStopThePool) {
  ThreadPool pool(1, "test-pool");
  pool.Post([] { throw std::runtime_error("boom"); });
  std::promise<void> after;
  pool.Post([&] { after.set_value(); });
  EXPECT_EQ(after.get_future().wait_for(5s), std::future_status::ready);
}

}  // namespace
}  // namespace ucudnn::server
