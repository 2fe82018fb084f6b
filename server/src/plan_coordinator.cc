#include "ucudnn/server/plan_coordinator.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/size_rule.h"
#include "ucudnn/planner/planner.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/server/plan_key.h"
#include "ucudnn/server/request_validation.h"

namespace ucudnn::server {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Jobs remembered by RecentJobs (each entry is a few dozen bytes).
constexpr size_t kRecentJobs = 65536;
// Partial plans remembered for identical requests (PartialKeyOf).
constexpr size_t kPartialPlans = 256;

// A deadline further away than this is "no deadline" (gRPC's infinite future).
constexpr auto kNoDeadline = std::chrono::hours(24 * 365);

// Time left before `deadline`, or nullopt when the call has none.
std::optional<milliseconds> Remaining(std::chrono::system_clock::time_point deadline) {
  const auto now = std::chrono::system_clock::now();
  if (deadline >= now + kNoDeadline) return std::nullopt;
  if (deadline <= now) return milliseconds(0);
  return std::chrono::duration_cast<milliseconds>(deadline - now);
}

// What is kept back from the deadline for planning and answering after a wait.
milliseconds AnswerMargin(milliseconds remaining) {
  return std::clamp(remaining / 10, milliseconds(20), milliseconds(500));
}

std::string JobStateName(store::JobState state) { return std::string(store::ToString(state)); }

void AppendVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

// The memo is in-process only, so any fast hash will do; entries compare the full bytes anyway.
uint64_t MemoKey(std::string_view raw_request) {
  return std::hash<std::string_view>{}(raw_request);
}

// `text` within `max_bytes`, cut on a UTF-8 character boundary (plan strings must stay UTF-8).
std::string Truncated(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end)) + "...";
}

// Problems whose job failed for good wait for no one: nothing will measure them.
bool Failed(std::string_view job_state) { return job_state == "failed"; }

// Why a kernel is missing: which micro-batch sizes lack timings, and the state of the job that
// measures them (its error when it failed). At most a few hundred bytes plus 1 KiB of error,
// well within the 4 KiB a plan's reason may hold.
std::string MissingReason(const CachedTimings& timings, BatchPolicy policy, int64_t max_micro_batch,
                          int64_t job_id, std::string_view job_state, std::string_view job_error) {
  std::string reason;
  if (timings.table.entries.empty()) {
    reason = "no timings for this problem on this device";
  } else {
    const std::vector<int64_t> needed = MicroBatchSizes(policy, max_micro_batch);
    std::vector<int64_t> absent;
    for (int64_t size : needed) {
      if (!std::binary_search(timings.micro_batches.begin(), timings.micro_batches.end(), size)) {
        absent.push_back(size);
      }
    }
    constexpr size_t kListed = 8;
    reason = "no timings at micro-batch size";
    reason += absent.size() == 1 ? " " : "s ";
    for (size_t i = 0; i < absent.size() && i < kListed; ++i) {
      if (i > 0) reason += ", ";
      reason += std::to_string(absent[i]);
    }
    if (absent.size() > kListed) reason += ", ... (" + std::to_string(absent.size()) + " sizes)";
    reason += "; " + std::to_string(needed.size() - absent.size()) + " of " +
              std::to_string(needed.size()) + " sizes measured";
  }
  if (job_id > 0) {
    const std::string id = std::to_string(job_id);
    if (Failed(job_state)) {
      reason += "; benchmark job " + id + " failed: " + Truncated(job_error, 1024) +
                " (`ucudnn jobs --retry " + id + "` re-queues it)";
    } else {
      reason += "; benchmark job " + id + " is " + std::string(job_state);
    }
  }
  return reason;
}

}  // namespace

std::pair<std::string, std::string> GetPlanResponseFraming(size_t plan_bytes, bool from_cache,
                                                           uint32_t waited_ms) {
  // Field numbers of GetPlanResponse: plan = 1 (length-delimited), from_cache = 2 and
  // waited_ms = 3 (varints); proto3 leaves out false and 0.
  std::string prefix;
  prefix += static_cast<char>((1 << 3) | 2);
  AppendVarint(prefix, plan_bytes);
  std::string suffix;
  if (from_cache) {
    suffix += static_cast<char>((2 << 3) | 0);
    suffix += static_cast<char>(1);
  }
  if (waited_ms != 0) {
    suffix += static_cast<char>((3 << 3) | 0);
    AppendVarint(suffix, waited_ms);
  }
  return {std::move(prefix), std::move(suffix)};
}

