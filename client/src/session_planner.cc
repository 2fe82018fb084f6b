// Session: the plan fetcher. One planner thread asks the PlanSource (normally the gRPC planner)
// for plans, per kernel or for the whole network in the total modes, publishes them for the
// calling threads, retries with backoff, and keeps the local plan cache. The calling threads never
// wait for it.
#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "log.h"
#include "session.h"

#include "ucudnn/core/backoff.h"
#include "ucudnn/core/units.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::client {
namespace {

size_t AlignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

std::unique_ptr<PlanEntry> Session::MakeEntry(const KernelPlan& plan, uint64_t limit,
                                              bool from_cache) {
  auto entry = std::make_unique<PlanEntry>();
  entry->segments = plan.config.segments;
  entry->workspace_bytes = plan.config.workspace_bytes;
  entry->predicted_ms = plan.config.time_ms;
  entry->undivided_ms = plan.undivided ? plan.undivided->time_ms : 0;
  entry->limit = limit;
  entry->from_cache = from_cache;
  entry->framework = entry->segments.size() == 1 && IsFramework(entry->segments.front());
  return entry;
}

void Session::Publish(KernelState* kernel, std::unique_ptr<PlanEntry> entry) {
  kernel->state = KernelReport::State::kPlanned;
  kernel->reason.clear();
  // The old entry stays alive in plans_: a caller may still be running it.
  kernel->plan.store(entry.get(), std::memory_order_release);
  plans_.push_back(std::move(entry));
}

Session::Clock::duration Session::Backoff(int attempts, int64_t max_ms) {
  const std::chrono::milliseconds initial(std::max<int64_t>(1, config_.retry_initial_ms));
  const std::chrono::milliseconds cap(
      std::max<int64_t>(initial.count(), std::min(config_.retry_max_ms, max_ms)));
  // Up to 20% less, so that the jobs of a cluster that lost the server do not retry in step.
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  return Jittered(BackoffDelay(initial, cap, attempts), {0.8, 1.0}, unit(jitter_));
}

PlanRequest Session::MakeRequest(uint64_t limit) const {
  PlanRequest request;
  request.device = device_;
  request.policy = policy_;
  request.workspace_mode = mode_;
  request.workspace_bytes = limit;
  request.algorithms = algorithms_;
  request.framework = framework_;
  return request;
}

void Session::PlannerMain() {
  // Nothing thrown here may reach std::terminate and take the training job with it: the loop is
  // restarted after a pause, and the kernels it was asking for are asked for again.
  for (;;) {
    try {
      PlannerLoop();
      return;
    } catch (const std::exception& e) {
      client::Log().error("planner thread: {}; restarting it", e.what());
    } catch (...) {
      client::Log().error("planner thread: unknown exception; restarting it");
    }
    try {
      std::unique_lock lock(mutex_);
      answered_cv_.notify_all();
      if (work_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) return;
    } catch (...) {
      return;  // not even the mutex: give up planning, calls keep running undivided
    }
  }
}

void Session::PlannerLoop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    Clock::time_point wake = Clock::time_point::max();

    if (mode_ == WorkspaceMode::kPerKernel) {
      std::vector<Pending> batch = TakeDueKernels(now, wake);
      if (!batch.empty()) {
        try {
          RunPerKernelRequest(lock, batch);
        } catch (...) {
          // Whatever the request did not finish is asked for again later.
          if (!lock.owns_lock()) lock.lock();
          for (Pending& p : batch) {
            if (p.kernel->state == KernelReport::State::kPlanned) continue;
            p.due = Clock::now() + Backoff(p.attempts++);
            if (std::none_of(pending_.begin(), pending_.end(),
                             [&](const Pending& q) { return q.kernel == p.kernel; })) {
              pending_.push_back(p);
            }
          }
          throw;
        }
        continue;
      }
    } else if (collected_generation_ != planned_generation_ || network_retry_) {
      const Clock::time_point settled =
          last_new_kernel_ + std::chrono::milliseconds(config_.collect_quiet_ms);
      const Clock::time_point due = prepared_ ? network_due_ : std::max(settled, network_due_);
      if (due <= now) {
        try {
          RunNetworkRequest(lock);
        } catch (...) {
          if (!lock.owns_lock()) lock.lock();
          RetryNetworkLater();
          throw;
        }
        continue;
      }
      wake = due;
    }

