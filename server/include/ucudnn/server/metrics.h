// A small Prometheus registry: counters, gauges and histograms with labels, rendered in the text
// exposition format (version 0.0.4). Pure and thread-safe; the HTTP endpoint (metrics_http.h)
// only serves Render()'s text.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ucudnn::server {

// Label pairs in the order they are rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

struct GaugeSample {
  Labels labels;
  double value = 0;
};

// `count` upper bounds start, start*factor, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class MetricsRegistry {
 public:
  // Families are defined once, before use. Using an undefined family, or one of another type,
  // is ignored: metrics must never make a request fail.
  void DefineCounter(const std::string& name, const std::string& help);
  void DefineGauge(const std::string& name, const std::string& help);
  // `bounds` ascending; the +Inf bucket is implicit.
  void DefineHistogram(const std::string& name, const std::string& help,
                       std::vector<double> bounds);

  void Increment(std::string_view name, const Labels& labels = {}, double by = 1);
  void SetGauge(std::string_view name, const Labels& labels, double value);
  // Replaces every sample of a gauge family at once (values queried at scrape time, whose label
  // sets come and go, like per-device job counts).
  void ReplaceGauge(std::string_view name, std::vector<GaugeSample> samples);
  void Observe(std::string_view name, const Labels& labels, double value);

  // The current value of a counter or gauge sample, 0 when absent (for tests and the bench).
  double Value(std::string_view name, const Labels& labels = {}) const;
  // Observations of a histogram sample.
  uint64_t HistogramCount(std::string_view name, const Labels& labels = {}) const;

  // Every family in definition order, samples in label order.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct HistogramData {
    std::vector<uint64_t> bucket_counts;  // per bound, not cumulative; last is +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    std::string name;
    std::string help;
    Type type = Type::kCounter;
    std::vector<double> bounds;
    // Keyed by the rendered label set ("a=\"x\",b=\"y\""), which also orders the output.
    std::map<std::string, double> values;
    std::map<std::string, HistogramData> histograms;
  };

  Family* Find(std::string_view name, Type type);
  const Family* Find(std::string_view name) const;
  void Define(const std::string& name, const std::string& help, Type type,
              std::vector<double> bounds);

  mutable std::mutex mu_;
  std::vector<Family> families_;
};

// Renders labels as Prometheus wants them: a="x",b="y" with \\, \" and \n escaped.
std::string RenderLabels(const Labels& labels);
// Shortest text that reads back to the same double; +Inf, -Inf, NaN as Prometheus spells them.
std::string FormatMetricValue(double value);

}  // namespace ucudnn::server