Result<v1::Plan> PlanOutcome::ParsePlan() const {
  v1::Plan plan;
  if (!plan_bytes || !plan.ParseFromString(*plan_bytes)) return Internal("unreadable plan");
  return plan;
}

// One distinct problem of the request (kernels often repeat a problem at other positions).
struct PlanCoordinator::ProblemSlot {
  ConvProblem problem;
  uint64_t hash = 0;
  int64_t max_mini_batch = 0;
  // The sizes its job measures and coverage needs: those of the smallest workspace limit of its
  // kernels (per-kernel requests, PlanCoordinatorOptions::sizes_for_limit); none: every size.
  std::optional<uint64_t> workspace_limit;
  std::shared_ptr<const CachedTimings> timings;  // never null after LoadTables
  bool covered = false;
  int64_t job_id = 0;
  std::string job_state;
  std::string job_error;  // when job_state is "failed"
};

bool TableCovers(const CachedTimings& timings, BatchPolicy policy, int64_t max_micro_batch,
                 std::optional<uint64_t> workspace_limit) {
  if (timings.micro_batches.empty()) return false;
  if (workspace_limit.has_value()) {
    return NextSizesForLimit(timings.table, MicroBatchSizes(policy, max_micro_batch),
                             max_micro_batch, *workspace_limit)
        .empty();
  }
  for (int64_t size : MicroBatchSizes(policy, max_micro_batch)) {
    if (!std::binary_search(timings.micro_batches.begin(), timings.micro_batches.end(), size)) {
      return false;
    }
  }
  return true;
}

PlanCoordinator::PlanCoordinator(store::Store* store, TimingWatcher* watcher,
                                 TimingsCache* timings_cache, ServerMetrics* metrics,
                                 PlanCoordinatorOptions options)
    : store_(store),
      watcher_(watcher),
      timings_cache_(timings_cache),
      metrics_(metrics),
      options_(options),
      plan_lru_(options.plan_cache_entries),
      memo_(options.plan_cache_entries),
      partial_lru_(kPartialPlans),
      recent_jobs_(options.recent_jobs_ttl, kRecentJobs) {}

void PlanCoordinator::StopWaiting() {
  stopping_ = true;
  if (watcher_ != nullptr) watcher_->WakeAll();
}

Status PlanCoordinator::LoadTables(const DeviceFingerprint& device, uint64_t device_hash,
                                   std::vector<ProblemSlot>& slots, bool only_missing) {
  std::vector<size_t> to_read;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (only_missing && slots[i].covered) continue;
    if (timings_cache_ != nullptr) {
      if (auto cached = timings_cache_->Get({device_hash, slots[i].hash})) {
        slots[i].timings = std::move(cached);
        continue;
      }
    }
    to_read.push_back(i);
  }
  if (to_read.empty()) return Status::Ok();
  // Taken before the read: a notification arriving meanwhile makes Put drop what was read.
  const uint64_t epoch = timings_cache_ != nullptr ? timings_cache_->epoch() : 0;
  std::vector<ConvProblem> problems;
  problems.reserve(to_read.size());
  for (size_t i : to_read) problems.push_back(slots[i].problem);
  UCUDNN_ASSIGN_OR_RETURN(auto tables, store_->GetTimingsForProblems(device, problems));
  if (tables.size() != to_read.size()) {
    return Internal("store returned " + std::to_string(tables.size()) + " tables for " +
                    std::to_string(to_read.size()) + " problems");
  }
  for (size_t j = 0; j < to_read.size(); ++j) {
    std::shared_ptr<const CachedTimings> entry = MakeCachedTimings(std::move(tables[j]));
    ProblemSlot& slot = slots[to_read[j]];
    if (timings_cache_ != nullptr) timings_cache_->Put({device_hash, slot.hash}, entry, epoch);
    slot.timings = std::move(entry);
  }
  return Status::Ok();
}

Result<std::shared_ptr<const CachedTimings>> PlanCoordinator::LoadTimings(
    const DeviceFingerprint& device, const ConvProblem& problem) {
  std::vector<ProblemSlot> slots(1);
  slots[0].problem = problem;
  slots[0].hash = StableHash(problem);
  UCUDNN_RETURN_IF_ERROR(LoadTables(device, device.Hash(), slots, /*only_missing=*/false));
  return slots[0].timings;
}

