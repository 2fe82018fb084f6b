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
#include "ucudnn/server/recent_jobs.h"
#include "ucudnn/server/server_metrics.h"
#include "ucudnn/server/thread_pool.h"
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
  // How long a job's enqueue or state read answers the same question of other requests.
  std::chrono::milliseconds recent_jobs_ttl{500};
  // Per-kernel requests: a problem is covered, and its job measures, at the sizes its kernels'
  // smallest workspace limit can use (SizesForLimit); false: every size of the policy.
  bool sizes_for_limit = false;
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
  // When the call arrived: max_wait_ms counts from here (absent: when planning starts).
  std::optional<std::chrono::steady_clock::time_point> received;
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

  // Plans on the calling thread, waiting on it for benchmarks (ExplainPlan, tests).
  Result<PlanOutcome> Plan(const PlanCall& call);
  // The same phases on `pool`'s threads; waiting for benchmarks holds no thread (a timed task
  // and a notification callback do). `done` runs exactly once, on a pool thread. What `call`
  // points to (request, raw bytes, callbacks' captures) must stay valid until then.
  using PlanDone = std::function<void(Result<PlanOutcome>)>;
  void PlanAsync(const PlanCall& call, ThreadPool* pool, PlanDone done);

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
  using Clock = std::chrono::steady_clock;
  struct ProblemSlot;
  struct Planning;       // one request between its phases
  struct AsyncPlanning;  // ... and PlanAsync's continuation
  // The plan-cache key of a request planned from given tables, and the independent check hash
  // an in-process entry must also match (plan_key.h).
  struct ContentKey {
    uint64_t hash = 0;
    uint64_t check = 0;
  };

  // The phases, in order. Prepare: validate, group the distinct problems, read their timings,
  // answer from a plan cache when complete. EnqueueMissing: jobs for what is missing, and the
  // wait for them begins. RecheckTimings (each wake-up): re-read what is missing and the states
  // of its jobs; the wait ends when it all landed, nothing is left to wait for (the jobs left
  // failed), or the time is up. Then Solve within the
  // deadline, Encode, and cache (SolveEncodeCache).
  Status Prepare(Planning& p);
  void GroupDistinctProblems(Planning& p);
  Status EnqueueMissing(Planning& p);
  // store::EnqueueJobs for the problems of `slots` (keys[i] says at which sizes), remembered in
  // recent_jobs_; counts the jobs created.
  Result<std::vector<RecentJobs::Job>> EnqueueJobs(const DeviceFingerprint& device,
                                                   const std::vector<ProblemSlot*>& slots,
                                                   const std::vector<RecentJobs::Key>& keys,
                                                   int* created);
  Status RecheckTimings(Planning& p);
  void RefreshJobStates(Planning& p);
  // The ILP's time limit: the configured one, unless the call's deadline leaves less (`cut`).
  static double IlpTimeLimit(const Planning& p, bool* cut);
  Result<NetworkPlan> Solve(const Planning& p, double ilp_time_limit_s);
  Result<std::shared_ptr<const std::string>> Encode(const Planning& p,
                                                    const NetworkPlan& network_plan,
                                                    const ContentKey& key);
  void CachePlan(const Planning& p, const NetworkPlan& network_plan, const ContentKey& key,
                 bool ilp_limit_cut, const std::shared_ptr<const std::string>& bytes);
  Status SolveEncodeCache(Planning& p);
  // Runs the phases until the request waits for benchmarks (returns when to re-check at the
  // latest) or has its answer (nullopt).
  using WakeAt = std::optional<Clock::time_point>;
  Result<WakeAt> Advance(Planning& p);

  // Covered problems counted again (reports progress when the count changed).
  void UpdateCoverage(Planning& p);
  std::string ContentTextOf(const Planning& p) const;
  ContentKey KeyOf(const Planning& p) const;
  // Everything a partial plan depends on: the request, and what each problem has (timings, job).
  static std::string PartialPlanKey(const Planning& p);
  // A cached plan for the current timings, from this process or the shared database cache.
  bool ServeCachedPlan(Planning& p);
  static std::vector<uint64_t> MissingHashes(const Planning& p);

  // PlanAsync: run the next phases; wait (Arm) until a notification or the re-check time wakes
  // the call (Wake), whichever comes first.
  void Continue(const std::shared_ptr<AsyncPlanning>& task);
  void Arm(const std::shared_ptr<AsyncPlanning>& task, Clock::time_point wake_at);
  void Wake(const std::shared_ptr<AsyncPlanning>& task, uint64_t ticket);

  Status LoadTables(const DeviceFingerprint& device, uint64_t device_hash,
                    std::vector<ProblemSlot>& slots, bool only_missing);
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
  // A partial plan by the hash of its PartialPlanKey (compared in full: in-process only).
  struct PartialPlan {
    std::string key;
    std::shared_ptr<const std::string> bytes;
  };
  LruCache<size_t, PartialPlan> partial_lru_;
  RecentJobs recent_jobs_;
  std::atomic<bool> stopping_{false};
};

// GetPlanResponse{plan, from_cache, waited_ms} in protobuf wire format around already serialised
// plan bytes, as (prefix, suffix): the response is prefix + plan bytes + suffix, so the plan is
// never copied into a message and serialised again.
std::pair<std::string, std::string> GetPlanResponseFraming(size_t plan_bytes, bool from_cache,
                                                           uint32_t waited_ms);

// Whether `table` holds a measurement at every micro-batch size a benchmark job for
// (`policy`, `max_micro_batch`, `workspace_limit`) measures: with a limit, the sizes the size
// rule asks of the table for it (NextSizesForLimit asks none); without, every size of the
// policy. Only then is the problem planned rather than missing.
bool TableCovers(const CachedTimings& timings, BatchPolicy policy, int64_t max_micro_batch,
                 std::optional<uint64_t> workspace_limit = std::nullopt);

}  // namespace ucudnn::server
