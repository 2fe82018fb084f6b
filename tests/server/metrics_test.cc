#include "ucudnn/server/metrics.h"

#include <gtest/gtest.h>

#include "ucudnn/server/server_metrics.h"

namespace ucudnn::server {
namespace {

TEST(MetricsTest, CounterRendering) {
  MetricsRegistry registry;
  registry.DefineCounter("requests_total", "Requests.\nSecond line \\ here.");
  registry.Increment("requests_total", {{"method", "GetPlan"}, {"code", "OK"}});
  registry.Increment("requests_total", {{"method", "GetPlan"}, {"code", "OK"}}, 2);
  registry.Increment("requests_total", {{"method", "Get\"Plan\n"}, {"code", "a\\b"}});
  registry.Increment("requests_total", {}, -5);  // counters never go down
  EXPECT_EQ(registry.Value("requests_total", {{"method", "GetPlan"}, {"code", "OK"}}), 3);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("# HELP requests_total Requests.\\nSecond line \\\\ here.\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("requests_total{method=\"GetPlan\",code=\"OK\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("requests_total{method=\"Get\\\"Plan\\n\",code=\"a\\\\b\"} 1\n"),
            std::string::npos)
      << text;
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry registry;
  registry.DefineHistogram("latency_seconds", "Latency.", {0.125, 0.0625, 1});  // sorted on define
  for (double v : {0.03125, 0.0625, 0.09375, 0.5, 2.0}) registry.Observe("latency_seconds", {}, v);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("# TYPE latency_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("latency_seconds_bucket{le=\"0.0625\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_bucket{le=\"0.125\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_bucket{le=\"1\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_bucket{le=\"+Inf\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_sum 2.6875\n"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_seconds_count 5\n"), std::string::npos) << text;
  EXPECT_EQ(registry.HistogramCount("latency_seconds"), 5u);
}

TEST(MetricsTest, LabelledHistogramPutsLeLast) {
  MetricsRegistry registry;
  registry.DefineHistogram("h", "H.", {1});
  registry.Observe("h", {{"method", "X"}}, 0.5);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_count{method=\"X\"} 1\n"), std::string::npos) << text;
}

TEST(MetricsTest, GaugesAndReplacement) {
  MetricsRegistry registry;
  registry.DefineGauge("jobs", "Jobs.");
  registry.SetGauge("jobs", {{"state", "queued"}}, 4);
  registry.SetGauge("jobs", {{"state", "queued"}}, 3);
  EXPECT_EQ(registry.Value("jobs", {{"state", "queued"}}), 3);
  registry.ReplaceGauge("jobs", {{{{"state", "running"}}, 7}});
  EXPECT_EQ(registry.Value("jobs", {{"state", "queued"}}), 0);  // gone, not zeroed
  const std::string text = registry.Render();
  EXPECT_EQ(text.find("queued"), std::string::npos);
  EXPECT_NE(text.find("jobs{state=\"running\"} 7\n"), std::string::npos);
}

TEST(MetricsTest, MisuseIsIgnoredNotFatal) {
  MetricsRegistry registry;
  registry.DefineCounter("c", "C.");
  registry.Increment("undefined");
  registry.SetGauge("c", {}, 5);  // wrong type
  registry.Observe("c", {}, 1);   // wrong type
  EXPECT_EQ(registry.Value("c"), 0);
  EXPECT_EQ(registry.Render(), "# HELP c C.\n# TYPE c counter\n");
}

TEST(MetricsTest, FormatMetricValue) {
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatMetricValue(-1.0 / 0.0), "-Inf");
}

TEST(ServerMetricsTest, RecordsRpcsCacheAndScrapeGauges) {
  ServerMetrics metrics;
  metrics.RecordRpc("GetPlan", grpc::StatusCode::OK, 0.002);
  metrics.RecordRpc("GetPlan", grpc::StatusCode::INVALID_ARGUMENT, 0.0001);
  metrics.RecordPlanCacheHit("memory");
  metrics.RecordPlanCacheMiss();
  metrics.RecordJobsEnqueued(3);
  ScrapeSnapshot snapshot;
  snapshot.database_up = true;
  snapshot.queue_depth = 5;
  snapshot.device_jobs.push_back({"00000000000000ab", "NVIDIA H100", 4, 1, 9, 0});
  metrics.ApplySnapshot(snapshot);
  const std::string text = metrics.Render();
  for (const char* expected :
       {"ucudnn_rpc_requests_total{method=\"GetPlan\",code=\"OK\"} 1",
        "ucudnn_rpc_requests_total{method=\"GetPlan\",code=\"INVALID_ARGUMENT\"} 1",
        "ucudnn_rpc_duration_seconds_bucket{method=\"GetPlan\",code=\"OK\",le=\"0.0025\"} 1",
        "ucudnn_plan_cache_hits_total{tier=\"memory\"} 1", "ucudnn_plan_cache_misses_total 1",
        "ucudnn_jobs_enqueued_total 3", "ucudnn_queue_depth 5", "ucudnn_database_up 1",
        "ucudnn_device_jobs{device_hash=\"00000000000000ab\",device=\"NVIDIA H100\","
        "state=\"queued\"} 4"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
}

TEST(ServerMetricsTest, RecordRpcSinceCountsTheCodeAndTheTimeSinceTheStart) {
  ServerMetrics metrics;
  metrics.RecordRpcSince("ListJobs", grpc::StatusCode::NOT_FOUND,
                         std::chrono::steady_clock::now() - std::chrono::seconds(30));
  EXPECT_EQ(metrics.registry().Value("ucudnn_rpc_requests_total",
                                     {{"method", "ListJobs"}, {"code", "NOT_FOUND"}}),
            1);
  // Timed from the start: over 30 s, in the 60 s bucket and not in the 10 s one.
  const std::string text = metrics.Render();
  const std::string bucket =
      "ucudnn_rpc_duration_seconds_bucket{method=\"ListJobs\",code=\"NOT_FOUND\",le=";
  EXPECT_NE(text.find(bucket + "\"10\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find(bucket + "\"60\"} 1\n"), std::string::npos) << text;
}

TEST(ServerMetricsTest, DeviceLabelsAreCapped) {
  ServerMetrics metrics;
  ScrapeSnapshot snapshot;
  snapshot.database_up = true;
  for (int i = 0; i < 200; ++i) {
    snapshot.device_jobs.push_back(
        {"hash" + std::to_string(i), "device " + std::to_string(i), 1, 0, 0, 0, 0});
  }
  metrics.ApplySnapshot(snapshot);
  const std::string text = metrics.Render();
  size_t queued_lines = 0;
  for (size_t pos = text.find("state=\"queued\"} "); pos != std::string::npos;
       pos = text.find("state=\"queued\"} ", pos + 1)) {
    ++queued_lines;
  }
  EXPECT_EQ(queued_lines, kMaxDeviceLabels);
  // The 200 - 63 devices past the cap are summed as "other".
  EXPECT_NE(text.find("device_hash=\"other\",device=\"other\",state=\"queued\"} 137"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("device 199"), std::string::npos);
}

}  // namespace
}  // namespace ucudnn::server