std::shared_ptr<const std::string> PlanCoordinator::LookupCachedPlan(const ContentKey& key,
                                                                     const PlanRequest& request,
                                                                     bool* from_database) {
  *from_database = false;
  if (auto cached = plan_lru_.Get(key.hash)) {
    if (cached->check == key.check) return cached->bytes;
    // Another content under the same 64-bit key: not this request's plan.
    spdlog::warn("plan cache key {} collides in process; recomputing", HashHex(key.hash));
  }
  auto bytes = store_->GetCachedPlan(key.hash);
  if (!bytes.ok()) {
    // The cache is an optimisation: a failed read means computing the plan again.
    spdlog::warn("plan cache read failed: {}", bytes.status().ToString());
    return nullptr;
  }
  if (!bytes->has_value()) return nullptr;
  v1::Plan plan;
  if (!plan.ParseFromString(**bytes) || plan.schema_version() != kPlanSchemaVersion ||
      plan.plan_hash() != HashHex(key.hash)) {
    spdlog::warn("plan cache entry {} unreadable or of another version; recomputing",
                 HashHex(key.hash));
    return nullptr;
  }
  if (!PlanAnswersRequest(plan, request)) {
    spdlog::warn("plan cache entry {} answers another request (64-bit key collision); recomputing",
                 HashHex(key.hash));
    return nullptr;
  }
  *from_database = true;
  auto shared = std::make_shared<const std::string>(std::move(**bytes));
  plan_lru_.Put(key.hash, std::make_shared<const CachedPlan>(CachedPlan{key.check, shared}));
  return shared;
}

void PlanCoordinator::Remember(std::string_view raw_request, uint64_t device_hash,
                               const std::vector<ProblemSlot>& slots, const ContentKey& key) {
  if (raw_request.empty() || timings_cache_ == nullptr || !timings_cache_->live()) return;
  auto memo = std::make_shared<RequestMemo>();
  memo->request = std::string(raw_request);
  memo->device_hash = device_hash;
  memo->content_key = key;
  memo->problem_digests.reserve(slots.size());
  for (const auto& slot : slots)
    memo->problem_digests.emplace_back(slot.hash, slot.timings->digest);
  memo_.Put(MemoKey(raw_request), std::move(memo));
}

std::shared_ptr<const std::string> PlanCoordinator::TryServeFromMemo(std::string_view raw_request) {
  if (timings_cache_ == nullptr || memo_.capacity() == 0) return nullptr;
  const auto memo = memo_.Get(MemoKey(raw_request));
  if (!memo || memo->request != raw_request) return nullptr;
  for (const auto& [problem_hash, digest] : memo->problem_digests) {
    const auto timings = timings_cache_->Get({memo->device_hash, problem_hash});
    if (!timings || timings->digest != digest) return nullptr;
  }
  const auto cached = plan_lru_.Get(memo->content_key.hash);
  if (!cached || cached->check != memo->content_key.check) return nullptr;
  if (metrics_) metrics_->RecordPlanCacheHit("memory");
  return cached->bytes;
}

std::shared_ptr<const std::string> PlanCoordinator::LastKnownPlan(std::string_view raw_request) {
  if (raw_request.empty() || memo_.capacity() == 0) return nullptr;
  const auto memo = memo_.Get(MemoKey(raw_request));
  if (!memo || memo->request != raw_request) return nullptr;
  const auto cached = plan_lru_.Get(memo->content_key.hash);
  if (!cached || cached->check != memo->content_key.check) return nullptr;
  return cached->bytes;
}

// One plan request between its phases.
struct PlanCoordinator::Planning {
  explicit Planning(const PlanCall& plan_call)
      : call(plan_call), received(plan_call.received.value_or(Clock::now())) {}

  PlanCall call;
  Clock::time_point received;  // max_wait_ms counts from here
  PlanRequest request;
  uint64_t device_hash = 0;
  std::vector<ProblemSlot> slots;      // distinct problems, in first-seen order
  std::vector<size_t> slot_of_kernel;  // request.kernels[k] is slots[slot_of_kernel[k]]
  int ready = 0;                       // slots covered
  bool prepared = false;
  bool done = false;  // `outcome` is the answer
  PlanOutcome outcome;
  // While waiting for benchmarks.
  bool waiting = false;
  Clock::time_point wait_start;
  Clock::time_point wait_until;
  std::unique_ptr<TimingSubscription> subscription;  // to the problems it waits for
  size_t waiting_for = 0;                            // how many
  WakeReason woken;                                  // what arrived since the last round
  bool rechecked = false;                            // a round re-read the timings

  int total() const { return static_cast<int>(slots.size()); }
};

