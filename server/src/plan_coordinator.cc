#include "ucudnn/server/plan_coordinator.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/proto_convert.h"
#include "ucudnn/planner/planner.h"
#include "ucudnn/server/plan_key.h"

namespace ucudnn::server {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

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
    if (job_state == "failed") {
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
  std::shared_ptr<const CachedTimings> timings;  // never null after LoadTables
  bool covered = false;
  int64_t job_id = 0;
  std::string job_state;
  std::string job_error;  // when job_state is "failed"
};

bool TableCovers(const CachedTimings& timings, BatchPolicy policy, int64_t max_micro_batch) {
  if (timings.micro_batches.empty()) return false;
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
      memo_(options.plan_cache_entries) {}

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

Result<PlanOutcome> PlanCoordinator::Plan(const PlanCall& call) {
  const v1::GetPlanRequest& message = *call.request;
  // The count first: a request over the configured bound is refused before anything is parsed.
  if (message.kernels_size() > options_.max_kernels) {
    return InvalidArgument(FieldPath(call.field_path, "kernels") + ": at most " +
                           std::to_string(options_.max_kernels) + " kernels per request, got " +
                           std::to_string(message.kernels_size()));
  }
  UCUDNN_ASSIGN_OR_RETURN(PlanRequest request, FromProto(message, call.field_path));
  // Valid for the message (uint64), but no database column holds it.
  if (request.device.memory_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument(FieldPath(call.field_path, "device.memory_bytes") +
                           ": must be at most 2^63-1, got " +
                           std::to_string(request.device.memory_bytes));
  }
  // The configured ILP limit is part of the content (mode total_sum): a replica configured
  // otherwise computes, and caches, its own plan. A deadline may shorten the limit of one solve
  // below; such a plan is not cached.
  request.ilp_time_limit_s = std::chrono::duration<double>(options_.ilp_time_limit).count();
  const milliseconds max_wait(message.max_wait_ms());
  const uint64_t device_hash = request.device.Hash();

  // Distinct problems, in first-seen order.
  std::vector<ProblemSlot> slots;
  std::vector<size_t> slot_of_kernel(request.kernels.size());
  {
    std::unordered_map<uint64_t, size_t> index;
    for (size_t k = 0; k < request.kernels.size(); ++k) {
      const Kernel& kernel = request.kernels[k];
      const uint64_t hash = StableHash(kernel.problem);
      auto [it, inserted] = index.emplace(hash, slots.size());
      if (inserted) {
        ProblemSlot slot;
        slot.problem = kernel.problem;
        slot.hash = hash;
        slots.push_back(std::move(slot));
      }
      ProblemSlot& slot = slots[it->second];
      slot.max_mini_batch = std::max(slot.max_mini_batch, kernel.mini_batch);
      slot_of_kernel[k] = it->second;
    }
  }
  const int total = static_cast<int>(slots.size());

  if (Status loaded = LoadTables(request.device, device_hash, slots, false); !loaded.ok()) {
    // A database outage need not stop jobs whose plans this process already answered.
    if (loaded.code() == StatusCode::kUnavailable) {
      if (auto last = LastKnownPlan(call.raw_request)) {
        spdlog::debug("database unavailable; answering a plan from the in-process cache");
        if (metrics_) metrics_->RecordPlanCacheHit("memory_database_down");
        PlanOutcome outcome;
        outcome.plan_bytes = std::move(last);
        outcome.from_cache = true;
        return outcome;
      }
    }
    return loaded;
  }
  auto update_coverage = [&] {
    int ready = 0;
    for (auto& slot : slots) {
      slot.covered = TableCovers(*slot.timings, request.policy, slot.max_mini_batch);
      ready += slot.covered ? 1 : 0;
    }
    return ready;
  };
  auto content_key = [&] {
    std::vector<std::optional<uint64_t>> digests(request.kernels.size());
    for (size_t k = 0; k < request.kernels.size(); ++k) {
      const ProblemSlot& slot = slots[slot_of_kernel[k]];
      if (slot.covered) digests[k] = slot.timings->digest;
    }
    const std::string text = PlanContentText(request, digests);
    return ContentKey{Fnv1a64(text), PlanContentCheck(text)};
  };
  // A cached plan for the current timings, from this process or the shared database cache.
  auto try_cache = [&](PlanOutcome& outcome) {
    if (!call.use_plan_cache) return false;
    const ContentKey key = content_key();
    bool from_database = false;
    outcome.plan_bytes = LookupCachedPlan(key, request, &from_database);
    if (!outcome.plan_bytes) return false;
    outcome.from_cache = true;
    if (metrics_) metrics_->RecordPlanCacheHit(from_database ? "database" : "memory");
    Remember(call.raw_request, device_hash, slots, key);
    return true;
  };

  PlanOutcome outcome;
  int ready = update_coverage();
  if (call.on_progress) call.on_progress(ready, total);
  if (ready == total && try_cache(outcome)) return outcome;
  if (call.use_plan_cache && metrics_) metrics_->RecordPlanCacheMiss();

  // Problems whose job failed for good wait for no one: nothing will measure them.
  auto failed = [](const ProblemSlot& slot) { return slot.job_state == "failed"; };
  bool enqueue = call.enqueue_and_wait && call.may_write && ready < total;
  if (enqueue && !call.may_register_device) {
    UCUDNN_ASSIGN_OR_RETURN(enqueue, store_->DeviceExists(device_hash));
    if (!enqueue) {
      spdlog::debug(
          "device {} is not registered and the caller may not register it: planned "
          "read-only",
          HashHex(device_hash));
    }
  }
  if (enqueue) {
    // Every missing problem in one transaction.
    std::vector<store::JobRequest> wanted;
    std::vector<ProblemSlot*> wanted_slots;
    for (auto& slot : slots) {
      if (slot.covered) continue;
      wanted.push_back({slot.problem, slot.max_mini_batch, request.policy});
      wanted_slots.push_back(&slot);
    }
    UCUDNN_ASSIGN_OR_RETURN(auto enqueued, store_->EnqueueJobs(request.device, wanted));
    if (enqueued.size() != wanted.size()) return Internal("enqueue answered the wrong count");
    int created = 0;
    int failed_jobs = 0;
    for (size_t i = 0; i < enqueued.size(); ++i) {
      ProblemSlot& slot = *wanted_slots[i];
      slot.job_id = enqueued[i].job_id;
      slot.job_state = JobStateName(enqueued[i].state);
      slot.job_error = enqueued[i].error;
      created += enqueued[i].created ? 1 : 0;
      failed_jobs += failed(slot) ? 1 : 0;
    }
    if (metrics_) metrics_->RecordJobsEnqueued(created);
    if (created > 0) {
      spdlog::info("enqueued {} benchmark job(s) for device {}", created, HashHex(device_hash));
    }
    if (failed_jobs > 0) {
      spdlog::info("{} missing problem(s) of device {} have failed jobs in their cool-down",
                   failed_jobs, HashHex(device_hash));
    }

    milliseconds budget = max_wait;
    if (ready + failed_jobs == total) budget = milliseconds(0);
    if (const auto remaining = Remaining(call.deadline)) {
      budget = std::min(budget, *remaining - std::min(*remaining, AnswerMargin(*remaining)));
    }
    if (budget > milliseconds(0)) {
      const auto start = Clock::now();
      const auto wait_until = start + budget;
      auto missing_hashes = [&] {
        std::vector<uint64_t> hashes;
        for (const auto& slot : slots) {
          if (!slot.covered && !failed(slot)) hashes.push_back(slot.hash);
        }
        return hashes;
      };
      std::unique_ptr<TimingSubscription> subscription;
      if (watcher_ != nullptr) subscription = watcher_->Subscribe(device_hash, missing_hashes());
      // Subscribed first, then re-read: whatever lands after this read wakes the wait below.
      while (true) {
        UCUDNN_RETURN_IF_ERROR(LoadTables(request.device, device_hash, slots, true));
        const int now_ready = update_coverage();
        if (now_ready != ready && call.on_progress) call.on_progress(now_ready, total);
        ready = now_ready;
        if (ready == total || missing_hashes().empty()) break;
        if (stopping_.load() || (call.cancelled && call.cancelled())) break;
        const auto now = Clock::now();
        if (now >= wait_until) break;
        const auto wake_at = std::min(wait_until, now + options_.recheck_interval);
        if (subscription) {
          subscription->SetProblems(missing_hashes());
          subscription->WaitUntil(wake_at);
        } else {
          std::this_thread::sleep_until(wake_at);
        }
      }
      outcome.waited_ms = static_cast<uint32_t>(
          std::chrono::duration_cast<milliseconds>(Clock::now() - start).count());
      if (ready == total) {
        if (try_cache(outcome)) return outcome;
      } else {
        // The states read at enqueue time may have moved on (queued -> running).
        for (auto& slot : slots) {
          if (slot.covered || slot.job_id == 0 || failed(slot)) continue;
          if (auto job = store_->GetJob(slot.job_id); job.ok()) {
            slot.job_state = JobStateName(job->state);
            if (failed(slot)) slot.job_error = job->error;
          }
        }
      }
    }
  }

  // Plan from what is there; missing problems get no table.
  std::vector<const TimingTable*> tables(request.kernels.size());
  for (size_t k = 0; k < request.kernels.size(); ++k) {
    const ProblemSlot& slot = slots[slot_of_kernel[k]];
    tables[k] = slot.covered ? &slot.timings->table : nullptr;
  }
  const ContentKey key = content_key();
  bool ilp_limit_cut = false;
  PlanRequest solve = request;
  if (const auto remaining = Remaining(call.deadline)) {
    const double allowed =
        std::chrono::duration<double>(*remaining - AnswerMargin(*remaining)).count();
    if (allowed < solve.ilp_time_limit_s) {
      solve.ilp_time_limit_s = std::max(0.01, allowed);
      ilp_limit_cut = true;
    }
  }
  const auto plan_start = Clock::now();
  UCUDNN_ASSIGN_OR_RETURN(NetworkPlan network_plan, PlanNetwork(solve, tables));
  const double plan_seconds = std::chrono::duration<double>(Clock::now() - plan_start).count();
  if (metrics_) metrics_->RecordPlanComputed(network_plan.complete, plan_seconds);

  v1::Plan plan = ToProto(network_plan, request.device);
  plan.set_plan_hash(HashHex(key.hash));
  for (const auto& slot : slots) {
    if (slot.covered) continue;
    v1::MissingProblem* missing = plan.add_missing();
    *missing->mutable_problem() = ToProto(slot.problem);
    missing->set_problem_hash(HashHex(slot.hash));
    missing->set_max_micro_batch(slot.max_mini_batch);
    missing->set_job_id(slot.job_id);
    missing->set_job_state(slot.job_state);
    if (failed(slot)) missing->set_error(slot.job_error);
  }
  // A kernel without a full table says what exactly is missing, and why when its job failed.
  for (size_t k = 0; k < request.kernels.size(); ++k) {
    const ProblemSlot& slot = slots[slot_of_kernel[k]];
    if (slot.covered) continue;
    v1::KernelPlan* kernel = plan.mutable_kernels(static_cast<int>(k));
    if (kernel->status() != v1::KERNEL_PLAN_STATUS_MISSING) continue;
    kernel->set_reason(MissingReason(*slot.timings, request.policy, slot.max_mini_batch,
                                     slot.job_id, slot.job_state, slot.job_error));
  }
  auto bytes = std::make_shared<std::string>();
  if (!plan.SerializeToString(bytes.get())) return Internal("cannot serialise the plan");

  // Only complete plans are cached, and not those whose ILP stopped at a limit shortened by this
  // call's deadline (status "time_limit"): another caller with more time would get a better
  // plan. "optimal" and "gap_limit" (stopped at the requested gap) are finished solves.
  const bool ilp_cut_short =
      network_plan.ilp.used && network_plan.ilp.status == "time_limit" && ilp_limit_cut;
  if (call.use_plan_cache && network_plan.complete && !ilp_cut_short) {
    if (!call.may_write) {
      // Read-only callers fill only the in-process caches.
    } else if (Status put = store_->PutCachedPlan(key.hash, request.device, *bytes); !put.ok()) {
      spdlog::warn("plan cache write failed: {}", put.ToString());
    }
    plan_lru_.Put(key.hash, std::make_shared<const CachedPlan>(CachedPlan{key.check, bytes}));
    Remember(call.raw_request, device_hash, slots, key);
  }
  outcome.plan_bytes = std::move(bytes);
  outcome.network_plan = std::move(network_plan);
  return outcome;
}

}  // namespace ucudnn::server
