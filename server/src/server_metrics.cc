#include "ucudnn/server/server_metrics.h"

#include <algorithm>
#include <cstddef>

#include "ucudnn/server/grpc_status.h"

namespace ucudnn::server {
namespace {

constexpr const char* kRpcRequests = "ucudnn_rpc_requests_total";
constexpr const char* kRpcDuration = "ucudnn_rpc_duration_seconds";
constexpr const char* kPlanCacheHits = "ucudnn_plan_cache_hits_total";
constexpr const char* kPlanCacheMisses = "ucudnn_plan_cache_misses_total";
constexpr const char* kPlansComputed = "ucudnn_plans_computed_total";
constexpr const char* kPlanComputeSeconds = "ucudnn_plan_compute_seconds";
constexpr const char* kJobsEnqueued = "ucudnn_jobs_enqueued_total";
constexpr const char* kTimingsStored = "ucudnn_timings_stored_total";
constexpr const char* kAuthFailures = "ucudnn_auth_failures_total";
constexpr const char* kPlansEvicted = "ucudnn_plan_cache_evictions_total";
constexpr const char* kDatabaseUp = "ucudnn_database_up";
constexpr const char* kQueueDepth = "ucudnn_queue_depth";
constexpr const char* kDeviceJobs = "ucudnn_device_jobs";
constexpr const char* kPoolConnections = "ucudnn_db_pool_connections";
constexpr const char* kListenerConnected = "ucudnn_timing_listener_connected";
constexpr const char* kCacheEntries = "ucudnn_cache_entries";

}  // namespace

ServerMetrics::ServerMetrics() {
  registry_.DefineCounter(kRpcRequests, "RPCs finished, by method and gRPC status code.");
  // From half a millisecond (cached plans) to the longest allowed wait for benchmarks.
  registry_.DefineHistogram(kRpcDuration, "RPC latency in seconds, by method and status code.",
                            {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                             2.5, 5, 10, 30, 60, 300, 600});
  registry_.DefineCounter(kPlanCacheHits,
                          "Plans served from a cache, by tier (memory: this process's LRU; "
                          "database: the shared plan cache).");
  registry_.DefineCounter(kPlanCacheMisses, "Plan requests that found no cached plan.");
  registry_.DefineCounter(kPlansComputed, "Plans computed, by status (complete or partial).");
  registry_.DefineHistogram(kPlanComputeSeconds, "Time to compute one plan (DP/ILP), seconds.",
                            {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60});
  registry_.DefineCounter(kJobsEnqueued, "Benchmark jobs created by plan requests.");
  registry_.DefineCounter(kTimingsStored, "Timings written through TimingService.");
  registry_.DefineCounter(kAuthFailures, "Writes refused for a missing or wrong bearer token.");
  registry_.DefineCounter(kPlansEvicted,
                          "Least recently used plans deleted from the database's plan cache.");
  registry_.DefineGauge(kDatabaseUp, "1 when the database answered at the last scrape.");
  registry_.DefineGauge(kQueueDepth, "Benchmark jobs queued or running, all devices.");
  registry_.DefineGauge(kDeviceJobs, "Benchmark jobs per device and state.");
  registry_.DefineGauge(kPoolConnections, "Database pool connections, by state.");
  registry_.DefineGauge(kListenerConnected,
                        "1 when timing notifications (LISTEN) are being received.");
  registry_.DefineGauge(kCacheEntries, "Entries in this process's caches, by cache.");
  // Counters without labels (and the cache tiers) start at 0, so a dashboard sees them at once.
  for (const char* name :
       {kPlanCacheMisses, kJobsEnqueued, kTimingsStored, kAuthFailures, kPlansEvicted}) {
    registry_.Increment(name, {}, 0);
  }
  for (const char* tier : {"memory", "database"})
    registry_.Increment(kPlanCacheHits, {{"tier", tier}}, 0);
}

void ServerMetrics::RecordRpc(std::string_view method, grpc::StatusCode code, double seconds) {
  const Labels labels = {{"method", std::string(method)}, {"code", GrpcCodeName(code)}};
  registry_.Increment(kRpcRequests, labels);
  registry_.Observe(kRpcDuration, labels, seconds);
}

void ServerMetrics::RecordPlanCacheHit(std::string_view tier) {
  registry_.Increment(kPlanCacheHits, {{"tier", std::string(tier)}});
}

void ServerMetrics::RecordPlanCacheMiss() { registry_.Increment(kPlanCacheMisses); }

void ServerMetrics::RecordPlanComputed(bool complete, double seconds) {
  registry_.Increment(kPlansComputed, {{"status", complete ? "complete" : "partial"}});
  registry_.Observe(kPlanComputeSeconds, {}, seconds);
}

void ServerMetrics::RecordJobsEnqueued(int created) {
  if (created > 0) registry_.Increment(kJobsEnqueued, {}, created);
}

void ServerMetrics::RecordTimingsStored(int64_t count) {
  registry_.Increment(kTimingsStored, {}, static_cast<double>(count));
}

void ServerMetrics::RecordAuthFailure() { registry_.Increment(kAuthFailures); }

void ServerMetrics::RecordPlansEvicted(int64_t count) {
  if (count > 0) registry_.Increment(kPlansEvicted, {}, static_cast<double>(count));
}

void ServerMetrics::ApplySnapshot(const ScrapeSnapshot& s) {
  registry_.SetGauge(kDatabaseUp, {}, s.database_up ? 1 : 0);
  registry_.SetGauge(kListenerConnected, {}, s.listener_connected ? 1 : 0);
  registry_.SetGauge(kPoolConnections, {{"state", "open"}}, s.pool_open);
  registry_.SetGauge(kPoolConnections, {{"state", "in_use"}}, s.pool_in_use);
  registry_.SetGauge(kCacheEntries, {{"cache", "plans"}},
                     static_cast<double>(s.plan_cache_entries));
  registry_.SetGauge(kCacheEntries, {{"cache", "timings"}},
                     static_cast<double>(s.timings_cache_entries));
  if (!s.database_up) return;  // keep the last known values rather than report zeros
  registry_.SetGauge(kQueueDepth, {}, static_cast<double>(s.queue_depth));
  // Device labels come from rows only authorised callers create; still, past a cap the rest are
  // summed under "other" so that /metrics stays bounded.
  std::vector<DeviceJobGauge> devices(
      s.device_jobs.begin(),
      s.device_jobs.begin() +
          static_cast<std::ptrdiff_t>(std::min(s.device_jobs.size(), kMaxDeviceLabels - 1)));
  if (s.device_jobs.size() >= kMaxDeviceLabels) {
    DeviceJobGauge other{"other", "other"};
    for (size_t i = kMaxDeviceLabels - 1; i < s.device_jobs.size(); ++i) {
      const DeviceJobGauge& d = s.device_jobs[i];
      other.queued += d.queued;
      other.running += d.running;
      other.done += d.done;
      other.failed += d.failed;
      other.expired += d.expired;
    }
    devices.push_back(std::move(other));
  }
  std::vector<GaugeSample> samples;
  for (const auto& d : devices) {
    const std::pair<const char*, int64_t> states[] = {{"queued", d.queued},
                                                      {"running", d.running},
                                                      {"expired", d.expired},
                                                      {"done", d.done},
                                                      {"failed", d.failed}};
    for (const auto& [state, count] : states) {
      samples.push_back(
          {{{"device_hash", d.device_hash}, {"device", d.device_name}, {"state", state}},
           static_cast<double>(count)});
    }
  }
  registry_.ReplaceGauge(kDeviceJobs, std::move(samples));
}

void ServerMetrics::RecordRpcSince(std::string_view method, grpc::StatusCode code,
                                   std::chrono::steady_clock::time_point start) {
  RecordRpc(method, code,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace ucudnn::server
