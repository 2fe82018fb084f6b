// A fixed set of threads that run the server's blocking work (database round trips, planning) for
// every call, so the number of threads does not grow with the calls in flight: a call waiting for
// benchmarks holds no thread, only a timed task (PostAt) and a notification callback.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ucudnn::server {

class ThreadPool {
 public:
  using Task = std::function<void()>;
  using Clock = std::chrono::steady_clock;
  using TimerId = uint64_t;

  // Starts `threads` threads (at least one), named `name` (at most 15 bytes show).
  ThreadPool(int threads, std::string name);
  ~ThreadPool();  // Stop()
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs `task` on a pool thread, after the tasks posted before it. A task that throws is logged
  // and dropped. After Stop() the task runs on the calling thread.
  void Post(Task task);
  // Runs `task` on a pool thread once `when` has come. Returns an id for Cancel.
  TimerId PostAt(Clock::time_point when, Task task);
  // Drops a PostAt task that has not started; false when it ran, runs, or never existed.
  bool Cancel(TimerId id);

  // Runs every task still queued (timed ones at once, whatever their time), then joins the
  // threads. Idempotent.
  void Stop();

  // Tasks waiting for a thread, timed ones that are due included (for admission and metrics).
  size_t queued() const;

 private:
  void Run();
  // The next task to run, or an empty one when the pool stops and nothing is left.
  Task Next();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> ready_;
  std::map<std::pair<Clock::time_point, TimerId>, Task> timed_;
  std::unordered_map<TimerId, Clock::time_point> timed_at_;
  TimerId next_id_ = 1;
  bool stopping_ = false;
  int alive_ = 0;  // threads that have not left Run()
  std::vector<std::thread> threads_;
};

}  // namespace ucudnn::server