void PlanCoordinator::GroupDistinctProblems(Planning& p) {
  std::unordered_map<uint64_t, size_t> index;
  p.slot_of_kernel.resize(p.request.kernels.size());
  for (size_t k = 0; k < p.request.kernels.size(); ++k) {
    const Kernel& kernel = p.request.kernels[k];
    const uint64_t hash = StableHash(kernel.problem);
    auto [it, inserted] = index.emplace(hash, p.slots.size());
    if (inserted) {
      ProblemSlot slot;
      slot.problem = kernel.problem;
      slot.hash = hash;
      p.slots.push_back(std::move(slot));
    }
    ProblemSlot& slot = p.slots[it->second];
    slot.max_mini_batch = std::max(slot.max_mini_batch, kernel.mini_batch);
    if (options_.sizes_for_limit && p.request.workspace_mode == WorkspaceMode::kPerKernel) {
      const uint64_t limit = kernel.workspace_limit.value_or(p.request.workspace_bytes);
      slot.workspace_limit = std::min(slot.workspace_limit.value_or(limit), limit);
    }
    p.slot_of_kernel[k] = it->second;
  }
}

void PlanCoordinator::UpdateCoverage(Planning& p) {
  int ready = 0;
  for (auto& slot : p.slots) {
    slot.covered =
        TableCovers(*slot.timings, p.request.policy, slot.max_mini_batch, slot.workspace_limit);
    ready += slot.covered ? 1 : 0;
  }
  if (ready != p.ready && p.call.on_progress) p.call.on_progress(ready, p.total());
  p.ready = ready;
}

std::string PlanCoordinator::ContentTextOf(const Planning& p) const {
  std::vector<std::optional<uint64_t>> digests(p.request.kernels.size());
  for (size_t k = 0; k < p.request.kernels.size(); ++k) {
    const ProblemSlot& slot = p.slots[p.slot_of_kernel[k]];
    if (slot.covered) digests[k] = slot.timings->digest;
  }
  return PlanContentText(p.request, digests);
}

PlanCoordinator::ContentKey PlanCoordinator::KeyOf(const Planning& p) const {
  const std::string text = ContentTextOf(p);
  return ContentKey{Fnv1a64(text), PlanContentCheck(text)};
}

std::string PlanCoordinator::PartialPlanKey(const Planning& p) {
  // The request (its bytes as they came, when there are: cheaper than its canonical text), then
  // what each problem has: its timings, and when missing, what its job does.
  std::string key = p.call.raw_request.empty() ? CanonicalPlanRequest(p.request)
                                               : std::string(p.call.raw_request);
  for (const auto& slot : p.slots) {
    key += '|';
    key += std::to_string(slot.timings->digest);
    if (slot.covered) continue;
    key += ' ' + std::to_string(slot.job_id) + ' ' + slot.job_state + ' ' + slot.job_error;
  }
  return key;
}

bool PlanCoordinator::ServeCachedPlan(Planning& p) {
  if (!p.call.use_plan_cache) return false;
  const ContentKey key = KeyOf(p);
  bool from_database = false;
  p.outcome.plan_bytes = LookupCachedPlan(key, p.request, &from_database);
  if (!p.outcome.plan_bytes) return false;
  p.outcome.from_cache = true;
  if (metrics_) metrics_->RecordPlanCacheHit(from_database ? "database" : "memory");
  Remember(p.call.raw_request, p.device_hash, p.slots, key);
  p.done = true;
  return true;
}

Status PlanCoordinator::Prepare(Planning& p) {
  UCUDNN_ASSIGN_OR_RETURN(
      p.request, ValidatePlanRequest(*p.call.request, p.call.field_path, options_.max_kernels));
  // The configured ILP limit is part of the content (mode total_sum): a replica configured
  // otherwise computes, and caches, its own plan. A deadline may shorten the limit of one solve
  // (Solve); such a plan is not cached.
  p.request.ilp_time_limit_s = std::chrono::duration<double>(options_.ilp_time_limit).count();
  p.device_hash = p.request.device.Hash();
  GroupDistinctProblems(p);

  if (Status loaded = LoadTables(p.request.device, p.device_hash, p.slots, false); !loaded.ok()) {
    // A database outage need not stop jobs whose plans this process already answered.
    if (loaded.code() != StatusCode::kUnavailable) return loaded;
    auto last = LastKnownPlan(p.call.raw_request);
    if (!last) return loaded;
    spdlog::debug("database unavailable; answering a plan from the in-process cache");
    if (metrics_) metrics_->RecordPlanCacheHit("memory_database_down");
    p.outcome.plan_bytes = std::move(last);
    p.outcome.from_cache = true;
    p.done = true;
    return Status::Ok();
  }
  p.ready = -1;  // the first count is always reported
  UpdateCoverage(p);
  if (p.ready == p.total() && ServeCachedPlan(p)) return Status::Ok();
  if (p.call.use_plan_cache && metrics_) metrics_->RecordPlanCacheMiss();
  return Status::Ok();
}

