// Exponential back-off between retries of something that failed (a database connection, a
// server, a lease renewal): the one home of that arithmetic. Pure: no clock, no sleep; the caller
// waits the delay it is given.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace ucudnn {

// The delay before retry number `attempt` (0 for the first): `initial`, doubled on each later
// attempt up to `max`. The first delay is `initial` even where it exceeds `max`. Never overflows,
// whatever the attempt.
std::chrono::milliseconds BackoffDelay(std::chrono::milliseconds initial,
                                       std::chrono::milliseconds max, int64_t attempt);

// The range a delay is scaled within at random, so that the many processes that lost the same
// dependency at once do not retry in step. {1, 1} (the default) leaves delays exact.
struct BackoffJitter {
  double low = 1.0;
  double high = 1.0;
};

// `delay` scaled by low + (high - low) * `unit` (a uniform random number in [0, 1)), at least
// 1 ms; `delay` itself under the default jitter. For callers that count attempts themselves.
std::chrono::milliseconds Jittered(std::chrono::milliseconds delay, BackoffJitter jitter,
                                   double unit);

// Counts the attempts since the last success and gives each one's delay: BackoffDelay, Jittered
// with the generator seeded by `seed`.
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max,
          BackoffJitter jitter = {}, uint64_t seed = std::random_device{}());

  // The delay before the next retry; counts it as an attempt.
  std::chrono::milliseconds Next();
  // After a success: the next failure waits `initial` again.
  void Reset() { attempts_ = 0; }
  // Delays given since the last Reset: 0 while nothing is failing.
  int64_t attempts() const { return attempts_; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  BackoffJitter jitter_;
  int64_t attempts_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace ucudnn
