// The server's and the worker's families go out through the one shared endpoint
// (ucudnn::metrics), and the worker does not reach into server/ for it. The binaries themselves
// are scraped by tests/server/server_test.cc and tests/worker/process_test.cc.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ucudnn/metrics/endpoint.h"
#include "ucudnn/metrics/registry.h"
#include "ucudnn/server/server_metrics.h"
#include "ucudnn/worker/worker_metrics.h"

namespace ucudnn {
namespace {

// The body of GET /metrics from an endpoint serving `collectable`.
std::string ScrapeThrough(std::shared_ptr<prometheus::Collectable> collectable) {
  auto endpoint = metrics::Endpoint::Start("127.0.0.1:0", std::move(collectable));
  EXPECT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  if (!endpoint.ok()) return {};
  httplib::Client client("127.0.0.1", (*endpoint)->port());
  const auto response = client.Get("/metrics");
  EXPECT_TRUE(response && response->status == 200);
  return response ? response->body : std::string();
}

TEST(SharedMetricsTest, TheServersFamiliesGoOutThroughTheSharedEndpoint) {
  server::ServerMetrics metrics;
  metrics.RecordRpc("GetPlan", grpc::StatusCode::OK, 0.002);
  metrics.RecordPlanCacheMiss();
  const std::string body = ScrapeThrough(metrics.registry());
  EXPECT_NE(body.find(metrics.Render()), std::string::npos) << body;
  EXPECT_NE(body.find("ucudnn_rpc_requests_total{code=\"OK\",method=\"GetPlan\"} 1\n"),
            std::string::npos)
      << body;
  // The endpoint's own families: prometheus-cpp's exposer served it.
  EXPECT_NE(body.find("# TYPE exposer_scrapes_total counter"), std::string::npos) << body;
}

TEST(SharedMetricsTest, TheWorkersFamiliesGoOutThroughTheSharedEndpoint) {
  worker::DaemonStats stats;
  stats.claimed = 2;
  stats.slots = {{"node:1:gpu0", 42, 10, 36}};
  const std::string body = ScrapeThrough(
      metrics::MakeCollectable([&stats] { return worker::CollectWorkerMetrics(stats); }));
  EXPECT_NE(body.find(worker::RenderWorkerMetrics(stats)), std::string::npos) << body;
  EXPECT_NE(body.find("ucudnn_worker_jobs_total{outcome=\"claimed\"} 2\n"), std::string::npos)
      << body;
  EXPECT_NE(body.find("# TYPE exposer_scrapes_total counter"), std::string::npos) << body;
}

// Every family, type, label name and HELP text of the hand-written registry stays (dashboards,
// alerts and deploy/validate.py read them): the lines below are what it rendered.
TEST(SharedMetricsTest, TheFamiliesOfTheHandWrittenRegistryStay) {
  server::ServerMetrics server_metrics;
  server_metrics.RecordRpc("GetPlan", grpc::StatusCode::OK, 0.002);
  server_metrics.RecordPlanComputed(true, 0.01);
  server::ScrapeSnapshot snapshot;
  snapshot.database_up = true;
  snapshot.device_jobs.push_back({"00000000000000ab", "NVIDIA H100", 4, 1, 9, 0, 0});
  server_metrics.ApplySnapshot(snapshot);
  worker::DaemonStats stats;
  stats.slots = {{"node:1:gpu0", 42, 10, 36}};
  const std::string text = server_metrics.Render() + worker::RenderWorkerMetrics(stats);
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    const char* sample;  // a sample with the family's label names
  };
  const Family families[] = {
      {"ucudnn_rpc_requests_total", "counter", "RPCs finished, by method and gRPC status code.",
       "ucudnn_rpc_requests_total{code=\"OK\",method=\"GetPlan\"} 1"},
      {"ucudnn_rpc_duration_seconds", "histogram",
       "RPC latency in seconds, by method and status code.",
       "ucudnn_rpc_duration_seconds_bucket{code=\"OK\",method=\"GetPlan\",le=\"600\"} 1"},
      {"ucudnn_plan_cache_hits_total", "counter",
       "Plans served from a cache, by tier (memory: this process's LRU; database: the shared "
       "plan cache).",
       "ucudnn_plan_cache_hits_total{tier=\"database\"} 0"},
      {"ucudnn_plan_cache_misses_total", "counter", "Plan requests that found no cached plan.",
       "ucudnn_plan_cache_misses_total 0"},
      {"ucudnn_plans_computed_total", "counter", "Plans computed, by status (complete or partial).",
       "ucudnn_plans_computed_total{status=\"complete\"} 1"},
      {"ucudnn_plan_compute_seconds", "histogram", "Time to compute one plan (DP/ILP), seconds.",
       "ucudnn_plan_compute_seconds_bucket{le=\"0.01\"} 1"},
      {"ucudnn_jobs_enqueued_total", "counter", "Benchmark jobs created by plan requests.",
       "ucudnn_jobs_enqueued_total 0"},
      {"ucudnn_timings_stored_total", "counter", "Timings written through TimingService.",
       "ucudnn_timings_stored_total 0"},
      {"ucudnn_auth_failures_total", "counter",
       "Writes refused for a missing or wrong bearer token.", "ucudnn_auth_failures_total 0"},
      {"ucudnn_plan_cache_evictions_total", "counter",
       "Least recently used plans deleted from the database's plan cache.",
       "ucudnn_plan_cache_evictions_total 0"},
      {"ucudnn_database_up", "gauge", "1 when the database answered at the last scrape.",
       "ucudnn_database_up 1"},
      {"ucudnn_queue_depth", "gauge", "Benchmark jobs queued or running, all devices.",
       "ucudnn_queue_depth 0"},
      {"ucudnn_device_jobs", "gauge", "Benchmark jobs per device and state.",
       "ucudnn_device_jobs{device=\"NVIDIA H100\",device_hash=\"00000000000000ab\","
       "state=\"done\"} 9"},
      {"ucudnn_db_pool_connections", "gauge", "Database pool connections, by state.",
       "ucudnn_db_pool_connections{state=\"in_use\"} 0"},
      {"ucudnn_timing_listener_connected", "gauge",
       "1 when timing notifications (LISTEN) are being received.",
       "ucudnn_timing_listener_connected 0"},
      {"ucudnn_cache_entries", "gauge", "Entries in this process's caches, by cache.",
       "ucudnn_cache_entries{cache=\"timings\"} 0"},
      {"ucudnn_worker_jobs_total", "counter",
       "Benchmark jobs by what became of them: claimed, completed (timings written), failed "
       "(error recorded), released (given back on shutdown), abandoned (lease lost)",
       "ucudnn_worker_jobs_total{outcome=\"released\"} 0"},
      {"ucudnn_worker_configurations_measured_total", "counter",
       "(micro-batch, algorithm) configurations benchmarked, all jobs",
       "ucudnn_worker_configurations_measured_total 0"},
      {"ucudnn_worker_idle_gate_pauses_total", "counter",
       "Benchmarks paused, and claims put off, because another process used the GPU "
       "(--idle-gate)",
       "ucudnn_worker_idle_gate_pauses_total 0"},
      {"ucudnn_worker_devices_lost", "gauge",
       "Benchmarking threads stopped by a lost device (restart the worker)",
       "ucudnn_worker_devices_lost 0"},
      {"ucudnn_worker_last_heartbeat_timestamp_seconds", "gauge",
       "Unix time of the last heartbeat stored in the database; 0 before the first",
       "ucudnn_worker_last_heartbeat_timestamp_seconds 0"},
      {"ucudnn_worker_ready", "gauge",
       "1 while the worker may claim jobs; 0 while the database's schema is newer than this "
       "binary's (it writes nothing until upgraded)",
       "ucudnn_worker_ready 1"},
      {"ucudnn_worker_current_job", "gauge", "The job in hand per worker id; 0 while idle",
       "ucudnn_worker_current_job{worker=\"node:1:gpu0\"} 42"},
      {"ucudnn_worker_current_job_configurations_done", "gauge",
       "Configurations of the job in hand measured so far",
       "ucudnn_worker_current_job_configurations_done{worker=\"node:1:gpu0\"} 10"},
      {"ucudnn_worker_current_job_configurations_total", "gauge",
       "Configurations of the job in hand",
       "ucudnn_worker_current_job_configurations_total{worker=\"node:1:gpu0\"} 36"},
  };
  size_t helps = 0;
  for (size_t pos = text.find("# HELP "); pos != std::string::npos;
       pos = text.find("# HELP ", pos + 1)) {
    ++helps;
  }
  EXPECT_EQ(helps, std::size(families)) << text;  // no family lost, none added
  for (const Family& f : families) {
    const std::string head =
        std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
    EXPECT_NE(text.find(head), std::string::npos) << head << "\n" << text;
    EXPECT_NE(text.find(std::string("\n") + f.sample + "\n"), std::string::npos) << f.sample << "\n"
                                                                                 << text;
  }
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The worker links ucudnn::metrics, not ucudnn::server, and includes nothing of server/.
TEST(SharedMetricsTest, TheWorkerDoesNotDependOnTheServer) {
  const std::filesystem::path worker = std::filesystem::path(UCUDNN_SOURCE_DIR) / "worker";
  const std::string cmake = ReadFile(worker / "CMakeLists.txt");
  ASSERT_NE(cmake.find("ucudnn::metrics"), std::string::npos) << cmake;
  EXPECT_EQ(cmake.find("ucudnn::server"), std::string::npos) << cmake;
  int sources = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(worker)) {
    const auto extension = entry.path().extension();
    if (extension != ".cc" && extension != ".h") continue;
    ++sources;
    EXPECT_EQ(ReadFile(entry.path()).find("ucudnn/server/"), std::string::npos) << entry.path();
  }
  EXPECT_GT(sources, 5);
}

}  // namespace
}  // namespace ucudnn