Status PlanCoordinator::EnqueueMissing(Planning& p) {
  bool enqueue = p.call.enqueue_and_wait && p.call.may_write && p.ready < p.total();
  if (enqueue && !p.call.may_register_device) {
    UCUDNN_ASSIGN_OR_RETURN(enqueue, store_->DeviceExists(p.device_hash));
    if (!enqueue) {
      spdlog::debug(
          "device {} is not registered and the caller may not register it: planned read-only",
          HashHex(p.device_hash));
    }
  }
  if (!enqueue) return Status::Ok();
  std::vector<ProblemSlot*> wanted;
  std::vector<RecentJobs::Key> keys;
  for (auto& slot : p.slots) {
    if (slot.covered) continue;
    wanted.push_back(&slot);
    keys.push_back(
        {p.device_hash, slot.hash, p.request.policy, slot.max_mini_batch, slot.workspace_limit});
  }
  // What the same request enqueued a moment ago is still queued (a burst asks the database once).
  auto jobs = recent_jobs_.Enqueued(keys, Clock::now());
  int created = 0;
  if (!jobs) {
    UCUDNN_ASSIGN_OR_RETURN(jobs, EnqueueJobs(p.request.device, wanted, keys, &created));
  }
  int failed_jobs = 0;
  for (size_t i = 0; i < wanted.size(); ++i) {
    ProblemSlot& slot = *wanted[i];
    slot.job_id = (*jobs)[i].id;
    slot.job_state = (*jobs)[i].state;
    slot.job_error = (*jobs)[i].error;
    failed_jobs += Failed(slot.job_state) ? 1 : 0;
  }
  if (created > 0) {
    spdlog::info("enqueued {} benchmark job(s) for device {}", created, HashHex(p.device_hash));
  }
  if (failed_jobs > 0) {
    spdlog::info("{} missing problem(s) of device {} have failed jobs in their cool-down",
                 failed_jobs, HashHex(p.device_hash));
  }
  // The wait counts from the call's arrival: the time spent reaching the database is part of it.
  const auto now = Clock::now();
  p.wait_until = p.received + milliseconds(p.call.request->max_wait_ms());
  if (p.ready + failed_jobs == p.total()) p.wait_until = now;
  if (const auto remaining = Remaining(p.call.deadline)) {
    p.wait_until =
        std::min(p.wait_until, now + (*remaining - std::min(*remaining, AnswerMargin(*remaining))));
  }
  if (p.wait_until <= now) return Status::Ok();
  p.waiting = true;
  p.wait_start = now;
  // Subscribed first, then re-read (RecheckTimings): whatever lands after that read wakes the
  // wait.
  const std::vector<uint64_t> missing = MissingHashes(p);
  p.waiting_for = missing.size();
  if (watcher_ != nullptr) p.subscription = watcher_->Subscribe(p.device_hash, missing);
  return Status::Ok();
}

Result<std::vector<RecentJobs::Job>> PlanCoordinator::EnqueueJobs(
    const DeviceFingerprint& device, const std::vector<ProblemSlot*>& slots,
    const std::vector<RecentJobs::Key>& keys, int* created) {
  // Every missing problem in one transaction.
  std::vector<store::JobRequest> wanted;
  for (size_t i = 0; i < slots.size(); ++i) {
    wanted.push_back(
        {slots[i]->problem, keys[i].max_micro_batch, keys[i].policy, keys[i].workspace_limit});
  }
  UCUDNN_ASSIGN_OR_RETURN(auto enqueued, store_->EnqueueJobs(device, wanted));
  if (enqueued.size() != wanted.size()) return Internal("enqueue answered the wrong count");
  std::vector<RecentJobs::Job> jobs;
  const auto now = Clock::now();
  for (size_t i = 0; i < enqueued.size(); ++i) {
    jobs.push_back({enqueued[i].job_id, JobStateName(enqueued[i].state), enqueued[i].error});
    recent_jobs_.PutEnqueued(keys[i], jobs.back(), now);
    *created += enqueued[i].created ? 1 : 0;
  }
  if (metrics_) metrics_->RecordJobsEnqueued(*created);
  return jobs;
}

std::vector<uint64_t> PlanCoordinator::MissingHashes(const Planning& p) {
  std::vector<uint64_t> hashes;
  for (const auto& slot : p.slots) {
    if (!slot.covered && !Failed(slot.job_state)) hashes.push_back(slot.hash);
  }
  return hashes;
}

