#include "ucudnn/worker/worker_metrics.h"

#include "ucudnn/metrics/registry.h"

namespace ucudnn::worker {

std::vector<prometheus::MetricFamily> CollectWorkerMetrics(const DaemonStats& stats) {
  prometheus::Registry registry;
  auto& jobs = metrics::AddCounter(registry, "ucudnn_worker_jobs_total",
                                   "Benchmark jobs by what became of them: claimed, completed "
                                   "(timings written), failed (error recorded), released (given "
                                   "back on shutdown), abandoned (lease lost)");
  auto& measured = metrics::AddCounter(registry, "ucudnn_worker_configurations_measured_total",
                                       "(micro-batch, algorithm) configurations benchmarked, all "
                                       "jobs");
  auto& idle_gate = metrics::AddCounter(
      registry, "ucudnn_worker_idle_gate_pauses_total",
      "Benchmarks paused, and claims put off, because another process used the GPU (--idle-gate)");
  auto& devices_lost =
      metrics::AddGauge(registry, "ucudnn_worker_devices_lost",
                        "Benchmarking threads stopped by a lost device (restart the worker)");
  auto& heartbeat = metrics::AddGauge(registry, "ucudnn_worker_last_heartbeat_timestamp_seconds",
                                      "Unix time of the last heartbeat stored in the database; 0 "
                                      "before the first");
  auto& ready = metrics::AddGauge(registry, "ucudnn_worker_ready",
                                  "1 while the worker may claim jobs; 0 while the database's "
                                  "schema is newer than this binary's (it writes nothing until "
                                  "upgraded)");
  auto& current_job = metrics::AddGauge(registry, "ucudnn_worker_current_job",
                                        "The job in hand per worker id; 0 while idle");
  auto& done = metrics::AddGauge(registry, "ucudnn_worker_current_job_configurations_done",
                                 "Configurations of the job in hand measured so far");
  auto& total = metrics::AddGauge(registry, "ucudnn_worker_current_job_configurations_total",
                                  "Configurations of the job in hand");

  const std::pair<const char*, int64_t> outcomes[] = {{"claimed", stats.claimed},
                                                      {"completed", stats.completed},
                                                      {"failed", stats.failed},
                                                      {"released", stats.released},
                                                      {"abandoned", stats.abandoned}};
  for (const auto& [outcome, count] : outcomes) {
    jobs.Add({{"outcome", outcome}}).Increment(static_cast<double>(count));
  }
  measured.Add({}).Increment(static_cast<double>(stats.configurations_measured));
  idle_gate.Add({}).Increment(static_cast<double>(stats.idle_gate_pauses));
  devices_lost.Add({}).Set(static_cast<double>(stats.devices_lost));
  heartbeat.Add({}).Set(stats.last_heartbeat_unix_seconds);
  ready.Add({}).Set(stats.schema_too_new ? 0.0 : 1.0);
  // One label set per benchmarking thread: bounded by the node's devices.
  for (const SlotStatus& slot : stats.slots) {
    const metrics::Labels labels = {{"worker", slot.worker_id}};
    current_job.Add(labels).Set(static_cast<double>(slot.job_id));
    done.Add(labels).Set(static_cast<double>(slot.job_id != 0 ? slot.configurations_done : 0));
    total.Add(labels).Set(static_cast<double>(slot.job_id != 0 ? slot.configurations_total : 0));
  }
  if (stats.compile_helpers.has_value()) {
    const CompileHelperCounts& h = *stats.compile_helpers;
    auto& plans = metrics::AddCounter(
        registry, "ucudnn_worker_compile_helper_plans_total",
        "Runtime-compiled cuDNN plans the compile helpers built into the compiled-plan store, by "
        "outcome (built; failed: then the benchmark built it itself; dropped: queued, then left "
        "out "
        "by the benchmark's skips before a helper took it)");
    plans.Add({{"outcome", "built"}}).Increment(static_cast<double>(h.built));
    plans.Add({{"outcome", "failed"}}).Increment(static_cast<double>(h.failed));
    plans.Add({{"outcome", "dropped"}}).Increment(static_cast<double>(h.dropped));
    metrics::AddCounter(registry, "ucudnn_worker_compile_helper_waits_total",
                        "Times a benchmark waited for a plan a compile helper was building")
        .Add({})
        .Increment(static_cast<double>(h.awaited));
    metrics::AddCounter(registry, "ucudnn_worker_compile_helper_wait_seconds_total",
                        "Time benchmarks waited for compile helpers")
        .Add({})
        .Increment(h.awaited_s);
    metrics::AddGauge(registry, "ucudnn_worker_compile_helpers",
                      "Compile helper processes alive (each holds a CUDA context on the GPU)")
        .Add({})
        .Set(static_cast<double>(h.alive));
  }
  return registry.Collect();
}

std::string RenderWorkerMetrics(const DaemonStats& stats) {
  return metrics::Render(CollectWorkerMetrics(stats));
}

}  // namespace ucudnn::worker
