#include "ucudnn/server/thread_pool.h"

#include <pthread.h>

#include <exception>

#include <spdlog/spdlog.h>

namespace ucudnn::server {
namespace {

void RunGuarded(const ThreadPool::Task& task) {
  try {
    task();
  } catch (const std::exception& e) {  // a bug, or std::bad_alloc: the pool keeps running
    spdlog::error("thread pool task: unexpected exception: {}", e.what());
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads, std::string name) {
  if (threads < 1) threads = 1;
  name.resize(std::min<size_t>(name.size(), 15));  // the kernel's limit for thread names
  alive_ = threads;
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Run(); });
    pthread_setname_np(threads_.back().native_handle(), name.c_str());
  }
}

ThreadPool::~ThreadPool() { Stop(); }

void ThreadPool::Post(Task task) {
  {
    std::lock_guard lock(mu_);
    if (alive_ > 0) {
      ready_.push_back(std::move(task));
      cv_.notify_one();
      return;
    }
  }
  RunGuarded(task);  // stopped: nobody else would run it
}

ThreadPool::TimerId ThreadPool::PostAt(Clock::time_point when, Task task) {
  std::unique_lock lock(mu_);
  if (alive_ == 0) {  // stopped: run it now, as Stop runs every timed task
    lock.unlock();
    RunGuarded(task);
    return 0;
  }
  const TimerId id = next_id_++;
  const bool earliest = timed_.empty() || when < timed_.begin()->first.first;
  timed_.emplace(std::make_pair(when, id), std::move(task));
  timed_at_.emplace(id, when);
  // A thread asleep until a later time wakes to wait for this one instead (one is enough: a
  // thread that finds more due work than it takes wakes another, see Next).
  if (earliest) cv_.notify_one();
  return id;
}

bool ThreadPool::Cancel(TimerId id) {
  Task dropped;  // destroyed outside the lock: it may own what re-enters the pool
  std::lock_guard lock(mu_);
  const auto at = timed_at_.find(id);
  if (at == timed_at_.end()) return false;
  const auto entry = timed_.find({at->second, id});
  dropped = std::move(entry->second);
  timed_.erase(entry);
  timed_at_.erase(at);
  return true;
}

size_t ThreadPool::queued() const {
  std::lock_guard lock(mu_);
  size_t due = 0;
  const auto now = Clock::now();
  for (auto it = timed_.begin(); it != timed_.end() && it->first.first <= now; ++it) ++due;
  return ready_.size() + due;
}

ThreadPool::Task ThreadPool::Next() {
  std::unique_lock lock(mu_);
  while (true) {
    Task task;
    const bool due = !timed_.empty() && (stopping_ || timed_.begin()->first.first <= Clock::now());
    if (!ready_.empty()) {
      task = std::move(ready_.front());
      ready_.pop_front();
    } else if (due) {
      auto entry = timed_.begin();
      task = std::move(entry->second);
      timed_at_.erase(entry->first.second);
      timed_.erase(entry);
    }
    if (task) {
      // More work left: another thread takes it (wakes are passed on one at a time rather than
      // every thread woken for every task).
      if (!ready_.empty() || due) cv_.notify_one();
      return task;
    }
    if (stopping_) {
      --alive_;  // under the lock that found nothing left: a later Post runs it itself
      return {};
    }
    if (timed_.empty()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, timed_.begin()->first.first);
    }
  }
}

void ThreadPool::Run() {
  while (Task task = Next()) RunGuarded(task);
}

void ThreadPool::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    threads.swap(threads_);
  }
  for (auto& thread : threads) {
    if (thread.joinable()) thread.join();
  }
}

}  // namespace ucudnn::server