void PlanCoordinator::RefreshJobStates(Planning& p) {
  // A job may have moved on since it was enqueued (queued -> running, or failed: then nothing
  // will measure its problem and the request stops waiting for it). Read again, unless another
  // request read it a moment ago. The jobs to read again are read in one query.
  std::vector<std::optional<RecentJobs::Job>> known(p.slots.size());
  std::vector<bool> refreshed(p.slots.size(), false);
  std::vector<int64_t> to_read;
  for (size_t i = 0; i < p.slots.size(); ++i) {
    const ProblemSlot& slot = p.slots[i];
    if (slot.covered || slot.job_id == 0 || Failed(slot.job_state)) continue;
    refreshed[i] = true;
    auto [recent, read_again] = recent_jobs_.GetOrClaim(slot.job_id, Clock::now());
    known[i] = std::move(recent);
    if (read_again) to_read.push_back(slot.job_id);
  }
  std::unordered_map<int64_t, RecentJobs::Job> read;
  if (auto jobs = store_->GetJobs(to_read); jobs.ok()) {
    for (const store::Job& job : *jobs) {
      RecentJobs::Job recent{job.id, JobStateName(job.state), job.error};
      recent_jobs_.Put(recent, Clock::now());
      read.emplace(job.id, std::move(recent));
    }
  }
  for (size_t i = 0; i < p.slots.size(); ++i) {
    if (!refreshed[i]) continue;
    ProblemSlot& slot = p.slots[i];
    if (auto it = read.find(slot.job_id); it != read.end()) known[i] = it->second;
    if (!known[i]) continue;
    slot.job_state = known[i]->state;
    if (Failed(slot.job_state)) slot.job_error = known[i]->error;
  }
}

Status PlanCoordinator::RecheckTimings(Planning& p) {
  // What woke this round (Plan's WaitUntil, or PlanAsync's wake-up) is covered by the read below.
  if (p.subscription) {
    WakeReason more = p.subscription->TakeWakeReason();
    p.woken.reset |= more.reset;
    p.woken.landed.insert(p.woken.landed.end(), more.landed.begin(), more.landed.end());
  }
  // Nothing landed for these problems, and the notifications kept arriving all along (a lost
  // connection would have been a reset): the timings read last round are still current. The
  // first round reads in any case (the subscription came after the enqueue's read).
  const bool unchanged = p.rechecked && p.woken.landed.empty() && !p.woken.reset &&
                         watcher_ != nullptr && watcher_->connected() &&
                         timings_cache_ != nullptr && timings_cache_->live();
  p.woken = WakeReason();
  p.rechecked = true;
  if (!unchanged) {
    UCUDNN_RETURN_IF_ERROR(LoadTables(p.request.device, p.device_hash, p.slots, true));
  }
  UpdateCoverage(p);
  RefreshJobStates(p);
  const std::vector<uint64_t> missing = MissingHashes(p);
  const bool keep_waiting = p.ready < p.total() && !missing.empty() && !stopping_.load() &&
                            !(p.call.cancelled && p.call.cancelled()) &&
                            Clock::now() < p.wait_until;
  if (keep_waiting) {
    // Missing problems only ever land, so a count that did not change is the same set.
    if (p.subscription && missing.size() != p.waiting_for) p.subscription->SetProblems(missing);
    p.waiting_for = missing.size();
    return Status::Ok();
  }
  p.waiting = false;
  p.subscription.reset();
  p.outcome.waited_ms = static_cast<uint32_t>(
      std::chrono::duration_cast<milliseconds>(Clock::now() - p.wait_start).count());
  if (p.ready == p.total()) ServeCachedPlan(p);
  return Status::Ok();
}

double PlanCoordinator::IlpTimeLimit(const Planning& p, bool* cut) {
  *cut = false;
  double limit = p.request.ilp_time_limit_s;
  if (const auto remaining = Remaining(p.call.deadline)) {
    const double allowed =
        std::chrono::duration<double>(*remaining - AnswerMargin(*remaining)).count();
    if (allowed < limit) {
      limit = std::max(0.01, allowed);
      *cut = true;
    }
  }
  return limit;
}

