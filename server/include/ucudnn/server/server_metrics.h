// The planner server's metric families on a prometheus-cpp registry (ucudnn/metrics/registry.h),
// with typed recorders, so that names and labels are spelled in one place. Pure: values queried
// from the database at scrape time come in as plain structs (see Server::ScrapeMetrics).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/support/status.h>

#include "ucudnn/metrics/registry.h"

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
// Distinct (method, code) label sets of the RPC families: the services' methods times gRPC's 17
// codes stay well below; a label set past it is not counted.
inline constexpr size_t kMaxRpcLabelSets = 1024;
// Distinct plan cache tiers (three are named below); past it a hit is not counted.
inline constexpr size_t kMaxPlanCacheTiers = 8;

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

  // The text exposition of every family.
  std::string Render() const;
  // What the /metrics endpoint collects, and metrics::Value() reads.
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  metrics::BoundedFamily<prometheus::Counter> rpc_requests_;
  metrics::BoundedFamily<prometheus::Histogram> rpc_duration_;
  metrics::BoundedFamily<prometheus::Counter> plan_cache_hits_;
  prometheus::Counter& plan_cache_misses_;
  prometheus::Family<prometheus::Counter>& plans_computed_;
  prometheus::Histogram& plan_compute_seconds_;
  prometheus::Counter& jobs_enqueued_;
  prometheus::Counter& timings_stored_;
  prometheus::Counter& auth_failures_;
  prometheus::Counter& plans_evicted_;
  prometheus::Gauge& database_up_;
  // Absent until the database first answers a scrape.
  metrics::BoundedFamily<prometheus::Gauge> queue_depth_;
  metrics::BoundedFamily<prometheus::Gauge> device_jobs_;
  prometheus::Family<prometheus::Gauge>& pool_connections_;
  prometheus::Gauge& listener_connected_;
  prometheus::Family<prometheus::Gauge>& cache_entries_;
};

}  // namespace ucudnn::server