    if (cache_dirty_ && !config_.cache_path.empty()) {
      SaveCache(lock);
      continue;
    }
    answered_cv_.notify_all();
    if (wake == Clock::time_point::max()) {
      work_cv_.wait(lock);
    } else {
      work_cv_.wait_until(lock, wake);
    }
  }
}

std::vector<Session::Pending> Session::TakeDueKernels(Clock::time_point now,
                                                      Clock::time_point& wake) {
  // Every due kernel goes into one request, each with its own limit (Kernel.workspace_limit);
  // those of the first one's limit only, where the source does not take per-kernel limits.
  std::vector<Pending> batch;
  std::vector<Pending> rest;
  for (Pending& p : pending_) {
    const bool due = p.due <= now;
    const bool same_limit = batch.empty() || p.kernel->limit == batch.front().kernel->limit;
    const bool fits = batch.empty() || ((same_limit || !one_limit_per_request_) &&
                                        batch.size() < size_t{kMaxKernelsPerRequest});
    if (due && fits) {
      batch.push_back(p);
    } else {
      if (!due) wake = std::min(wake, p.due);
      if (due) wake = now;  // another limit: next round
      rest.push_back(p);
    }
  }
  if (!batch.empty()) pending_ = std::move(rest);
  return batch;
}

std::optional<Result<NetworkPlan>> Session::SendRequest(std::unique_lock<std::mutex>& lock,
                                                        const PlanRequest& request,
                                                        uint64_t& asked_epoch) {
  plan_requests_.fetch_add(1, std::memory_order_relaxed);
  asked_epoch = contribution_epoch_;
  lock.unlock();
  Result<NetworkPlan> answer = AskSource(request);
  lock.lock();
  if (stop_) return std::nullopt;
  return answer;
}

Result<NetworkPlan> Session::AskSource(const PlanRequest& request) {
  Result<NetworkPlan> answer = [&]() -> Result<NetworkPlan> {
    try {
      return source_->GetPlan(request);
    } catch (const std::exception& e) {
      return Internal(source_->Describe() + " threw: " + e.what());
    } catch (...) {
      return Internal(source_->Describe() + " threw");
    }
  }();
  // Any source, not only the gRPC one, must answer every kernel asked, in order.
  if (answer.ok() && answer->kernels.size() != request.kernels.size()) {
    return Internal(source_->Describe() + " answered " + std::to_string(answer->kernels.size()) +
                    " kernels for " + std::to_string(request.kernels.size()) + " asked");
  }
  return answer;
}

void Session::RunPerKernelRequest(std::unique_lock<std::mutex>& lock, std::vector<Pending>& batch) {
  const uint64_t limit = batch.front().kernel->limit;
  PlanRequest request = MakeRequest(limit);
  for (const Pending& p : batch) {
    Kernel& kernel =
        request.kernels.emplace_back(Kernel{p.kernel->problem, p.kernel->batch, p.kernel->name});
    // Only where it differs: a request of one limit stays what it was (its plan-cache key too).
    if (p.kernel->limit != limit) kernel.workspace_limit = p.kernel->limit;
  }

  uint64_t asked_epoch = 0;
  std::optional<Result<NetworkPlan>> sent = SendRequest(lock, request, asked_epoch);
  if (!sent) return;
  Result<NetworkPlan>& answer = *sent;

  if (!answer.ok()) {
    NoteRequestFailed(answer.status(), "plans");
    for (Pending& p : batch) {
      p.kernel->reason = answer.status().ToString();
      p.due = Clock::now() + Backoff(p.attempts++);
      pending_.push_back(p);
    }
    return;
  }
  NoteRequestAnswered();
  for (size_t i = 0; i < batch.size(); ++i) {
    AcceptKernelPlan(batch[i], answer->kernels[i], i, limit, asked_epoch);
  }
}