Result<NetworkPlan> PlanCoordinator::Solve(const Planning& p, double ilp_time_limit_s) {
  // Missing problems get no table.
  std::vector<const TimingTable*> tables(p.request.kernels.size());
  for (size_t k = 0; k < p.request.kernels.size(); ++k) {
    const ProblemSlot& slot = p.slots[p.slot_of_kernel[k]];
    tables[k] = slot.covered ? &slot.timings->table : nullptr;
  }
  PlanRequest solve = p.request;
  solve.ilp_time_limit_s = ilp_time_limit_s;
  const auto plan_start = Clock::now();
  UCUDNN_ASSIGN_OR_RETURN(NetworkPlan network_plan, PlanNetwork(solve, tables));
  const double plan_seconds = std::chrono::duration<double>(Clock::now() - plan_start).count();
  if (metrics_) metrics_->RecordPlanComputed(network_plan.complete, plan_seconds);
  return network_plan;
}

Result<std::shared_ptr<const std::string>> PlanCoordinator::Encode(const Planning& p,
                                                                   const NetworkPlan& network_plan,
                                                                   const ContentKey& key) {
  v1::Plan plan = ToProto(network_plan, p.request.device);
  plan.set_plan_hash(HashHex(key.hash));
  for (const auto& slot : p.slots) {
    if (slot.covered) continue;
    v1::MissingProblem* missing = plan.add_missing();
    *missing->mutable_problem() = ToProto(slot.problem);
    missing->set_problem_hash(HashHex(slot.hash));
    missing->set_max_micro_batch(slot.max_mini_batch);
    missing->set_job_id(slot.job_id);
    missing->set_job_state(slot.job_state);
    if (Failed(slot.job_state)) missing->set_error(slot.job_error);
  }
  // A kernel without a full table says what exactly is missing, and why when its job failed.
  for (size_t k = 0; k < p.request.kernels.size(); ++k) {
    const ProblemSlot& slot = p.slots[p.slot_of_kernel[k]];
    if (slot.covered) continue;
    v1::KernelPlan* kernel = plan.mutable_kernels(static_cast<int>(k));
    if (kernel->status() != v1::KERNEL_PLAN_STATUS_MISSING) continue;
    kernel->set_reason(MissingReason(*slot.timings, p.request.policy, slot.max_mini_batch,
                                     slot.job_id, slot.job_state, slot.job_error));
    // The framework's own time may be known before ucudnn's timings are: the client then need
    // not measure it again.
    if (const Timing* framework = FindFramework(
            slot.timings->table, p.request.kernels[k].mini_batch, p.request.framework)) {
      kernel->set_framework_ms(framework->time_ms);
    }
  }
  auto bytes = std::make_shared<std::string>();
  if (!plan.SerializeToString(bytes.get())) return Internal("cannot serialise the plan");
  return std::shared_ptr<const std::string>(std::move(bytes));
}

void PlanCoordinator::CachePlan(const Planning& p, const NetworkPlan& network_plan,
                                const ContentKey& key, bool ilp_limit_cut,
                                const std::shared_ptr<const std::string>& bytes) {
  // Only complete plans are cached, and not those whose ILP stopped at a limit shortened by this
  // call's deadline (status "time_limit"): another caller with more time would get a better
  // plan. "optimal" and "gap_limit" (stopped at the requested gap) are finished solves.
  const bool ilp_cut_short =
      network_plan.ilp.used && network_plan.ilp.status == "time_limit" && ilp_limit_cut;
  if (!p.call.use_plan_cache || !network_plan.complete || ilp_cut_short) return;
  if (!p.call.may_write) {
    // Read-only callers fill only the in-process caches.
  } else if (Status put = store_->PutCachedPlan(key.hash, p.request.device, *bytes); !put.ok()) {
    spdlog::warn("plan cache write failed: {}", put.ToString());
  }
  plan_lru_.Put(key.hash, std::make_shared<const CachedPlan>(CachedPlan{key.check, bytes}));
  Remember(p.call.raw_request, p.device_hash, p.slots, key);
}

Status PlanCoordinator::SolveEncodeCache(Planning& p) {
  bool ilp_limit_cut = false;
  const double ilp_time_limit_s = IlpTimeLimit(p, &ilp_limit_cut);
  // Identical requests that end their wait together (a training job's processes) get the same
  // partial plan: it is made once. Not for ExplainPlan (it needs the NetworkPlan).
  std::string partial_key;
  size_t partial_hash = 0;
  if (p.call.use_plan_cache && p.ready < p.total() && !ilp_limit_cut) {
    partial_key = PartialPlanKey(p);
    partial_hash = std::hash<std::string>{}(partial_key);
    const auto cached = partial_lru_.Get(partial_hash);
    if (cached && cached->key == partial_key) {
      p.outcome.plan_bytes = cached->bytes;
      p.done = true;
      return Status::Ok();
    }
  }
  const ContentKey key = KeyOf(p);
  UCUDNN_ASSIGN_OR_RETURN(NetworkPlan network_plan, Solve(p, ilp_time_limit_s));
  UCUDNN_ASSIGN_OR_RETURN(auto bytes, Encode(p, network_plan, key));
  CachePlan(p, network_plan, key, ilp_limit_cut, bytes);
  if (!partial_key.empty() && !network_plan.complete) {
    partial_lru_.Put(partial_hash, std::make_shared<const PartialPlan>(
                                       PartialPlan{std::move(partial_key), bytes}));
  }
  p.outcome.plan_bytes = std::move(bytes);
  p.outcome.network_plan = std::move(network_plan);
  p.done = true;
  return Status::Ok();
}

