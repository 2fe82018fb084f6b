#include "ucudnn/worker/worker_metrics.h"

#include "ucudnn/server/metrics.h"

namespace ucudnn::worker {

std::string RenderWorkerMetrics(const DaemonStats& stats) {
  server::MetricsRegistry registry;
  registry.DefineCounter("ucudnn_worker_jobs_total",
                         "Benchmark jobs by what became of them: claimed, completed (timings "
                         "written), failed (error recorded), released (given back on shutdown), "
                         "abandoned (lease lost)");
  registry.DefineCounter("ucudnn_worker_configurations_measured_total",
                         "(micro-batch, algorithm) configurations benchmarked, all jobs");
  registry.DefineGauge("ucudnn_worker_devices_lost",
                       "Benchmarking threads stopped by a lost device (restart the worker)");
  registry.DefineGauge("ucudnn_worker_last_heartbeat_timestamp_seconds",
                       "Unix time of the last heartbeat stored in the database; 0 before the "
                       "first");
  registry.DefineGauge("ucudnn_worker_ready",
                       "1 while the worker may claim jobs; 0 while the database's schema is newer "
                       "than this binary's (it writes nothing until upgraded)");
  registry.DefineGauge("ucudnn_worker_current_job", "The job in hand per worker id; 0 while idle");
  registry.DefineGauge("ucudnn_worker_current_job_configurations_done",
                       "Configurations of the job in hand measured so far");
  registry.DefineGauge("ucudnn_worker_current_job_configurations_total",
                       "Configurations of the job in hand");

  const std::pair<const char*, int64_t> outcomes[] = {{"claimed", stats.claimed},
                                                      {"completed", stats.completed},
                                                      {"failed", stats.failed},
                                                      {"released", stats.released},
                                                      {"abandoned", stats.abandoned}};
  for (const auto& [outcome, count] : outcomes) {
    registry.Increment("ucudnn_worker_jobs_total", {{"outcome", outcome}},
                       static_cast<double>(count));
  }
  registry.Increment("ucudnn_worker_configurations_measured_total", {},
                     static_cast<double>(stats.configurations_measured));
  registry.SetGauge("ucudnn_worker_devices_lost", {}, static_cast<double>(stats.devices_lost));
  registry.SetGauge("ucudnn_worker_last_heartbeat_timestamp_seconds", {},
                    stats.last_heartbeat_unix_seconds);
  registry.SetGauge("ucudnn_worker_ready", {}, stats.schema_too_new ? 0.0 : 1.0);
  for (const SlotStatus& slot : stats.slots) {
    const server::Labels labels = {{"worker", slot.worker_id}};
    registry.SetGauge("ucudnn_worker_current_job", labels, static_cast<double>(slot.job_id));
    registry.SetGauge("ucudnn_worker_current_job_configurations_done", labels,
                      static_cast<double>(slot.job_id != 0 ? slot.configurations_done : 0));
    registry.SetGauge("ucudnn_worker_current_job_configurations_total", labels,
                      static_cast<double>(slot.job_id != 0 ? slot.configurations_total : 0));
  }
  return registry.Render();
}

}  // namespace ucudnn::worker
