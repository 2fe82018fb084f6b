// The worker's Prometheus metrics: made from the daemon's counters at scrape time on a
// prometheus-cpp registry (ucudnn/metrics/registry.h), served by the shared endpoint
// (ucudnn/metrics/endpoint.h) when --metrics-port is given.
#pragma once

#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "ucudnn/worker/daemon.h"

namespace ucudnn::worker {

// Every family is named ucudnn_worker_*: jobs claimed/completed/failed/released/abandoned
// (counters), configurations measured (counter), devices lost, the last heartbeat as a Unix time,
// and per worker id the job in hand (0 idle) with its configurations done and total; the compile
// helpers' plans, waits and processes when the worker has them. Pure.
std::vector<prometheus::MetricFamily> CollectWorkerMetrics(const DaemonStats& stats);
// Their text exposition: what GET /metrics answers.
std::string RenderWorkerMetrics(const DaemonStats& stats);

}  // namespace ucudnn::worker