Result<PlanCoordinator::WakeAt> PlanCoordinator::Advance(Planning& p) {
  if (!p.prepared) {
    p.prepared = true;
    UCUDNN_RETURN_IF_ERROR(Prepare(p));
    if (p.done) return WakeAt();
    UCUDNN_RETURN_IF_ERROR(EnqueueMissing(p));
  }
  if (p.waiting) {
    UCUDNN_RETURN_IF_ERROR(RecheckTimings(p));
    if (p.waiting) return WakeAt(std::min(p.wait_until, Clock::now() + options_.recheck_interval));
  }
  if (!p.done) UCUDNN_RETURN_IF_ERROR(SolveEncodeCache(p));
  return WakeAt();
}

Result<PlanOutcome> PlanCoordinator::Plan(const PlanCall& call) {
  Planning p(call);
  while (true) {
    UCUDNN_ASSIGN_OR_RETURN(const auto wake_at, Advance(p));
    if (!wake_at) return std::move(p.outcome);
    if (p.subscription) {
      p.woken = p.subscription->WaitUntil(*wake_at);
    } else {
      std::this_thread::sleep_until(*wake_at);
    }
  }
}

// A PlanAsync call: its planning, where it answers, and which wake-up may resume it. While it
// waits, its timed task (PostAt) owns it; the notification callback only refers to it.
struct PlanCoordinator::AsyncPlanning {
  AsyncPlanning(const PlanCall& call, ThreadPool* thread_pool, PlanDone on_done)
      : planning(call), pool(thread_pool), done(std::move(on_done)) {}
  Planning planning;
  ThreadPool* pool;
  PlanDone done;
  std::atomic<uint64_t> armed{0};  // the ticket of the wake-up awaited; 0 while running
  uint64_t tickets = 0;
  std::atomic<ThreadPool::TimerId> timer{0};
};

void PlanCoordinator::PlanAsync(const PlanCall& call, ThreadPool* pool, PlanDone done) {
  auto task = std::make_shared<AsyncPlanning>(call, pool, std::move(done));
  pool->Post([this, task] { Continue(task); });
}

void PlanCoordinator::Continue(const std::shared_ptr<AsyncPlanning>& task) {
  Result<WakeAt> wake_at = WakeAt();
  try {
    wake_at = Advance(task->planning);
  } catch (const std::exception& e) {  // std::bad_alloc, or a bug: the call still answers
    spdlog::error("plan request: unexpected exception: {}", e.what());
    wake_at = Internal("internal error");
  }
  if (!wake_at.ok()) {
    task->done(wake_at.status());
  } else if (!wake_at->has_value()) {
    task->done(std::move(task->planning.outcome));
  } else {
    Arm(task, **wake_at);
  }
}

void PlanCoordinator::Arm(const std::shared_ptr<AsyncPlanning>& task, Clock::time_point wake_at) {
  const uint64_t ticket = ++task->tickets;
  task->armed = ticket;
  task->timer = task->pool->PostAt(wake_at, [this, task, ticket] { Wake(task, ticket); });
  if (task->planning.subscription) {
    task->planning.subscription->OnWake([this, weak = std::weak_ptr(task), ticket] {
      if (auto woken = weak.lock()) Wake(woken, ticket);
    });
  }
}

void PlanCoordinator::Wake(const std::shared_ptr<AsyncPlanning>& task, uint64_t ticket) {
  // The first of the timer and the notification resumes the call; the other finds no ticket.
  uint64_t expected = ticket;
  if (!task->armed.compare_exchange_strong(expected, 0)) return;
  // Before the next round can arm a timer of its own: frees the call now, not at its wake time.
  task->pool->Cancel(task->timer.load());
  task->pool->Post([this, task] { Continue(task); });
}

}  // namespace ucudnn::server
