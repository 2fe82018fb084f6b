#include "ucudnn/server/timings_cache.h"

#include <algorithm>

#include "ucudnn/server/plan_key.h"

namespace ucudnn::server {

std::shared_ptr<CachedTimings> MakeCachedTimings(TimingTable table) {
  auto entry = std::make_shared<CachedTimings>();
  entry->digest = TimingTableDigest(table);
  // What a worker measures: the framework's own timings cover nothing (a problem with only those
  // is still missing and gets its benchmark job).
  for (const auto& t : table.entries) {
    if (!IsFramework(t)) entry->micro_batches.push_back(t.micro_batch);
  }
  std::sort(entry->micro_batches.begin(), entry->micro_batches.end());
  entry->micro_batches.erase(std::unique(entry->micro_batches.begin(), entry->micro_batches.end()),
                             entry->micro_batches.end());
  entry->table = std::move(table);
  return entry;
}

std::shared_ptr<const CachedTimings> TimingsCache::Get(const TimingsKey& key) {
  {
    std::lock_guard lock(mu_);
    if (!live_) return nullptr;
  }
  auto entry = entries_.Get(key);
  if (entry && std::chrono::steady_clock::now() - entry->loaded_at > max_age_) return nullptr;
  return entry;
}

void TimingsCache::Put(const TimingsKey& key, std::shared_ptr<const CachedTimings> value,
                       uint64_t epoch) {
  std::lock_guard lock(mu_);
  if (!live_ || epoch != epoch_) return;
  entries_.Put(key, std::move(value));
}

uint64_t TimingsCache::epoch() const {
  std::lock_guard lock(mu_);
  return epoch_;
}

void TimingsCache::Invalidate(const TimingsKey& key) {
  std::lock_guard lock(mu_);
  ++epoch_;
  entries_.Erase(key);
}

void TimingsCache::SetLive(bool live) {
  std::lock_guard lock(mu_);
  if (live == live_) return;
  ++epoch_;
  entries_.Clear();
  live_ = live;
}

bool TimingsCache::live() const {
  std::lock_guard lock(mu_);
  return live_;
}

}  // namespace ucudnn::server
