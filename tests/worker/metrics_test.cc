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
  EXPECT_THAT(text, ::testing::Not(HasSubstr("compile_helper"))) << "no helpers, no families";
}

TEST(WorkerMetricsTest, RendersTheCompileHelpers) {
  DaemonStats stats;
  stats.compile_helpers = CompileHelperCounts{.built = 48,
                                              .failed = 2,
                                              .dropped = 9,
                                              .helpers_started = 7,
                                              .alive = 3,
                                              .awaited = 5,
                                              .awaited_s = 1.5};
  const std::string text = RenderWorkerMetrics(stats);
  for (const char* line : {"ucudnn_worker_compile_helper_plans_total{outcome=\"built\"} 48\n",
                           "ucudnn_worker_compile_helper_plans_total{outcome=\"failed\"} 2\n",
                           "ucudnn_worker_compile_helper_plans_total{outcome=\"dropped\"} 9\n",
                           "ucudnn_worker_compile_helper_waits_total 5\n",
                           "ucudnn_worker_compile_helper_wait_seconds_total 1.5\n",
                           "# TYPE ucudnn_worker_compile_helpers gauge\n"
                           "ucudnn_worker_compile_helpers 3\n"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

}  // namespace
}  // namespace ucudnn::worker
