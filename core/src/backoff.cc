#include "ucudnn/core/backoff.h"

#include <algorithm>

namespace ucudnn {

using std::chrono::milliseconds;

milliseconds BackoffDelay(milliseconds initial, milliseconds max, int64_t attempt) {
  if (attempt <= 0) return initial;
  milliseconds delay = initial;
  // Doubling stops once `max` is reached (a few dozen steps at most), so it cannot overflow.
  for (int64_t i = 0; i < attempt && delay.count() > 0 && delay < max; ++i) {
    delay = std::min(delay * 2, max);
  }
  return std::min(delay, max);
}

Backoff::Backoff(milliseconds initial, milliseconds max, BackoffJitter jitter, uint64_t seed)
    : initial_(initial), max_(max), jitter_(jitter), rng_(seed) {}

milliseconds Jittered(milliseconds delay, BackoffJitter jitter, double unit) {
  if (jitter.low == 1.0 && jitter.high == 1.0) return delay;
  const double scale = jitter.low + (jitter.high - jitter.low) * unit;
  return milliseconds(std::max<int64_t>(1, static_cast<int64_t>(delay.count() * scale)));
}

milliseconds Backoff::Next() {
  const milliseconds base = BackoffDelay(initial_, max_, attempts_++);
  return Jittered(base, jitter_, std::uniform_real_distribution<double>(0.0, 1.0)(rng_));
}

}  // namespace ucudnn
