// The shared metrics code (ucudnn/metrics/registry.h) on prometheus-cpp: what a family renders,
// capped label sets, gauges replaced at scrape time.
#include "ucudnn/metrics/registry.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>

namespace ucudnn::metrics {
namespace {

TEST(MetricsRegistryTest, CounterRendering) {
  prometheus::Registry registry;
  BoundedFamily<prometheus::Counter> requests(
      AddCounter(registry, "requests_total", "Requests.\nSecond line \\ here."), 16);
  requests.Get({{"method", "GetPlan"}, {"code", "OK"}})->Increment();
  requests.Get({{"method", "GetPlan"}, {"code", "OK"}})->Increment(2);
  requests.Get({{"method", "Get\"Plan\n"}, {"code", "a\\b"}})->Increment();
  requests.Get({{"method", "GetPlan"}, {"code", "OK"}})->Increment(-5);  // never goes down
  EXPECT_EQ(Value(registry, "requests_total", {{"method", "GetPlan"}, {"code", "OK"}}), 3);
  const std::string text = Render(registry.Collect());
  EXPECT_NE(text.find("# HELP requests_total Requests.\\nSecond line \\\\ here.\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE requests_total counter\n"), std::string::npos);
  // Labels in name order.
  EXPECT_NE(text.find("requests_total{code=\"OK\",method=\"GetPlan\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("requests_total{code=\"a\\\\b\",method=\"Get\\\"Plan\\n\"} 1\n"),
            std::string::npos)
      << text;
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulative) {
  prometheus::Registry registry;
  BoundedFamily<prometheus::Histogram> latency(
      AddHistogram(registry, "latency_seconds", "Latency."), 1,
      {0.125, 0.0625, 1});  // sorted on define
  for (double v : {0.03125, 0.0625, 0.09375, 0.5, 2.0}) latency.Get({})->Observe(v);
  const std::string text = Render(registry.Collect());
  EXPECT_NE(text.find("# TYPE latency_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("latency_seconds_bucket{le=\"0.0625\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_bucket{le=\"0.125\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_bucket{le=\"1\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_bucket{le=\"+Inf\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_sum 2.6875\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_count 5\n"), std::string::npos) << text;
  EXPECT_EQ(HistogramCount(registry, "latency_seconds"), 5u);
  EXPECT_EQ(HistogramCount(registry, "latency_seconds", {{"no", "such"}}), 0u);
}

TEST(MetricsRegistryTest, LabelledHistogramPutsLeLast) {
  prometheus::Registry registry;
  BoundedFamily<prometheus::Histogram> h(AddHistogram(registry, "h", "H."), 4, {1});
  h.Get({{"method", "X"}})->Observe(0.5);
  const std::string text = Render(registry.Collect());
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_count{method=\"X\"} 1\n"), std::string::npos) << text;
}

TEST(MetricsRegistryTest, GaugesAndReplacement) {
  prometheus::Registry registry;
  BoundedFamily<prometheus::Gauge> jobs(AddGauge(registry, "jobs", "Jobs."), 8);
  jobs.Get({{"state", "queued"}})->Set(4);
  jobs.Get({{"state", "queued"}})->Set(3);
  EXPECT_EQ(Value(registry, "jobs", {{"state", "queued"}}), 3);
  jobs.Replace({{{{"state", "running"}}, 7}});
  EXPECT_EQ(Value(registry, "jobs", {{"state", "queued"}}), 0);  // gone, not zeroed
  EXPECT_EQ(jobs.size(), 1u);
  const std::string text = Render(registry.Collect());
  EXPECT_EQ(text.find("queued"), std::string::npos) << text;
  EXPECT_NE(text.find("jobs{state=\"running\"} 7\n"), std::string::npos) << text;
}

// A caller that controls a label value cannot grow the family past its cap; the label sets
// already there keep counting.
TEST(MetricsRegistryTest, LabelSetsPastTheCapGetNoChild) {
  prometheus::Registry registry;
  auto& family = AddCounter(registry, "c_total", "C.");
  BoundedFamily<prometheus::Counter> counters(family, 2);
  ASSERT_NE(counters.Get({{"v", "a"}}), nullptr);
  ASSERT_NE(counters.Get({{"v", "b"}}), nullptr);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(counters.Get({{"v", "hostile" + std::to_string(i)}}), nullptr);
  }
  counters.Get({{"v", "a"}})->Increment();
  EXPECT_EQ(counters.size(), 2u);
  EXPECT_FALSE(family.Has({{"v", "hostile0"}}));  // the library was never asked
  const auto families = registry.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].metric.size(), 2u);
  EXPECT_EQ(Value(registry, "c_total", {{"v", "a"}}), 1);

  BoundedFamily<prometheus::Gauge> gauges(AddGauge(registry, "g", "G."), 2);
  gauges.Replace({{{{"d", "1"}}, 1}, {{{"d", "2"}}, 2}, {{{"d", "3"}}, 3}});
  EXPECT_EQ(gauges.size(), 2u);
  EXPECT_EQ(Value(registry, "g", {{"d", "3"}}), 0);
}

// Values as dashboards read them: integers without a fraction, Unix times in full, infinities.
TEST(MetricsRegistryTest, ValuesRenderAsPrometheusReadsThem) {
  prometheus::Registry registry;
  auto& g = AddGauge(registry, "g", "G.");
  g.Add({{"v", "int"}}).Set(3);
  g.Add({{"v", "fraction"}}).Set(0.25);
  g.Add({{"v", "time"}}).Set(1764000000.5);
  g.Add({{"v", "inf"}}).Set(std::numeric_limits<double>::infinity());
  g.Add({{"v", "-inf"}}).Set(-std::numeric_limits<double>::infinity());
  const std::string text = Render(registry.Collect());
  for (const char* line :
       {"g{v=\"int\"} 3\n", "g{v=\"fraction\"} 0.25\n", "g{v=\"time\"} 1764000000.5\n",
        "g{v=\"inf\"} +Inf\n", "g{v=\"-inf\"} -Inf\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

TEST(MetricsRegistryTest, MakeCollectableCollectsAtEachScrape) {
  int scrapes = 0;
  const auto collectable = MakeCollectable([&scrapes] {
    prometheus::Registry registry;
    AddGauge(registry, "scrapes", "Scrapes so far.").Add({}).Set(++scrapes);
    return registry.Collect();
  });
  EXPECT_EQ(Value(*collectable, "scrapes"), 1);
  EXPECT_EQ(Value(*collectable, "scrapes"), 2);
}

}  // namespace
}  // namespace ucudnn::metrics
