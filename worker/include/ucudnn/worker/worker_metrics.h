// The worker's Prometheus metrics: rendered from the daemon's counters at scrape time with the
// server's registry (ucudnn/server/metrics.h), served by the server's HTTP endpoint
// (metrics_http.h) when --metrics-port is given.
#pragma once

#include <string>

#include "ucudnn/worker/daemon.h"

namespace ucudnn::worker {

// Every family is named ucudnn_worker_*: jobs claimed/completed/failed/released/abandoned
// (counters), configurations measured (counter), devices lost, the last heartbeat as a Unix time,
// and per worker id the job in hand (0 idle) with its configurations done and total. Pure.
std::string RenderWorkerMetrics(const DaemonStats& stats);

}  // namespace ucudnn::worker
