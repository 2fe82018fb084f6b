// One thread per server that receives the database's timing notifications (LISTEN
// ucudnn_timings) and hands them out: to the timings cache (invalidation) and to the GetPlan /
// StreamPlan calls waiting for benchmarks (wake-up). No polling: a waiting call sleeps until a
// notification for one of its problems arrives, the listener lost its connection (then it must
// re-read), or its own re-check interval / deadline passes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ucudnn/core/status.h"
#include "ucudnn/server/timings_cache.h"
#include "ucudnn/store/store.h"

namespace ucudnn::server {

// Where notifications come from: the store's Listener in the server, a fake in tests.
class NotificationSource {
 public:
  virtual ~NotificationSource() = default;
  // As store::Listener::WaitForNotification: notifications within `timeout` (empty on timeout),
  // kUnavailable when the connection broke (the next call reconnects).
  virtual Result<std::vector<store::ProblemNotification>> Wait(
      std::chrono::milliseconds timeout) = 0;
};
using NotificationSourceFactory = std::function<Result<std::unique_ptr<NotificationSource>>()>;
// A factory that opens store::Listener on `database_url`.
NotificationSourceFactory ListenerSourceFactory(std::string database_url);

class TimingWatcher;

// What woke a waiter.
struct WakeReason {
  std::vector<uint64_t> landed;  // problem hashes notified since the last wait
  bool reset = false;            // notifications may have been lost: re-read everything
};

// A waiting call's interest in some problems of one device. Unregisters itself when destroyed.
class TimingSubscription {
 public:
  ~TimingSubscription();
  TimingSubscription(const TimingSubscription&) = delete;
  TimingSubscription& operator=(const TimingSubscription&) = delete;

  // Blocks until something arrived for this subscription or `until` passed (then an empty
  // reason). Notifications that arrived since the previous call are returned at once.
  WakeReason WaitUntil(std::chrono::steady_clock::time_point until);
  // The non-blocking way to wait: `wake` runs once, when something arrives for this subscription
  // (on the watcher's thread, holding none of its locks: keep it short), or at once on this
  // thread when something arrived since the last TakeWakeReason or WaitUntil. A later call
  // replaces a `wake` that has not run.
  void OnWake(std::function<void()> wake);
  // What arrived since the last TakeWakeReason or WaitUntil, without waiting.
  WakeReason TakeWakeReason();
  // Narrows the interest to `problem_hashes` (as problems land).
  void SetProblems(const std::vector<uint64_t>& problem_hashes);

 private:
  friend class TimingWatcher;
  TimingSubscription(TimingWatcher* watcher, uint64_t device_hash,
                     const std::vector<uint64_t>& problem_hashes);
  // Record what arrived; return the OnWake callback to run (after the watcher's lock is let go).
  std::function<void()> Deliver(const store::ProblemNotification& n);
  std::function<void()> DeliverReset();

  TimingWatcher* watcher_;
  const uint64_t device_hash_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<uint64_t> problems_;
  std::vector<uint64_t> landed_;
  bool reset_ = false;
  std::function<void()> wake_;
};

class TimingWatcher {
 public:
  // `cache` may be null. The thread starts at Start(); until the source is connected the cache is
  // not live.
  TimingWatcher(NotificationSourceFactory factory, TimingsCache* cache);
  ~TimingWatcher();
  TimingWatcher(const TimingWatcher&) = delete;
  TimingWatcher& operator=(const TimingWatcher&) = delete;

  void Start();
  void Stop();
  // Whether the listener is connected now (notifications are arriving).
  bool connected() const { return connected_.load(); }
  // Notifications received since start (metrics, tests).
  uint64_t notifications() const { return notifications_.load(); }

  // Wakes every waiting subscription as if notifications had been lost (shutdown).
  void WakeAll() { Reset(); }

  // Register BEFORE re-reading the database, so that nothing landing in between is missed.
  std::unique_ptr<TimingSubscription> Subscribe(uint64_t device_hash,
                                                const std::vector<uint64_t>& problem_hashes);

 private:
  friend class TimingSubscription;
  void Run();
  void Dispatch(const std::vector<store::ProblemNotification>& notifications);
  void Reset();
  void SetConnected(bool connected);
  void Unregister(TimingSubscription* subscription);

  NotificationSourceFactory factory_;
  TimingsCache* cache_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> notifications_{0};
  std::thread thread_;
  std::mutex mu_;  // guards subscriptions_
  std::vector<TimingSubscription*> subscriptions_;
};

}  // namespace ucudnn::server
