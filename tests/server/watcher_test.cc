#include "ucudnn/server/timing_watcher.h"

#include <deque>

#include <gtest/gtest.h>

#include "support/problems.h"

namespace ucudnn::server {
namespace {

using test_support::MakeTiming;

using namespace std::chrono_literals;

// A notification source fed by the test; Fail() makes the next Wait report a broken connection.
struct FakeFeed {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<store::ProblemNotification> queue;
  bool fail_next = false;
  int opens = 0;

  void Send(uint64_t device, uint64_t problem) {
    {
      std::lock_guard lock(mu);
      queue.push_back({device, problem});
    }
    cv.notify_all();
  }
  void Fail() {
    {
      std::lock_guard lock(mu);
      fail_next = true;
    }
    cv.notify_all();
  }
};

class FakeSource : public NotificationSource {
 public:
  explicit FakeSource(FakeFeed* feed) : feed_(feed) {}
  Result<std::vector<store::ProblemNotification>> Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(feed_->mu);
    feed_->cv.wait_for(lock, timeout, [&] { return feed_->fail_next || !feed_->queue.empty(); });
    if (feed_->fail_next) {
      feed_->fail_next = false;
      return Unavailable("connection lost");
    }
    std::vector<store::ProblemNotification> out(feed_->queue.begin(), feed_->queue.end());
    feed_->queue.clear();
    return out;
  }

 private:
  FakeFeed* feed_;
};

NotificationSourceFactory FactoryFor(FakeFeed* feed) {
  return [feed]() -> Result<std::unique_ptr<NotificationSource>> {
    std::lock_guard lock(feed->mu);
    ++feed->opens;
    return std::unique_ptr<NotificationSource>(std::make_unique<FakeSource>(feed));
  };
}

bool WaitFor(const std::function<bool()>& condition) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(TimingWatcherTest, WakesOnlyMatchingSubscriptionsAndInvalidatesCache) {
  FakeFeed feed;
  TimingsCache cache(16);
  TimingWatcher watcher(FactoryFor(&feed), &cache);
  watcher.Start();
  ASSERT_TRUE(WaitFor([&] { return watcher.connected(); }));
  EXPECT_TRUE(cache.live());

  auto entry = std::make_shared<CachedTimings>();
  entry->table.entries.push_back(MakeTiming(1, 0, 1));
  cache.Put({7, 100}, entry, cache.epoch());
  ASSERT_NE(cache.Get({7, 100}), nullptr);

  auto interested = watcher.Subscribe(7, {100, 101});
  auto other_device = watcher.Subscribe(8, {100});
  // Clear the reset a fresh connection may have delivered before the subscriptions existed.
  interested->WaitUntil(std::chrono::steady_clock::now());
  other_device->WaitUntil(std::chrono::steady_clock::now());

  feed.Send(7, 100);
  const WakeReason woke = interested->WaitUntil(std::chrono::steady_clock::now() + 10s);
  EXPECT_FALSE(woke.reset);
  EXPECT_EQ(woke.landed, (std::vector<uint64_t>{100}));
  EXPECT_EQ(cache.Get({7, 100}), nullptr);  // invalidated before the waiter woke

  const WakeReason nothing = other_device->WaitUntil(std::chrono::steady_clock::now() + 50ms);
  EXPECT_TRUE(nothing.landed.empty());
  EXPECT_FALSE(nothing.reset);
  EXPECT_EQ(watcher.notifications(), 1u);
  watcher.Stop();
}

TEST(TimingWatcherTest, LostConnectionResetsWaitersAndCache) {
  FakeFeed feed;
  TimingsCache cache(16);
  TimingWatcher watcher(FactoryFor(&feed), &cache);
  watcher.Start();
  ASSERT_TRUE(WaitFor([&] { return watcher.connected(); }));
  auto subscription = watcher.Subscribe(1, {2});
  subscription->WaitUntil(std::chrono::steady_clock::now());

  cache.Put({1, 3}, std::make_shared<CachedTimings>(), cache.epoch());
  ASSERT_NE(cache.Get({1, 3}), nullptr);
  feed.Fail();
  const WakeReason woke = subscription->WaitUntil(std::chrono::steady_clock::now() + 10s);
  EXPECT_TRUE(woke.reset);
  EXPECT_EQ(cache.Get({1, 3}), nullptr);
  // It reconnects by itself (the next Wait succeeds) and the cache is live again.
  ASSERT_TRUE(WaitFor([&] { return watcher.connected() && cache.live(); }));
  watcher.Stop();
  EXPECT_FALSE(cache.live());
}

TEST(TimingWatcherTest, WakeAllAndNarrowing) {
  FakeFeed feed;
  TimingWatcher watcher(FactoryFor(&feed), nullptr);
  watcher.Start();
  ASSERT_TRUE(WaitFor([&] { return watcher.connected(); }));
  auto subscription = watcher.Subscribe(1, {2, 3});
  subscription->WaitUntil(std::chrono::steady_clock::now());
  subscription->SetProblems({3});
  feed.Send(1, 2);  // no longer of interest
  EXPECT_TRUE(subscription->WaitUntil(std::chrono::steady_clock::now() + 100ms).landed.empty());
  watcher.WakeAll();
  EXPECT_TRUE(subscription->WaitUntil(std::chrono::steady_clock::now() + 10s).reset);
  watcher.Stop();
}

}  // namespace
}  // namespace ucudnn::server
