// Prometheus metric families on a prometheus-cpp registry, as the server and the worker define
// them: HELP text escaped (prometheus-cpp 1.0 writes it as given), label sets capped per family
// before the library is asked for a child, gauges whose label sets are replaced at scrape time,
// and the text exposition of what a registry collects.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

namespace ucudnn::metrics {

// Label name -> value; rendered in name order.
using Labels = prometheus::Labels;

prometheus::Family<prometheus::Counter>& AddCounter(prometheus::Registry& registry,
                                                    const std::string& name, std::string_view help);
prometheus::Family<prometheus::Gauge>& AddGauge(prometheus::Registry& registry,
                                                const std::string& name, std::string_view help);
prometheus::Family<prometheus::Histogram>& AddHistogram(prometheus::Registry& registry,
                                                        const std::string& name,
                                                        std::string_view help);

// The children of one family, at most `max_children` distinct label sets: past the cap, Get()
// of a new label set returns nullptr and the library is never asked, so label values that a
// caller controls cannot grow memory (or the scrape) without bound. Thread-safe.
template <typename T>
class BoundedFamily {
 public:
  // `buckets`: the upper bounds of every child (histograms only; sorted here).
  BoundedFamily(prometheus::Family<T>& family, size_t max_children,
                prometheus::Histogram::BucketBoundaries buckets = {})
      : family_(family), max_children_(max_children), buckets_(Sorted(std::move(buckets))) {}

  // The child of `labels`, made on first use; nullptr past the cap.
  T* Get(const Labels& labels) {
    std::lock_guard lock(mu_);
    return GetLocked(labels);
  }

  // Sets every child at once: label sets absent from `values` are removed, not zeroed (values
  // queried at scrape time, whose label sets come and go). Gauges only; past the cap the rest
  // are dropped.
  void Replace(const std::vector<std::pair<Labels, double>>& values) {
    static_assert(std::is_same_v<T, prometheus::Gauge>, "Replace() is for gauges");
    std::lock_guard lock(mu_);
    std::map<Labels, T*> kept;
    for (const auto& [labels, value] : values) {
      T* child = GetLocked(labels);
      if (child == nullptr) continue;
      child->Set(value);
      kept.emplace(labels, child);
    }
    for (const auto& [labels, child] : children_) {
      if (kept.count(labels) == 0) family_.Remove(child);
    }
    children_ = std::move(kept);
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return children_.size();
  }

 private:
  static prometheus::Histogram::BucketBoundaries Sorted(
      prometheus::Histogram::BucketBoundaries buckets) {
    std::sort(buckets.begin(), buckets.end());
    return buckets;
  }

  T* GetLocked(const Labels& labels) {
    const auto it = children_.find(labels);
    if (it != children_.end()) return it->second;
    if (children_.size() >= max_children_) return nullptr;
    T* child;
    if constexpr (std::is_same_v<T, prometheus::Histogram>) {
      child = &family_.Add(labels, buckets_);
    } else {
      child = &family_.Add(labels);
    }
    children_.emplace(labels, child);
    return child;
  }

  prometheus::Family<T>& family_;
  const size_t max_children_;
  const prometheus::Histogram::BucketBoundaries buckets_;
  mutable std::mutex mu_;
  std::map<Labels, T*> children_;
};

// A collectable whose families `collect` makes at each scrape (values read from elsewhere then,
// like the worker's counters).
std::shared_ptr<prometheus::Collectable> MakeCollectable(
    std::function<std::vector<prometheus::MetricFamily>()> collect);

// The text exposition format (version 0.0.4) of `families`: what GET /metrics answers.
std::string Render(const std::vector<prometheus::MetricFamily>& families);

// The value of a counter or gauge sample of what `collectable` collects now; 0 when absent (for
// tests and the bench).
double Value(const prometheus::Collectable& collectable, std::string_view name,
             const Labels& labels = {});
// Observations of a histogram sample; 0 when absent.
uint64_t HistogramCount(const prometheus::Collectable& collectable, std::string_view name,
                        const Labels& labels = {});

}  // namespace ucudnn::metrics