void Session::AcceptKernelPlan(Pending& p, const KernelPlan& kernel_plan, size_t position,
                               uint64_t request_limit, uint64_t asked_epoch) {
  if (!(kernel_plan.kernel.problem == p.kernel->problem) ||
      kernel_plan.kernel.mini_batch != p.kernel->batch) {
    p.kernel->reason =
        "the planner answered another kernel at position " + std::to_string(position);
    p.due = Clock::now() + Backoff(p.attempts++);
    pending_.push_back(p);
    return;
  }
  const uint64_t limit = p.kernel->limit;
  if (limit != request_limit && kernel_plan.kernel.workspace_limit != limit) {
    // Planned under the request's limit, not the kernel's own: the server predates per-kernel
    // limits. Asked again at once, in a request of its own limit.
    if (!one_limit_per_request_) {
      client::Log().warn("{} does not take per-kernel workspace limits; one request per limit",
                         source_->Describe());
      one_limit_per_request_ = true;
    }
    p.due = Clock::now();
    pending_.push_back(p);
    return;
  }
  p.kernel->KnowFramework(kernel_plan);
  switch (kernel_plan.status) {
    case KernelPlanStatus::kPlanned: {
      Publish(p.kernel, MakeEntry(kernel_plan, limit, /*from_cache=*/false));
      plans_received_.fetch_add(1, std::memory_order_relaxed);
      NetworkPlan record;
      record.kernels = {kernel_plan};
      // Cached as a request of its own limit would be, which is how it is looked up.
      record.kernels.front().kernel.workspace_limit.reset();
      record.workspace_mode = WorkspaceMode::kPerKernel;
      record.policy = policy_;
      record.workspace_budget_bytes = limit;
      record.total_time_ms = kernel_plan.config.time_ms;
      record.total_workspace_bytes = kernel_plan.config.workspace_bytes;
      record.complete = true;
      record.framework = framework_;
      if (UsesPlanCache()) {
        cache_.Put(CacheRecord{device_, std::move(record)});
        cache_dirty_ = true;
      }
      break;
    }
    case KernelPlanStatus::kMissing:
      if (ContributedSince(p.kernel, asked_epoch)) {
        p.due = Clock::now();  // still waiting: its timings landed after this answer was made
        p.attempts = 0;
      } else {
        p.kernel->state = KernelReport::State::kMissing;
        p.kernel->reason = kernel_plan.reason;
        p.due = Clock::now() + Backoff(p.attempts++, config_.missing_retry_max_ms);
      }
      pending_.push_back(p);
      break;
    case KernelPlanStatus::kInfeasible:
      p.kernel->state = KernelReport::State::kInfeasible;
      p.kernel->reason = kernel_plan.reason;
      break;
  }
}

void Session::NoteRequestFailed(const Status& failure, std::string_view what) {
  plan_request_failures_.fetch_add(1, std::memory_order_relaxed);
  if (!unavailable_warned_) {
    client::Log().warn("no {} from {} ({}); kernels run undivided meanwhile, retrying", what,
                       source_->Describe(), failure.ToString());
    unavailable_warned_ = true;
  } else {
    client::Log().debug("plan request failed again: {}", failure.ToString());
  }
}

void Session::NoteRequestAnswered() {
  if (unavailable_warned_) {
    client::Log().info("plans from {} again", source_->Describe());
    unavailable_warned_ = false;
  }
}

void Session::RetryNetworkLater() {
  network_due_ = Clock::now() + Backoff(network_attempts_++);
  network_retry_ = true;
}

void Session::AskNetworkAgainNow() {
  prepared_ = true;
  network_retry_ = true;
  network_due_ = Clock::now();
  network_attempts_ = 0;
}

