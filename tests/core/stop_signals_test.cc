// The SIGTERM/SIGINT glue: the handler wakes the watcher thread, which counts the signals.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <mutex>
#include <thread>
#include <vector>

#include "ucudnn/core/stop_signals.h"

namespace ucudnn {
namespace {

TEST(StopSignalsTest, DeliversEachSignalWithItsCount) {
  std::mutex mu;
  std::vector<std::pair<int, int>> seen;
  auto signals = StopSignals::Install([&](int signal_number, int count) {
    std::lock_guard lock(mu);
    seen.emplace_back(signal_number, count);
  });
  ASSERT_TRUE(signals.ok()) << signals.status().ToString();
  // Only one set of handlers at a time.
  EXPECT_EQ(StopSignals::Install([](int, int) {}).status().code(), StatusCode::kFailedPrecondition);

  ASSERT_EQ(std::raise(SIGTERM), 0);
  ASSERT_EQ(std::raise(SIGINT), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mu);
      if (seen.size() == 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0], std::make_pair(int{SIGTERM}, 1));
    EXPECT_EQ(seen[1], std::make_pair(int{SIGINT}, 2));
  }
  signals->reset();
  // Uninstalled: a new set can be installed (and is removed again at once).
  EXPECT_TRUE(StopSignals::Install([](int, int) {}).ok());
}

}  // namespace
}  // namespace ucudnn
