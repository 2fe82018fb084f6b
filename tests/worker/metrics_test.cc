// The worker's metrics text (worker_metrics.h), rendered from the daemon's counters.
#include "ucudnn/worker/worker_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ucudnn::worker {
namespace {

using ::testing::HasSubstr;

TEST(WorkerMetricsTest, RendersTheCountersAndEachWorkersJobInHand) {
  DaemonStats stats;
  stats.claimed = 7;
  stats.completed = 5;
  stats.failed = 1;
  stats.released = 1;
  stats.configurations_measured = 123;
  stats.idle_gate_pauses = 4;
  stats.last_heartbeat_unix_seconds = 1764000000.5;
  stats.slots = {{"node:1:gpu0", 42, 10, 36}, {"node:1:gpu1", 0, 3, 9}};
  const std::string text = RenderWorkerMetrics(stats);
  EXPECT_THAT(text, HasSubstr("# TYPE ucudnn_worker_jobs_total counter\n"));
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_jobs_total{outcome=\"claimed\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_jobs_total{outcome=\"completed\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_jobs_total{outcome=\"failed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_jobs_total{outcome=\"abandoned\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_configurations_measured_total 123\n"));
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_idle_gate_pauses_total 4\n"));
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_last_heartbeat_timestamp_seconds 1764000000.5\n"));
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_current_job{worker=\"node:1:gpu0\"} 42\n"));
  EXPECT_THAT(
      text,
      HasSubstr("ucudnn_worker_current_job_configurations_done{worker=\"node:1:gpu0\"} 10\n"));
  EXPECT_THAT(
      text,
      HasSubstr("ucudnn_worker_current_job_configurations_total{worker=\"node:1:gpu0\"} 36\n"));
  // An idle worker shows no stale progress of its last job.
  EXPECT_THAT(text, HasSubstr("ucudnn_worker_current_job{worker=\"node:1:gpu1\"} 0\n"));
  EXPECT_THAT(
      text, HasSubstr("ucudnn_worker_current_job_configurations_done{worker=\"node:1:gpu1\"} 0\n"));
}

}  // namespace
}  // namespace ucudnn::worker