void Session::Unpublish(KernelState* kernel) {
  // The entry stays alive in plans_: a caller may still be running it.
  kernel->plan.store(nullptr, std::memory_order_release);
}

bool Session::PublishNetwork(const std::vector<KernelState*>& kernels, const NetworkPlan& plan,
                             bool from_cache, uint64_t asked_epoch) {
  // A network plan lays out the library workspace anew, from offset 0. Every kernel of the
  // network that gets no slice in this layout loses the plan it had: its old slice may overlap
  // the new ones (in total_sum mode two kernels would then share workspace bytes). Such kernels
  // run undivided until a plan of a later layout covers them.
  for (KernelState* kernel : collected_) {
    if (std::find(kernels.begin(), kernels.end(), kernel) == kernels.end()) Unpublish(kernel);
  }
  size_t offset = 0;
  bool stale = false;
  for (size_t i = 0; i < kernels.size(); ++i) {
    KernelState* kernel = kernels[i];
    const KernelPlan& kernel_plan = plan.kernels[i];
    kernel->KnowFramework(kernel_plan);
    if (kernel_plan.status != KernelPlanStatus::kPlanned) {
      Unpublish(kernel);
      if (kernel_plan.status == KernelPlanStatus::kMissing &&
          ContributedSince(kernel, asked_epoch)) {
        stale = true;  // stays waiting
        continue;
      }
      kernel->state = kernel_plan.status == KernelPlanStatus::kMissing
                          ? KernelReport::State::kMissing
                          : KernelReport::State::kInfeasible;
      kernel->reason = kernel_plan.reason;
      continue;
    }
    std::unique_ptr<PlanEntry> entry = MakeEntry(kernel_plan, config_.workspace_bytes, from_cache);
    // The framework's own convolution runs in the framework's workspace: no slice of the library's.
    entry->library_workspace = !entry->framework;
    if (entry->framework) {
      // Published as it is.
    } else if (mode_ == WorkspaceMode::kTotalShared) {
      entry->workspace_offset = 0;
      entry->workspace_slice = std::min<size_t>(config_.workspace_bytes, library_workspace_bytes_);
    } else {
      entry->workspace_offset = AlignUp(offset, kSliceAlignment);
      entry->workspace_slice = kernel_plan.config.workspace_bytes;
      offset = entry->workspace_offset + entry->workspace_slice;
    }
    if (entry->library_workspace &&
        (entry->workspace_offset + entry->workspace_slice > library_workspace_bytes_ ||
         entry->workspace_bytes > entry->workspace_slice)) {
      Unpublish(kernel);
      kernel->state = KernelReport::State::kInfeasible;
      kernel->reason =
          "the plan's workspaces exceed the budget of " + FormatBytes(config_.workspace_bytes);
      continue;
    }
    if (!from_cache) plans_received_.fetch_add(1, std::memory_order_relaxed);
    if (from_cache) plans_from_cache_.fetch_add(1, std::memory_order_relaxed);
    Publish(kernel, std::move(entry));
  }
  return stale;
}

