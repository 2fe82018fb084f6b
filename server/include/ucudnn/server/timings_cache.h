// In-process copies of (device, problem) timing tables, kept correct by the database's
// notifications: every write of timings NOTIFYs "<device>:<problem>" after its commit, and the
// watcher (timing_watcher.h) erases that entry here. While notifications are not being received
// (listener down or not yet connected) the cache is bypassed entirely, and it is emptied when
// they resume, since some may have been lost.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ucudnn/core/timing.h"
#include "ucudnn/server/lru_cache.h"

namespace ucudnn::server {

// A table with what every plan request derives from it, computed once when it is read: its
// content digest (TimingTableDigest) and its measured micro-batch sizes.
struct CachedTimings {
  TimingTable table;
  uint64_t digest = 0;
  std::vector<int64_t> micro_batches;  // distinct, ascending; of ucudnn's own timings only
  std::chrono::steady_clock::time_point loaded_at = std::chrono::steady_clock::now();
};
// Fills digest and micro_batches from table.
std::shared_ptr<CachedTimings> MakeCachedTimings(TimingTable table);

struct TimingsKey {
  uint64_t device_hash = 0;
  uint64_t problem_hash = 0;
  bool operator==(const TimingsKey&) const = default;
};
struct TimingsKeyHash {
  size_t operator()(const TimingsKey& k) const {
    return static_cast<size_t>(k.device_hash * 0x9e3779b97f4a7c15ull ^ k.problem_hash);
  }
};

class TimingsCache {
 public:
  // Entries older than `max_age` are read again: a safety net for writes that bypass the store
  // (an operator's hand-made SQL sends no notification). Notifications do the real work.
  explicit TimingsCache(size_t capacity,
                        std::chrono::milliseconds max_age = std::chrono::minutes(5))
      : max_age_(max_age), entries_(capacity) {}

  // nullptr when absent, too old, or while the cache is not live.
  std::shared_ptr<const CachedTimings> Get(const TimingsKey& key);
  // Take epoch() BEFORE reading the database, pass it here after: the entry is stored only if
  // no invalidation happened in between (a notification may describe a write the read missed).
  void Put(const TimingsKey& key, std::shared_ptr<const CachedTimings> value, uint64_t epoch);
  uint64_t epoch() const;

  // Called by the watcher.
  void Invalidate(const TimingsKey& key);
  // Notifications may have been lost: forget everything, and stay bypassed until SetLive(true).
  void SetLive(bool live);
  bool live() const;
  size_t size() const { return entries_.size(); }

 private:
  const std::chrono::milliseconds max_age_;
  mutable std::mutex mu_;  // orders epoch changes against Put's check
  uint64_t epoch_ = 0;
  bool live_ = false;
  LruCache<TimingsKey, CachedTimings, TimingsKeyHash> entries_;
};

}  // namespace ucudnn::server
