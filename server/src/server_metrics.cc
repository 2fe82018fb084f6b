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

// Latency bounds: from half a millisecond (cached plans) to the longest allowed wait for
// benchmarks; a plan's computation (DP/ILP) from a tenth of a millisecond.
const prometheus::Histogram::BucketBoundaries kRpcSecondsBounds = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5,    1,     2.5,    5,     10,   30,    60,   300, 600};
const prometheus::Histogram::BucketBoundaries kPlanComputeBounds = {
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60};

}  // namespace

// Counters without labels (and the cache tiers) exist from the start at 0, so a dashboard sees
// them at once.
ServerMetrics::ServerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      rpc_requests_(metrics::AddCounter(*registry_, kRpcRequests,
                                        "RPCs finished, by method and gRPC status code."),
                    kMaxRpcLabelSets),
      rpc_duration_(metrics::AddHistogram(*registry_, kRpcDuration,
                                          "RPC latency in seconds, by method and status code."),
                    kMaxRpcLabelSets, kRpcSecondsBounds),
      plan_cache_hits_(metrics::AddCounter(*registry_, kPlanCacheHits,
                                           "Plans served from a cache, by tier (memory: this "
                                           "process's LRU; database: the shared plan cache)."),
                       kMaxPlanCacheTiers),
      plan_cache_misses_(metrics::AddCounter(*registry_, kPlanCacheMisses,
                                             "Plan requests that found no cached plan.")
                             .Add({})),
      plans_computed_(metrics::AddCounter(*registry_, kPlansComputed,
                                          "Plans computed, by status (complete or partial).")),
      plan_compute_seconds_(metrics::AddHistogram(*registry_, kPlanComputeSeconds,
                                                  "Time to compute one plan (DP/ILP), seconds.")
                                .Add({}, kPlanComputeBounds)),
      jobs_enqueued_(
          metrics::AddCounter(*registry_, kJobsEnqueued, "Benchmark jobs created by plan requests.")
              .Add({})),
      timings_stored_(
          metrics::AddCounter(*registry_, kTimingsStored, "Timings written through TimingService.")
              .Add({})),
      auth_failures_(metrics::AddCounter(*registry_, kAuthFailures,
                                         "Writes refused for a missing or wrong bearer token.")
                         .Add({})),
      plans_evicted_(
          metrics::AddCounter(*registry_, kPlansEvicted,
                              "Least recently used plans deleted from the database's plan cache.")
              .Add({})),
      database_up_(metrics::AddGauge(*registry_, kDatabaseUp,
                                     "1 when the database answered at the last scrape.")
                       .Add({})),
      queue_depth_(metrics::AddGauge(*registry_, kQueueDepth,
                                     "Benchmark jobs queued or running, all devices."),
                   1),
      device_jobs_(
          metrics::AddGauge(*registry_, kDeviceJobs, "Benchmark jobs per device and state."),
          kMaxDeviceLabels * 5),  // a label set per device and state
      pool_connections_(
          metrics::AddGauge(*registry_, kPoolConnections, "Database pool connections, by state.")),
      listener_connected_(metrics::AddGauge(*registry_, kListenerConnected,
                                            "1 when timing notifications (LISTEN) are being "
                                            "received.")
                              .Add({})),
      cache_entries_(metrics::AddGauge(*registry_, kCacheEntries,
                                       "Entries in this process's caches, by cache.")) {
  for (const char* tier : {"memory", "database"}) plan_cache_hits_.Get({{"tier", tier}});
}

std::string ServerMetrics::Render() const { return metrics::Render(registry_->Collect()); }

void ServerMetrics::RecordRpc(std::string_view method, grpc::StatusCode code, double seconds) {
  const metrics::Labels labels = {{"method", std::string(method)}, {"code", GrpcCodeName(code)}};
  if (auto* requests = rpc_requests_.Get(labels)) requests->Increment();
  if (auto* duration = rpc_duration_.Get(labels)) duration->Observe(seconds);
}

void ServerMetrics::RecordPlanCacheHit(std::string_view tier) {
  if (auto* hits = plan_cache_hits_.Get({{"tier", std::string(tier)}})) hits->Increment();
}

void ServerMetrics::RecordPlanCacheMiss() { plan_cache_misses_.Increment(); }

void ServerMetrics::RecordPlanComputed(bool complete, double seconds) {
  plans_computed_.Add({{"status", complete ? "complete" : "partial"}}).Increment();
  plan_compute_seconds_.Observe(seconds);
}

void ServerMetrics::RecordJobsEnqueued(int created) {
  if (created > 0) jobs_enqueued_.Increment(created);
}

void ServerMetrics::RecordTimingsStored(int64_t count) {
  if (count > 0) timings_stored_.Increment(static_cast<double>(count));
}

void ServerMetrics::RecordAuthFailure() { auth_failures_.Increment(); }

void ServerMetrics::RecordPlansEvicted(int64_t count) {
  if (count > 0) plans_evicted_.Increment(static_cast<double>(count));
}

void ServerMetrics::ApplySnapshot(const ScrapeSnapshot& s) {
  database_up_.Set(s.database_up ? 1 : 0);
  listener_connected_.Set(s.listener_connected ? 1 : 0);
  pool_connections_.Add({{"state", "open"}}).Set(s.pool_open);
  pool_connections_.Add({{"state", "in_use"}}).Set(s.pool_in_use);
  cache_entries_.Add({{"cache", "plans"}}).Set(static_cast<double>(s.plan_cache_entries));
  cache_entries_.Add({{"cache", "timings"}}).Set(static_cast<double>(s.timings_cache_entries));
  if (!s.database_up) return;  // keep the last known values rather than report zeros
  queue_depth_.Get({})->Set(static_cast<double>(s.queue_depth));
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
  std::vector<std::pair<metrics::Labels, double>> samples;
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
  device_jobs_.Replace(samples);
}

void ServerMetrics::RecordRpcSince(std::string_view method, grpc::StatusCode code,
                                   std::chrono::steady_clock::time_point start) {
  RecordRpc(method, code,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace ucudnn::server
