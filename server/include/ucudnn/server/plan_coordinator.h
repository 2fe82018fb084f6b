// The logic behind GetPlan, StreamPlan and ExplainPlan, free of gRPC service plumbing: validate,
// look the network's timings up (in-process cache, then one database round trip), serve a cached
// plan by content hash (in-process LRU, then the database's plan cache, shared by every
// replica), otherwise enqueue benchmark jobs for missing problems, wait for their timings
// (woken by NOTIFY), plan, and cache complete plans.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/status.h"
#include "ucudnn/server/lru_cache.h"
#include "ucudnn/server/server_metrics.h"
#include "ucudnn/server/timing_watcher.h"
#include "ucudnn/server/timings_cache.h"
#include "ucudnn/store/store.h"
#include "ucudnn/v1/ucudnn.pb.h"

namespace ucudnn::server {

struct PlanCoordinatorOptions {
  int max_kernels = 4096;
  size_t plan_cache_entries = 4096;
  std::chrono::milliseconds ilp_time_limit{10000};
  // While waiting for benchmarks, re-read this often even without a notification (a notification
  // can be lost while the listener reconnects).
  std::chrono::milliseconds recheck_interval{1000};
};

// One plan request as the services hand it over.
struct PlanCall {
  const v1::GetPlanRequest* request = nullptr;
  // Where the request sits in the call's message, for error messages: "" for GetPlan,
  // "request" for StreamPlan and ExplainPlan ("request.kernels[0].problem.c: ...").
  std::string_view field_path;
  // The request exactly as it arrived (GetPlan); when set, a complete plan is also remembered
  // under these bytes for TryServeFromMemo.
  std::string_view raw_request;
  // The call's gRPC deadline; time_point::max() when it has none.
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  // GetPlan/StreamPlan: enqueue jobs for missing problems and wait up to max_wait_ms.
  // ExplainPlan: neither (it writes nothing and answers at once).
  bool enqueue_and_wait = true;
  // The caller may create rows: jobs, problems, plan-cache rows (roles plan and admin). Without,
  // the plan is made from the timings there are and only the in-process caches are filled.
  bool may_write = true;
  // The caller may create a device row (roles submit and admin). Without, a device the store does
  // not know is planned read-only (nothing enqueued): a made-up device writes nothing.
  bool may_register_device = true;
  // Read and write the plan caches (ExplainPlan needs the NetworkPlan itself, so it plans).
  bool use_plan_cache = true;
  // StreamPlan's progress: problems with all timings present, of the total distinct problems.
  // Called once at the start and whenever the count changes.
  std::function<void(int ready, int total)> on_progress;
  // Whether the client went away (stop waiting).
  std::function<bool()> cancelled;
};

struct PlanOutcome {
  // The serialised v1::Plan (what the caches hold; GetPlan sends these bytes as they are).
  std::shared_ptr<const std::string> plan_bytes;
  bool from_cache = false;
  uint32_t waited_ms = 0;
  // The computed plan (absent when served from a cache).
  std::optional<NetworkPlan> network_plan;

  Result<v1::Plan> ParsePlan() const;
};

class PlanCoordinator {
 public:
  // `watcher` may be null (no waiting on notifications, only re-checks); `timings_cache` may be
  // null (every lookup reads the database).
  PlanCoordinator(store::Store* store, TimingWatcher* watcher, TimingsCache* timings_cache,
                  ServerMetrics* metrics, PlanCoordinatorOptions options);

  Result<PlanOutcome> Plan(const PlanCall& call);

  // The fast path of a repeated GetPlan: the serialised plan when exactly these request bytes
  // were answered with a complete plan before and none of the timing tables behind it changed
  // since (checked against the notification-invalidated timings cache); nullptr otherwise, and
  // then Plan() decides. Touches no database and parses nothing.
  std::shared_ptr<const std::string> TryServeFromMemo(std::string_view raw_request);

  // One problem's timings on one device through the timings cache; an empty table when none.
  Result<std::shared_ptr<const CachedTimings>> LoadTimings(const DeviceFingerprint& device,
                                                           const ConvProblem& problem);

  size_t plan_cache_size() const { return plan_lru_.size(); }
  // Calls waiting for benchmarks stop waiting and answer with what they have (shutdown).
  void StopWaiting();

 private:
  struct ProblemSlot;
  Status LoadTables(const DeviceFingerprint& device, uint64_t device_hash,
                    std::vector<ProblemSlot>& slots, bool only_missing);
  // The plan-cache key of a request planned from given tables, and the independent check hash
  // an in-process entry must also match (plan_key.h).
  struct ContentKey {
    uint64_t hash = 0;
    uint64_t check = 0;
  };
  std::shared_ptr<const std::string> LookupCachedPlan(const ContentKey& key,
                                                      const PlanRequest& request,
                                                      bool* from_database);
  void Remember(std::string_view raw_request, uint64_t device_hash,
                const std::vector<ProblemSlot>& slots, const ContentKey& key);
  // While the database is unreachable: the complete plan these exact request bytes were last
  // answered with, if this process still holds it (it may predate timings measured since, which
  // cannot be checked now); nullptr otherwise.
  std::shared_ptr<const std::string> LastKnownPlan(std::string_view raw_request);

  // A plan in the in-process cache, with the check hash of the content it answers.
  struct CachedPlan {
    uint64_t check = 0;
    std::shared_ptr<const std::string> bytes;
  };

  // What a complete answer to some request bytes depended on.
  struct RequestMemo {
    std::string request;  // the bytes, compared in full (the key is only their hash)
    uint64_t device_hash = 0;
    std::vector<std::pair<uint64_t, uint64_t>> problem_digests;  // (problem hash, table digest)
    ContentKey content_key;
  };

  store::Store* store_;
  TimingWatcher* watcher_;
  TimingsCache* timings_cache_;
  ServerMetrics* metrics_;
  PlanCoordinatorOptions options_;
  LruCache<uint64_t, CachedPlan> plan_lru_;  // content key -> serialised plan
  LruCache<uint64_t, RequestMemo> memo_;     // hash of request bytes -> memo
  std::atomic<bool> stopping_{false};
};

// GetPlanResponse{plan, from_cache, waited_ms} in protobuf wire format around already serialised
// plan bytes, as (prefix, suffix): the response is prefix + plan bytes + suffix, so the plan is
// never copied into a message and serialised again.
std::pair<std::string, std::string> GetPlanResponseFraming(size_t plan_bytes, bool from_cache,
                                                           uint32_t waited_ms);

// Whether `table` holds a measurement at every micro-batch size a benchmark job for
// (`policy`, `max_micro_batch`) measures; only then is the problem planned rather than missing.
bool TableCovers(const CachedTimings& timings, BatchPolicy policy, int64_t max_micro_batch);

}  // namespace ucudnn::server
