#include "ucudnn/server/timing_watcher.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace ucudnn::server {
namespace {

constexpr std::chrono::milliseconds kPollSlice{200};  // bounds how long Stop() waits
constexpr std::chrono::milliseconds kRetryInitial{100};
constexpr std::chrono::milliseconds kRetryMax{5000};

class ListenerSource : public NotificationSource {
 public:
  explicit ListenerSource(std::unique_ptr<store::Listener> listener)
      : listener_(std::move(listener)) {}
  Result<std::vector<store::ProblemNotification>> Wait(std::chrono::milliseconds timeout) override {
    return listener_->WaitForNotification(timeout);
  }

 private:
  std::unique_ptr<store::Listener> listener_;
};

}  // namespace

NotificationSourceFactory ListenerSourceFactory(std::string database_url) {
  return [url = std::move(database_url)]() -> Result<std::unique_ptr<NotificationSource>> {
    UCUDNN_ASSIGN_OR_RETURN(auto listener, store::Listener::Open(url));
    return std::unique_ptr<NotificationSource>(
        std::make_unique<ListenerSource>(std::move(listener)));
  };
}

// ---- TimingSubscription ------------------------------------------------------------------------

TimingSubscription::TimingSubscription(TimingWatcher* watcher, uint64_t device_hash,
                                       const std::vector<uint64_t>& problem_hashes)
    : watcher_(watcher),
      device_hash_(device_hash),
      problems_(problem_hashes.begin(), problem_hashes.end()) {}

TimingSubscription::~TimingSubscription() { watcher_->Unregister(this); }

WakeReason TimingSubscription::WaitUntil(std::chrono::steady_clock::time_point until) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, until, [&] { return reset_ || !landed_.empty(); });
  WakeReason reason;
  reason.landed.swap(landed_);
  reason.reset = reset_;
  reset_ = false;
  return reason;
}

WakeReason TimingSubscription::TakeWakeReason() {
  return WaitUntil(std::chrono::steady_clock::time_point::min());
}

void TimingSubscription::OnWake(std::function<void()> wake) {
  {
    std::lock_guard lock(mu_);
    if (!reset_ && landed_.empty()) {
      wake_ = std::move(wake);
      return;
    }
    wake_ = nullptr;
  }
  wake();
}

void TimingSubscription::SetProblems(const std::vector<uint64_t>& problem_hashes) {
  std::lock_guard lock(mu_);
  problems_ = std::set<uint64_t>(problem_hashes.begin(), problem_hashes.end());
}

std::function<void()> TimingSubscription::Deliver(const store::ProblemNotification& n) {
  if (n.device_hash != device_hash_) return nullptr;
  std::function<void()> wake;
  {
    std::lock_guard lock(mu_);
    if (!problems_.count(n.problem_hash)) return nullptr;
    landed_.push_back(n.problem_hash);
    wake.swap(wake_);
  }
  cv_.notify_all();
  return wake;
}

std::function<void()> TimingSubscription::DeliverReset() {
  std::function<void()> wake;
  {
    std::lock_guard lock(mu_);
    reset_ = true;
    wake.swap(wake_);
  }
  cv_.notify_all();
  return wake;
}

// ---- TimingWatcher -----------------------------------------------------------------------------

TimingWatcher::TimingWatcher(NotificationSourceFactory factory, TimingsCache* cache)
    : factory_(std::move(factory)), cache_(cache) {}

TimingWatcher::~TimingWatcher() { Stop(); }

void TimingWatcher::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void TimingWatcher::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  SetConnected(false);
}

std::unique_ptr<TimingSubscription> TimingWatcher::Subscribe(
    uint64_t device_hash, const std::vector<uint64_t>& problem_hashes) {
  std::unique_ptr<TimingSubscription> subscription(
      new TimingSubscription(this, device_hash, problem_hashes));
  std::lock_guard lock(mu_);
  subscriptions_.push_back(subscription.get());
  return subscription;
}

void TimingWatcher::Unregister(TimingSubscription* subscription) {
  std::lock_guard lock(mu_);
  subscriptions_.erase(std::remove(subscriptions_.begin(), subscriptions_.end(), subscription),
                       subscriptions_.end());
}

void TimingWatcher::SetConnected(bool connected) {
  // Order matters to observers of connected(): going down, the flag drops first; coming up, the
  // cache is live and waiters were told to re-read (Reset) before the flag rises.
  bool was;
  if (connected) {
    if (cache_ != nullptr) cache_->SetLive(true);
    Reset();
    was = connected_.exchange(true);
  } else {
    was = connected_.exchange(false);
    if (cache_ != nullptr) cache_->SetLive(false);
  }
  if (was != connected && !stop_) {
    if (connected) {
      spdlog::info("timing notifications: listening");
    } else {
      spdlog::warn("timing notifications: not connected; waiting calls re-read the database");
    }
  }
}

void TimingWatcher::Dispatch(const std::vector<store::ProblemNotification>& notifications) {
  for (const auto& n : notifications) {
    // The cache first: a woken waiter re-reads, and must not find the stale entry.
    if (cache_ != nullptr) cache_->Invalidate({n.device_hash, n.problem_hash});
  }
  notifications_ += notifications.size();
  std::vector<std::function<void()>> wakes;
  {
    std::lock_guard lock(mu_);
    for (TimingSubscription* subscription : subscriptions_) {
      for (const auto& n : notifications) {
        if (auto wake = subscription->Deliver(n)) wakes.push_back(std::move(wake));
      }
    }
  }
  // Outside the lock: a woken call may end, and its subscription unregister, right away.
  for (auto& wake : wakes) wake();
}

void TimingWatcher::Reset() {
  std::vector<std::function<void()>> wakes;
  {
    std::lock_guard lock(mu_);
    for (TimingSubscription* subscription : subscriptions_) {
      if (auto wake = subscription->DeliverReset()) wakes.push_back(std::move(wake));
    }
  }
  for (auto& wake : wakes) wake();
}

void TimingWatcher::Run() {
  std::unique_ptr<NotificationSource> source;
  auto retry = kRetryInitial;
  auto sleep_interruptibly = [&](std::chrono::milliseconds total) {
    const auto until = std::chrono::steady_clock::now() + total;
    while (!stop_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::min(total, std::chrono::milliseconds(50)));
    }
  };
  while (!stop_) {
    if (!source) {
      auto opened = factory_();
      if (!opened.ok()) {
        spdlog::debug("timing listener: {}", opened.status().ToString());
        sleep_interruptibly(retry);
        retry = std::min(retry * 2, kRetryMax);
        continue;
      }
      source = std::move(opened).value();
    }
    auto received = source->Wait(kPollSlice);
    if (!received.ok()) {
      // Notifications sent meanwhile are lost: waiters re-read, the cache forgets.
      SetConnected(false);
      Reset();
      spdlog::debug("timing listener: {}", received.status().ToString());
      sleep_interruptibly(retry);
      retry = std::min(retry * 2, kRetryMax);
      continue;
    }
    // Anything that landed before the (re)connection was not seen: SetConnected has waiters
    // re-read.
    if (!connected_.load()) SetConnected(true);
    retry = kRetryInitial;
    if (!received->empty()) Dispatch(*received);
  }
}

}  // namespace ucudnn::server