void Session::RunNetworkRequest(std::unique_lock<std::mutex>& lock) {
  const std::vector<KernelState*> kernels = collected_;
  const uint64_t generation = collected_generation_;
  // Kernels declared after this request wait for the quiet period or another Prepare().
  prepared_ = false;
  PlanRequest request = MakeRequest(config_.workspace_bytes);
  for (const KernelState* kernel : kernels) {
    request.kernels.push_back(Kernel{kernel->problem, kernel->batch, kernel->name});
  }
  // Once after the framework's own timings were submitted: the cached plan predates them.
  const bool skip_cache = std::exchange(network_skip_cache_, false);
  if (!skip_cache && PublishCachedNetwork(kernels, request.kernels)) {
    planned_generation_ = generation;
    network_retry_ = false;
    return;
  }
  if (source_ == nullptr) {
    for (KernelState* kernel : kernels) {
      if (kernel->plan.load(std::memory_order_relaxed) == nullptr) {
        kernel->state = KernelReport::State::kNoServer;
      }
    }
    planned_generation_ = generation;
    network_retry_ = false;
    return;
  }
  if (request.kernels.size() > size_t{kMaxKernelsPerRequest}) {
    request.kernels.resize(kMaxKernelsPerRequest);
  }

  uint64_t asked_epoch = 0;
  std::optional<Result<NetworkPlan>> sent = SendRequest(lock, request, asked_epoch);
  if (!sent) return;
  Result<NetworkPlan>& answer = *sent;

  if (!answer.ok()) {
    NoteRequestFailed(answer.status(), "network plan");
    for (KernelState* kernel : kernels) kernel->reason = answer.status().ToString();
    RetryNetworkLater();
    return;
  }
  NoteRequestAnswered();
  for (size_t i = 0; i < request.kernels.size(); ++i) {
    if (!(answer->kernels[i].kernel.problem == request.kernels[i].problem) ||
        answer->kernels[i].kernel.mini_batch != request.kernels[i].mini_batch) {
      client::Log().warn("the planner answered other kernels than asked; ignoring the answer");
      RetryNetworkLater();
      return;
    }
  }
  const std::vector<KernelState*> answered(
      kernels.begin(), kernels.begin() + static_cast<ptrdiff_t>(request.kernels.size()));
  AcceptNetworkPlan(answered, *answer, asked_epoch, generation);
}

bool Session::PublishCachedNetwork(const std::vector<KernelState*>& kernels,
                                   const std::vector<Kernel>& request_kernels) {
  if (!UsesPlanCache()) return false;
  const std::optional<NetworkPlan> cached = cache_.FindNetwork(
      device_, mode_, policy_, config_.workspace_bytes, request_kernels, framework_);
  if (!cached) return false;
  // The cached record holds the same kernels, maybe in another order.
  NetworkPlan ordered = *cached;
  ordered.kernels.clear();
  for (const Kernel& kernel : request_kernels) {
    for (const KernelPlan& kernel_plan : cached->kernels) {
      if (kernel_plan.kernel.problem == kernel.problem &&
          kernel_plan.kernel.mini_batch == kernel.mini_batch) {
        ordered.kernels.push_back(kernel_plan);
        break;
      }
    }
  }
  if (ordered.kernels.size() != kernels.size()) return false;
  PublishNetwork(kernels, ordered, /*from_cache=*/true, contribution_epoch_);
  return true;
}

void Session::AcceptNetworkPlan(const std::vector<KernelState*>& answered,
                                const NetworkPlan& answer, uint64_t asked_epoch,
                                uint64_t generation) {
  const bool stale = PublishNetwork(answered, answer, /*from_cache=*/false, asked_epoch);
  planned_generation_ = generation;
  if (stale) {
    // Timings contributed while this request was in flight: the same network again, at once.
    AskNetworkAgainNow();
  } else if (answer.complete) {
    network_retry_ = false;
    network_attempts_ = 0;
    CacheRecord record{device_, answer};
    record.plan.workspace_mode = mode_;
    record.plan.policy = policy_;
    record.plan.workspace_budget_bytes = config_.workspace_bytes;
    record.plan.framework = framework_;
    if (UsesPlanCache()) {
      cache_.Put(std::move(record));
      cache_dirty_ = true;
    }
  } else {
    // Some kernels lack timings: ask again later for the whole network.
    bool missing = false;
    for (const KernelPlan& k : answer.kernels) missing |= k.status == KernelPlanStatus::kMissing;
    network_retry_ = missing;
    if (missing) network_due_ = Clock::now() + Backoff(network_attempts_++);
  }
}

void Session::SaveCache(std::unique_lock<std::mutex>& lock) {
  const PlanCache snapshot = cache_;
  cache_dirty_ = false;
  lock.unlock();
  Status saved = snapshot.Save(config_.cache_path);
  lock.lock();
  if (!saved.ok()) client::Log().warn("cannot save the plan cache: {}", saved.ToString());
}

}  // namespace ucudnn::client
