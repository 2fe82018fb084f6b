// The one exponential back-off: the delay sequence, its cap, Reset, and the jitter's bounds.
#include "ucudnn/core/backoff.h"

#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <vector>

namespace ucudnn {
namespace {

using std::chrono::milliseconds;

std::vector<int64_t> Delays(Backoff& backoff, int count) {
  std::vector<int64_t> out;
  for (int i = 0; i < count; ++i) out.push_back(backoff.Next().count());
  return out;
}

TEST(BackoffDelay, DoublesFromInitialUpToMax) {
  std::vector<int64_t> delays;
  for (int attempt = 0; attempt < 8; ++attempt) {
    delays.push_back(BackoffDelay(milliseconds(100), milliseconds(5000), attempt).count());
  }
  EXPECT_EQ(delays, (std::vector<int64_t>{100, 200, 400, 800, 1600, 3200, 5000, 5000}));
}

TEST(BackoffDelay, FirstDelayIsInitialEvenAboveMax) {
  EXPECT_EQ(BackoffDelay(milliseconds(200), milliseconds(100), 0), milliseconds(200));
  EXPECT_EQ(BackoffDelay(milliseconds(200), milliseconds(100), 1), milliseconds(100));
  EXPECT_EQ(BackoffDelay(milliseconds(200), milliseconds(100), 5), milliseconds(100));
}

TEST(BackoffDelay, HugeAttemptsStayAtMax) {
  EXPECT_EQ(BackoffDelay(milliseconds(1), milliseconds(60000), std::numeric_limits<int64_t>::max()),
            milliseconds(60000));
  EXPECT_EQ(BackoffDelay(milliseconds(0), milliseconds(60000), std::numeric_limits<int64_t>::max()),
            milliseconds(0));
}

TEST(Backoff, CountsAttemptsAndStartsOverAfterReset) {
  Backoff backoff(milliseconds(50), milliseconds(2000));
  EXPECT_EQ(backoff.attempts(), 0);
  EXPECT_EQ(Delays(backoff, 7), (std::vector<int64_t>{50, 100, 200, 400, 800, 1600, 2000}));
  EXPECT_EQ(backoff.attempts(), 7);
  EXPECT_EQ(backoff.Next(), milliseconds(2000));
  backoff.Reset();
  EXPECT_EQ(backoff.attempts(), 0);
  EXPECT_EQ(backoff.Next(), milliseconds(50));
}

TEST(Backoff, JitterStaysWithinItsRangeAndVaries) {
  Backoff backoff(milliseconds(1000), milliseconds(1000), BackoffJitter{0.8, 1.2}, /*seed=*/7);
  std::set<int64_t> seen;
  for (int i = 0; i < 200; ++i) {
    const int64_t delay = backoff.Next().count();
    EXPECT_GE(delay, 800);
    EXPECT_LE(delay, 1200);
    seen.insert(delay);
  }
  EXPECT_GT(seen.size(), 50u);  // spread over the range, not one value
  // Below the base only, as a client that must not wait longer than its cap uses it.
  Backoff below(milliseconds(1000), milliseconds(1000), BackoffJitter{0.8, 1.0}, 7);
  for (int i = 0; i < 200; ++i) {
    const int64_t delay = below.Next().count();
    EXPECT_GE(delay, 800);
    EXPECT_LE(delay, 1000);
  }
}

TEST(Jittered, ScalesWithinTheRange) {
  const BackoffJitter jitter{0.8, 1.2};
  EXPECT_EQ(Jittered(milliseconds(1000), jitter, 0.0), milliseconds(800));
  EXPECT_EQ(Jittered(milliseconds(1000), jitter, 0.5), milliseconds(1000));
  EXPECT_EQ(Jittered(milliseconds(1000), jitter, 0.999), milliseconds(1199));
  EXPECT_EQ(Jittered(milliseconds(1000), BackoffJitter{}, 0.3), milliseconds(1000));
  EXPECT_EQ(Jittered(milliseconds(0), jitter, 0.5), milliseconds(1));
}

TEST(Backoff, JitteredDelayIsAtLeastOneMillisecond) {
  Backoff backoff(milliseconds(0), milliseconds(0), BackoffJitter{0.8, 1.2}, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(backoff.Next(), milliseconds(1));
}

TEST(Backoff, SameSeedSameDelays) {
  Backoff a(milliseconds(100), milliseconds(5000), BackoffJitter{0.8, 1.2}, 42);
  Backoff b(milliseconds(100), milliseconds(5000), BackoffJitter{0.8, 1.2}, 42);
  EXPECT_EQ(Delays(a, 10), Delays(b, 10));
}

}  // namespace
}  // namespace ucudnn
