// The server's families (server_metrics.h): names, labels and values as scraped.
#include "ucudnn/server/server_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace ucudnn::server {
namespace {

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
       {"ucudnn_rpc_requests_total{code=\"OK\",method=\"GetPlan\"} 1",
        "ucudnn_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"GetPlan\"} 1",
        "ucudnn_rpc_duration_seconds_bucket{code=\"OK\",method=\"GetPlan\",le=\"0.0025\"} 1",
        "ucudnn_plan_cache_hits_total{tier=\"memory\"} 1", "ucudnn_plan_cache_misses_total 1",
        "ucudnn_jobs_enqueued_total 3", "ucudnn_queue_depth 5", "ucudnn_database_up 1",
        "ucudnn_device_jobs{device=\"NVIDIA H100\",device_hash=\"00000000000000ab\","
        "state=\"queued\"} 4"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
}

TEST(ServerMetricsTest, RecordRpcSinceCountsTheCodeAndTheTimeSinceTheStart) {
  ServerMetrics metrics;
  metrics.RecordRpcSince("ListJobs", grpc::StatusCode::NOT_FOUND,
                         std::chrono::steady_clock::now() - std::chrono::seconds(30));
  EXPECT_EQ(metrics::Value(*metrics.registry(), "ucudnn_rpc_requests_total",
                           {{"method", "ListJobs"}, {"code", "NOT_FOUND"}}),
            1);
  // Timed from the start: over 30 s, in the 60 s bucket and not in the 10 s one.
  const std::string text = metrics.Render();
  const std::string bucket =
      "ucudnn_rpc_duration_seconds_bucket{code=\"NOT_FOUND\",method=\"ListJobs\",le=";
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
  EXPECT_NE(text.find("device=\"other\",device_hash=\"other\",state=\"queued\"} 137"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("device 199"), std::string::npos);
}

// Method names and tiers come from the server's own code; still, a label set past the cap is not
// counted rather than made, so no caller can grow /metrics without bound.
TEST(ServerMetricsTest, RpcLabelSetsAndCacheTiersAreCapped) {
  ServerMetrics metrics;
  for (size_t i = 0; i < kMaxRpcLabelSets + 100; ++i) {
    metrics.RecordRpc("Method" + std::to_string(i), grpc::StatusCode::OK, 0.001);
  }
  for (int i = 0; i < 100; ++i) metrics.RecordPlanCacheHit("tier" + std::to_string(i));
  const auto families = metrics.registry()->Collect();
  std::map<std::string, size_t> samples;
  for (const auto& family : families) samples[family.name] = family.metric.size();
  EXPECT_EQ(samples["ucudnn_rpc_requests_total"], kMaxRpcLabelSets);
  EXPECT_EQ(samples["ucudnn_rpc_duration_seconds"], kMaxRpcLabelSets);
  EXPECT_EQ(samples["ucudnn_plan_cache_hits_total"], kMaxPlanCacheTiers);
  // Label sets made before the cap keep counting.
  metrics.RecordRpc("Method0", grpc::StatusCode::OK, 0.001);
  EXPECT_EQ(metrics::Value(*metrics.registry(), "ucudnn_rpc_requests_total",
                           {{"method", "Method0"}, {"code", "OK"}}),
            2);
  EXPECT_EQ(
      metrics::Value(*metrics.registry(), "ucudnn_rpc_requests_total",
                     {{"method", "Method" + std::to_string(kMaxRpcLabelSets)}, {"code", "OK"}}),
      0);
}

}  // namespace
}  // namespace ucudnn::server
