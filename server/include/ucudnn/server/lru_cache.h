// A bounded, thread-safe least-recently-used map. Values are shared_ptr<const V>, so a reader
// keeps its copy alive after an eviction and nothing is copied under the lock.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace ucudnn::server {

template <typename K, typename V, typename Hash = std::hash<K>>
class LruCache {
 public:
  // capacity 0 disables the cache: Put stores nothing and Get always misses.
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  std::shared_ptr<const V> Get(const K& key) {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  void Put(const K& key, std::shared_ptr<const V> value) {
    if (capacity_ == 0) return;
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    if (index_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  void Erase(const K& key) {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      order_.erase(it->second);
      index_.erase(it);
    }
  }

  void Clear() {
    std::lock_guard lock(mu_);
    index_.clear();
    order_.clear();
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return index_.size();
  }
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<K, std::shared_ptr<const V>>;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<K, typename std::list<Entry>::iterator, Hash> index_;
};

}  // namespace ucudnn::server
