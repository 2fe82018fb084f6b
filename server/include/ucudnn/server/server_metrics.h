// The planner server's metric families on top of MetricsRegistry, with typed recorders, so that
// names and labels are spelled in one place. Pure: values queried from the database at scrape
// time come in as plain structs (see Server::CollectScrapeMetrics).
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/support/status.h>

#include "ucudnn/server/metrics.h"

namespace ucudnn::server {

// Live job counts of one device, as the store reports them.
struct DeviceJobGauge {
  std::string device_hash;  // 16 hex digits
  std::string device_name;
  int64_t queued = 0;
  int64_t running = 0;
  int64_t done = 0;
  int64_t failed = 0;
  int64_t expired = 0;  // running with an expired lease (its worker died?)
};

// Devices with labels of their own in ucudnn_device_jobs; the rest are summed as "other".
inline constexpr size_t kMaxDeviceLabels = 64;

// What a scrape found besides the counters.
struct ScrapeSnapshot {
  bool database_up = false;
  int64_t queue_depth = 0;
  std::vector<DeviceJobGauge> device_jobs;
  int pool_open = 0;
  int pool_in_use = 0;
  bool listener_connected = false;
  size_t plan_cache_entries = 0;
  size_t timings_cache_entries = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // One finished RPC: counts and latency by method and gRPC code.
  void RecordRpc(std::string_view method, grpc::StatusCode code, double seconds);
  // The same, timed from `start` to now.
  void RecordRpcSince(std::string_view method, grpc::StatusCode code,
                      std::chrono::steady_clock::time_point start);
  // tier: "memory" (in-process LRU), "database", or "memory_database_down" (the in-process plan
  // last answered to the same request bytes, served while the database is unreachable).
  void RecordPlanCacheHit(std::string_view tier);
  void RecordPlanCacheMiss();
  void RecordPlanComputed(bool complete, double seconds);
  void RecordJobsEnqueued(int created);
  void RecordTimingsStored(int64_t count);
  void RecordAuthFailure();
  // Plans deleted from the database's plan cache by the eviction.
  void RecordPlansEvicted(int64_t count);
  // Replaces the scrape-time gauges.
  void ApplySnapshot(const ScrapeSnapshot& snapshot);

  std::string Render() const { return registry_.Render(); }
  const MetricsRegistry& registry() const { return registry_; }

 private:
  MetricsRegistry registry_;
};

}  // namespace ucudnn::server
