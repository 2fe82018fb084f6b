#include "ucudnn/metrics/registry.h"

#include <prometheus/client_metric.h>
#include <prometheus/text_serializer.h>

namespace ucudnn::metrics {
namespace {

// The exposition format escapes \ and newline in HELP; prometheus-cpp 1.0 does not.
std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
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

class FunctionCollectable final : public prometheus::Collectable {
 public:
  explicit FunctionCollectable(std::function<std::vector<prometheus::MetricFamily>()> collect)
      : collect_(std::move(collect)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return collect_(); }

 private:
  std::function<std::vector<prometheus::MetricFamily>()> collect_;
};

struct Sample {
  prometheus::MetricType type = prometheus::MetricType::Untyped;
  const prometheus::ClientMetric* metric = nullptr;
};

// The sample of family `name` whose labels are exactly `labels`; its metric is nullptr if none.
Sample FindSample(const std::vector<prometheus::MetricFamily>& families, std::string_view name,
                  const Labels& labels) {
  for (const auto& family : families) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      Labels found;
      for (const auto& label : metric.label) found.emplace(label.name, label.value);
      if (found == labels) return {family.type, &metric};
    }
  }
  return {};
}

}  // namespace

prometheus::Family<prometheus::Counter>& AddCounter(prometheus::Registry& registry,
                                                    const std::string& name,
                                                    std::string_view help) {
  return prometheus::BuildCounter().Name(name).Help(EscapeHelp(help)).Register(registry);
}

prometheus::Family<prometheus::Gauge>& AddGauge(prometheus::Registry& registry,
                                                const std::string& name, std::string_view help) {
  return prometheus::BuildGauge().Name(name).Help(EscapeHelp(help)).Register(registry);
}

prometheus::Family<prometheus::Histogram>& AddHistogram(prometheus::Registry& registry,
                                                        const std::string& name,
                                                        std::string_view help) {
  return prometheus::BuildHistogram().Name(name).Help(EscapeHelp(help)).Register(registry);
}

std::shared_ptr<prometheus::Collectable> MakeCollectable(
    std::function<std::vector<prometheus::MetricFamily>()> collect) {
  return std::make_shared<FunctionCollectable>(std::move(collect));
}

std::string Render(const std::vector<prometheus::MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

double Value(const prometheus::Collectable& collectable, std::string_view name,
             const Labels& labels) {
  const auto families = collectable.Collect();  // the sample points into it
  const Sample sample = FindSample(families, name, labels);
  if (sample.metric == nullptr) return 0;
  switch (sample.type) {
    case prometheus::MetricType::Counter:
      return sample.metric->counter.value;
    case prometheus::MetricType::Gauge:
      return sample.metric->gauge.value;
    default:
      return 0;
  }
}

uint64_t HistogramCount(const prometheus::Collectable& collectable, std::string_view name,
                        const Labels& labels) {
  const auto families = collectable.Collect();  // the sample points into it
  const Sample sample = FindSample(families, name, labels);
  return sample.metric == nullptr ? 0 : sample.metric->histogram.sample_count;
}

}  // namespace ucudnn::metrics
