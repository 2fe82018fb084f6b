#include "ucudnn/server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace ucudnn::server {
namespace {

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char ch : value) {
    switch (ch) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char ch : help) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '\n') {
      out += "\\n";
    } else {
      out += ch;
    }
  }
  return out;
}

// "name{labels}" or "name" when there are none; `extra` is one more rendered label (le="...").
std::string SampleName(std::string_view name, const std::string& labels, std::string_view extra) {
  std::string out(name);
  if (labels.empty() && extra.empty()) return out;
  out += '{';
  out += labels;
  if (!labels.empty() && !extra.empty()) out += ',';
  out += extra;
  out += '}';
  return out;
}

}  // namespace

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(bound);
    bound *= factor;
  }
  return bounds;
}

std::string RenderLabels(const Labels& labels) {
  std::string out;
  for (const auto& [key, value] : labels) {
    if (!out.empty()) out += ',';
    out += key;
    out += "=\"";
    out += EscapeLabelValue(value);
    out += '"';
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

void MetricsRegistry::Define(const std::string& name, const std::string& help, Type type,
                             std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  for (const auto& family : families_) {
    if (family.name == name) return;
  }
  std::sort(bounds.begin(), bounds.end());
  Family family;
  family.name = name;
  family.help = help;
  family.type = type;
  family.bounds = std::move(bounds);
  families_.push_back(std::move(family));
}

void MetricsRegistry::DefineCounter(const std::string& name, const std::string& help) {
  Define(name, help, Type::kCounter, {});
}
void MetricsRegistry::DefineGauge(const std::string& name, const std::string& help) {
  Define(name, help, Type::kGauge, {});
}
void MetricsRegistry::DefineHistogram(const std::string& name, const std::string& help,
                                      std::vector<double> bounds) {
  Define(name, help, Type::kHistogram, std::move(bounds));
}

MetricsRegistry::Family* MetricsRegistry::Find(std::string_view name, Type type) {
  for (auto& family : families_) {
    if (family.name == name) return family.type == type ? &family : nullptr;
  }
  return nullptr;
}

const MetricsRegistry::Family* MetricsRegistry::Find(std::string_view name) const {
  for (const auto& family : families_) {
    if (family.name == name) return &family;
  }
  return nullptr;
}

void MetricsRegistry::Increment(std::string_view name, const Labels& labels, double by) {
  if (by < 0) return;  // counters only go up
  const std::string key = RenderLabels(labels);
  std::lock_guard lock(mu_);
  if (Family* family = Find(name, Type::kCounter)) family->values[key] += by;
}

void MetricsRegistry::SetGauge(std::string_view name, const Labels& labels, double value) {
  const std::string key = RenderLabels(labels);
  std::lock_guard lock(mu_);
  if (Family* family = Find(name, Type::kGauge)) family->values[key] = value;
}

void MetricsRegistry::ReplaceGauge(std::string_view name, std::vector<GaugeSample> samples) {
  std::map<std::string, double> values;
  for (const auto& sample : samples) values[RenderLabels(sample.labels)] = sample.value;
  std::lock_guard lock(mu_);
  if (Family* family = Find(name, Type::kGauge)) family->values = std::move(values);
}

void MetricsRegistry::Observe(std::string_view name, const Labels& labels, double value) {
  const std::string key = RenderLabels(labels);
  std::lock_guard lock(mu_);
  Family* family = Find(name, Type::kHistogram);
  if (family == nullptr) return;
  HistogramData& data = family->histograms[key];
  if (data.bucket_counts.empty()) data.bucket_counts.assign(family->bounds.size() + 1, 0);
  // Buckets are "less than or equal": the first bound not below the value.
  const size_t bucket = std::lower_bound(family->bounds.begin(), family->bounds.end(), value) -
                        family->bounds.begin();
  ++data.bucket_counts[bucket];
  data.sum += value;
  ++data.count;
}

double MetricsRegistry::Value(std::string_view name, const Labels& labels) const {
  const std::string key = RenderLabels(labels);
  std::lock_guard lock(mu_);
  const Family* family = Find(name);
  if (family == nullptr) return 0;
  const auto it = family->values.find(key);
  return it == family->values.end() ? 0 : it->second;
}

uint64_t MetricsRegistry::HistogramCount(std::string_view name, const Labels& labels) const {
  const std::string key = RenderLabels(labels);
  std::lock_guard lock(mu_);
  const Family* family = Find(name);
  if (family == nullptr) return 0;
  const auto it = family->histograms.find(key);
  return it == family->histograms.end() ? 0 : it->second.count;
}

std::string MetricsRegistry::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& family : families_) {
    static constexpr const char* kTypeNames[] = {"counter", "gauge", "histogram"};
    out += "# HELP " + family.name + " " + EscapeHelp(family.help) + "\n";
    out += "# TYPE " + family.name + " " + kTypeNames[static_cast<int>(family.type)] + "\n";
    if (family.type != Type::kHistogram) {
      for (const auto& [labels, value] : family.values) {
        out += SampleName(family.name, labels, "") + " " + FormatMetricValue(value) + "\n";
      }
      continue;
    }
    for (const auto& [labels, data] : family.histograms) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= family.bounds.size(); ++i) {
        cumulative += data.bucket_counts[i];
        const std::string le =
            i < family.bounds.size() ? FormatMetricValue(family.bounds[i]) : "+Inf";
        out += SampleName(family.name + "_bucket", labels, "le=\"" + le + "\"") + " " +
               std::to_string(cumulative) + "\n";
      }
      out +=
          SampleName(family.name + "_sum", labels, "") + " " + FormatMetricValue(data.sum) + "\n";
      out +=
          SampleName(family.name + "_count", labels, "") + " " + std::to_string(data.count) + "\n";
    }
  }
  return out;
}

}  // namespace ucudnn::server
