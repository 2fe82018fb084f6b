#include "session.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <span>
#include <utility>

#include "config_internal.h"
#include "ucudnn/core/executor.h"
#include "ucudnn/core/proto_convert.h"
#include "ucudnn/core/units.h"

namespace ucudnn::client {
namespace {

// Slices of the library's workspace start on this boundary (cuDNN wants aligned workspaces).
constexpr size_t kSliceAlignment = 256;

size_t AlignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// The packed fallback cache holds the workspace size in the upper 48 bits.
constexpr uint64_t kMaxPackedWorkspace = (uint64_t{1} << 48) - 1;

// The plan's segments one after another: ExecuteMicroBatched's loop without its per-call checks,
// for plans it already ran here. The checks ask the backend for every segment's workspace, and on
// cuDNN 9 (H100, legacy API) one such query costs 0.04-0.8 ms of host time, more than a
// micro-batch takes on the GPU: with them, a forward plan of 16 micro-batches ran 6x slower than
// its prediction. Same semantics: micro-batch i starts `done` samples into x/y/dy/dx, and
// backward-filter accumulates with beta = 1 after the first segment.
Status RunSegments(ConvBackend& backend, const ConvProblem& problem,
                   std::span<const Segment> segments, const ConvOperands& operands, void* workspace,
                   size_t workspace_bytes, float alpha, float beta) {
  const size_t element = ElementSize(problem.data_type);
  const size_t x_bytes = static_cast<size_t>(problem.input_elements_per_sample()) * element;
  const size_t y_bytes = static_cast<size_t>(problem.output_elements_per_sample()) * element;
  int64_t done = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& segment = segments[i];
    auto in = [&](const void* p, size_t bytes) -> const void* {
      return p == nullptr ? nullptr : static_cast<const char*>(p) + done * bytes;
    };
    auto out = [&](void* p, size_t bytes) -> void* {
      return p == nullptr ? nullptr : static_cast<char*>(p) + done * bytes;
    };
    ConvOperands shifted = operands;
    shifted.x = in(operands.x, x_bytes);
    shifted.dy = in(operands.dy, y_bytes);
    shifted.y = out(operands.y, y_bytes);
    shifted.dx = out(operands.dx, x_bytes);
    const float segment_beta = problem.op == ConvOp::kBackwardFilter && i > 0 ? 1.0f : beta;
    UCUDNN_RETURN_IF_ERROR(backend.Run(problem, segment.micro_batch, segment.algo, shifted,
                                       workspace, workspace_bytes, alpha, segment_beta));
    done += segment.micro_batch;
  }
  return Status::Ok();
}

std::string KernelLabel(const KernelState& kernel) {
  return kernel.name.empty() ? CanonicalKey(kernel.problem) + "@" + std::to_string(kernel.batch)
                             : kernel.name;
}

}  // namespace

// ---- BackendUndividedRunner -------------------------------------------------------------------

Result<int> BackendUndividedRunner::ChooseAlgorithm(size_t workspace_bytes) {
  int best = -1;
  size_t best_workspace = 0;
  Status last = Unsupported("no algorithm of the backend runs " + CanonicalKey(problem_));
  for (const AlgorithmInfo& info : backend_.Algorithms(problem_.op)) {
    Result<size_t> needed = backend_.WorkspaceSize(problem_, batch_, info.id);
    if (!needed.ok()) {
      last = needed.status();
      continue;
    }
    if (*needed > workspace_bytes) continue;
    if (best < 0 || *needed > best_workspace) {
      best = info.id;
      best_workspace = *needed;
    }
  }
  if (best < 0) return last;
  return best;
}

Status BackendUndividedRunner::Run(int algo, void* workspace, size_t workspace_bytes) {
  return backend_.Run(problem_, batch_, algo, operands_, workspace, workspace_bytes, alpha_, beta_);
}

// ---- Session: construction ---------------------------------------------------------------------

std::unique_ptr<Session> Session::Create(ConvBackend& backend, const ClientConfig& config,
                                         std::unique_ptr<PlanSource> source) {
  return std::unique_ptr<Session>(new Session(backend, config, std::move(source)));
}

Session::Session(ConvBackend& backend, const ClientConfig& config,
                 std::unique_ptr<PlanSource> source)
    : backend_(backend),
      config_(config),
      device_(backend.fingerprint()),
      mode_(ToCore(config.workspace_mode)),
      policy_(ToCore(config.policy)),
      table_(config.max_kernels),
      source_(std::move(source)),
      jitter_(static_cast<unsigned>(::getpid())) {
  if (!config_.enabled) return;
  if (source_ == nullptr && !config_.server.empty()) {
    source_ = MakeGrpcPlanSource(GrpcPlanSourceOptions{
        config_.server, config_.token, config_.deadline_ms, config_.server_wait_ms});
  }
  if (mode_ != WorkspaceMode::kPerKernel) {
    if (config_.workspace_bytes == 0) {
      spdlog::warn(
          "ucudnn: workspace mode {} needs a budget (UCUDNN_WORKSPACE_BYTES); planning "
          "per kernel instead",
          ToString(mode_));
      mode_ = WorkspaceMode::kPerKernel;
    } else {
      // Room for every slice's alignment on top of the budget.
      const size_t bytes = config_.workspace_bytes + size_t{config_.max_kernels} * kSliceAlignment;
      Result<std::unique_ptr<BackendBuffer>> buffer = backend_.Allocate(bytes);
      if (!buffer.ok()) {
        spdlog::warn("ucudnn: cannot allocate the {} workspace ({}); planning per kernel instead",
                     FormatBytes(bytes), buffer.status().ToString());
        mode_ = WorkspaceMode::kPerKernel;
      } else {
        library_workspace_ = std::move(*buffer);
        library_workspace_base_ = static_cast<char*>(library_workspace_->data());
        library_workspace_bytes_ = library_workspace_->size();
      }
    }
  }
  if (!config_.cache_path.empty()) cache_ = PlanCache::Load(config_.cache_path);
  spdlog::debug("ucudnn: session on {} ({}), mode {}, planner {}, cache {}", device_.name,
                device_.backend, ToString(mode_), source_ ? source_->Describe() : "none",
                config_.cache_path.empty() ? "none" : config_.cache_path);
  planner_ = std::thread([this] { PlannerLoop(); });
}

Session::~Session() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  answered_cv_.notify_all();
  if (source_ != nullptr) source_->Cancel();
  if (planner_.joinable()) planner_.join();
  // Plans that arrived just before shutdown are kept too.
  if (cache_dirty_ && !config_.cache_path.empty()) {
    Status saved = cache_.Save(config_.cache_path);
    if (!saved.ok()) spdlog::warn("ucudnn: cannot save the plan cache: {}", saved.ToString());
  }
}

// ---- Session: the calling threads ---------------------------------------------------------------

Status Session::Execute(const ConvProblem& problem, int64_t batch, const ConvOperands& operands,
                        void* workspace, size_t workspace_bytes, float alpha, float beta,
                        UndividedRunner* runner) {
  BackendUndividedRunner backend_runner(backend_, problem, batch, operands, alpha, beta);
  UndividedRunner& undivided = runner != nullptr ? *runner : backend_runner;

  if (!config_.enabled) {
    passthrough_calls_.fetch_add(1, std::memory_order_relaxed);
    UCUDNN_ASSIGN_OR_RETURN(const int algo, undivided.ChooseAlgorithm(workspace_bytes));
    return undivided.Run(algo, workspace, workspace_bytes);
  }

  const uint64_t hash = KernelKeyHash(problem, batch);
  KernelState* kernel = table_.Find(hash, problem, batch);
  if (kernel == nullptr) kernel = Register(problem, batch, hash, workspace_bytes, {});
  if (kernel == nullptr) {
    untracked_calls_.fetch_add(1, std::memory_order_relaxed);
    UCUDNN_ASSIGN_OR_RETURN(const int algo, undivided.ChooseAlgorithm(workspace_bytes));
    return undivided.Run(algo, workspace, workspace_bytes);
  }

  const PlanEntry* plan = kernel->plan.load(std::memory_order_acquire);
  if (plan != nullptr && !plan->failed.load(std::memory_order_relaxed)) {
    void* plan_workspace = workspace;
    size_t plan_workspace_bytes = workspace_bytes;
    if (plan->library_workspace) {
      plan_workspace = library_workspace_base_ + plan->workspace_offset;
      plan_workspace_bytes = plan->workspace_slice;
    }
    int64_t needed = plan->required_bytes.load(std::memory_order_relaxed);
    if (needed == PlanEntry::kUnverified) needed = Verify(*plan, problem);
    if (needed >= 0 && static_cast<uint64_t>(needed) <= plan_workspace_bytes) {
      // The first run goes through the executor and all its checks; later ones skip them.
      const bool executed = plan->executed.load(std::memory_order_relaxed);
      Status status = executed
                          ? RunSegments(backend_, problem, plan->segments, operands, plan_workspace,
                                        plan_workspace_bytes, alpha, beta)
                          : ExecuteMicroBatched(backend_, problem, batch, plan->segments, operands,
                                                plan_workspace, plan_workspace_bytes, alpha, beta);
      if (status.ok()) {
        if (!executed) plan->executed.store(true, std::memory_order_relaxed);
        kernel->planned_calls.fetch_add(1, std::memory_order_relaxed);
        return status;
      }
      plan->failed.store(true, std::memory_order_relaxed);
      spdlog::warn("ucudnn: plan of {} failed, running it undivided from now on: {}",
                   KernelLabel(*kernel), status.ToString());
      // The executor validates before running anything: only then is an undivided rerun safe.
      if (status.code() != StatusCode::kInvalidArgument) return status;
    } else if (needed >= 0) {
      kernel->rejected_calls.fetch_add(1, std::memory_order_relaxed);
    }
  }

  UCUDNN_ASSIGN_OR_RETURN(const int algo, FallbackAlgorithm(kernel, workspace_bytes, undivided));
  kernel->fallback_calls.fetch_add(1, std::memory_order_relaxed);
  return undivided.Run(algo, workspace, workspace_bytes);
}

int64_t Session::Verify(const PlanEntry& plan, const ConvProblem& problem) {
  int64_t needed = 0;
  for (const Segment& segment : plan.segments) {
    Result<size_t> bytes = backend_.WorkspaceSize(problem, segment.micro_batch, segment.algo);
    if (!bytes.ok()) {
      spdlog::warn("ucudnn: plan segment (micro-batch {}, algo {}) of {} cannot run here: {}",
                   segment.micro_batch, segment.algo, CanonicalKey(problem),
                   bytes.status().ToString());
      needed = PlanEntry::kNotRunnable;
      break;
    }
    needed = std::max<int64_t>(needed, static_cast<int64_t>(*bytes));
  }
  plan.required_bytes.store(needed, std::memory_order_relaxed);
  return needed;
}

Result<int> Session::FallbackAlgorithm(KernelState* kernel, size_t workspace_bytes,
                                       UndividedRunner& runner) {
  const uint64_t packed = kernel->fallback_choice.load(std::memory_order_relaxed);
  if (packed != 0 && (packed >> 16) == workspace_bytes)
    return static_cast<int>(packed & 0xffff) - 1;
  UCUDNN_ASSIGN_OR_RETURN(const int algo, runner.ChooseAlgorithm(workspace_bytes));
  if (workspace_bytes <= kMaxPackedWorkspace && algo >= 0 && algo < 0xffff) {
    kernel->fallback_choice.store(
        (uint64_t{workspace_bytes} << 16) | static_cast<uint64_t>(algo + 1),
        std::memory_order_relaxed);
  }
  return algo;
}

KernelState* Session::Register(const ConvProblem& problem, int64_t batch, uint64_t hash,
                               uint64_t limit, std::string_view name) {
  std::lock_guard lock(mutex_);
  if (KernelState* existing = table_.Find(hash, problem, batch)) return existing;

  auto state = std::make_unique<KernelState>();
  state->hash = hash;
  state->problem = problem;
  state->batch = batch;
  state->name = std::string(name.substr(0, kMaxKernelNameBytes));
  state->limit = limit;
  KernelState* kernel = table_.Insert(std::move(state));
  if (kernel == nullptr) {
    if (!table_full_warned_) {
      spdlog::warn("ucudnn: more than {} distinct kernels; further ones run undivided, untracked",
                   config_.max_kernels);
      table_full_warned_ = true;
    }
    return nullptr;
  }

  Status valid = Validate(problem);
  if (valid.ok()) valid = ValidateBatch(batch);
  if (!valid.ok()) {
    // The backend will answer the call itself; the planner could not plan it anyway.
    kernel->state = KernelReport::State::kInfeasible;
    kernel->reason = valid.message();
    return kernel;
  }

  const Kernel key{problem, batch, kernel->name};
  if (mode_ == WorkspaceMode::kPerKernel) {
    if (std::optional<KernelPlan> cached = cache_.FindKernel(device_, policy_, limit, key)) {
      Publish(kernel, MakeEntry(*cached, limit, /*from_cache=*/true));
      plans_from_cache_.fetch_add(1, std::memory_order_relaxed);
    } else if (source_ != nullptr) {
      pending_.push_back(Pending{kernel, 0, Clock::now()});
      work_cv_.notify_one();
    } else {
      kernel->state = KernelReport::State::kNoServer;
    }
  } else {
    collected_.push_back(kernel);
    ++collected_generation_;
    last_new_kernel_ = Clock::now();
    work_cv_.notify_one();
  }
  return kernel;
}

void Session::Declare(const ConvProblem& problem, int64_t batch, uint64_t limit,
                      std::string_view name) {
  if (!config_.enabled) return;
  const uint64_t hash = KernelKeyHash(problem, batch);
  if (table_.Find(hash, problem, batch) == nullptr) Register(problem, batch, hash, limit, name);
}

void Session::Prepare(const std::vector<Kernel>& kernels) {
  for (const Kernel& kernel : kernels) {
    Declare(kernel.problem, kernel.mini_batch, config_.workspace_bytes, kernel.name);
  }
  Prepare();
}

void Session::Prepare() {
  std::lock_guard lock(mutex_);
  prepared_ = true;
  work_cv_.notify_one();
}

// ---- Session: introspection --------------------------------------------------------------------

bool Session::AnyWaiting() const {
  for (const auto& kernel : table_.entries()) {
    if (kernel->state == KernelReport::State::kWaiting) return true;
  }
  return false;
}

bool Session::WaitForPlans(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return answered_cv_.wait_for(lock, timeout, [this] { return stop_ || !AnyWaiting(); });
}

ClientStats Session::Stats() const {
  ClientStats stats;
  std::lock_guard lock(mutex_);
  for (const auto& kernel : table_.entries()) {
    ++stats.kernels;
    if (kernel->plan.load(std::memory_order_acquire) != nullptr) ++stats.kernels_planned;
    stats.planned_calls += kernel->planned_calls.load(std::memory_order_relaxed);
    stats.fallback_calls += kernel->fallback_calls.load(std::memory_order_relaxed);
    stats.rejected_plan_calls += kernel->rejected_calls.load(std::memory_order_relaxed);
  }
  stats.passthrough_calls = passthrough_calls_.load(std::memory_order_relaxed);
  stats.untracked_calls = untracked_calls_.load(std::memory_order_relaxed);
  stats.plan_requests = plan_requests_.load(std::memory_order_relaxed);
  stats.plan_request_failures = plan_request_failures_.load(std::memory_order_relaxed);
  stats.plans_received = plans_received_.load(std::memory_order_relaxed);
  stats.plans_from_cache = plans_from_cache_.load(std::memory_order_relaxed);
  return stats;
}

std::vector<KernelReport> Session::Kernels() const {
  std::vector<KernelReport> reports;
  std::lock_guard lock(mutex_);
  for (const auto& kernel : table_.entries()) {
    KernelReport report;
    report.problem = CanonicalKey(kernel->problem);
    report.name = kernel->name.empty() ? report.problem : kernel->name;
    report.op = std::string(ToString(kernel->problem.op));
    report.mini_batch = kernel->batch;
    report.state = kernel->state;
    report.reason = kernel->reason;
    report.workspace_limit =
        mode_ == WorkspaceMode::kPerKernel ? kernel->limit : config_.workspace_bytes;
    if (const PlanEntry* plan = kernel->plan.load(std::memory_order_acquire)) {
      report.plan_workspace_bytes = plan->workspace_bytes;
      report.predicted_ms = plan->predicted_ms;
      report.undivided_ms = plan->undivided_ms;
      report.from_cache = plan->from_cache;
      for (const Segment& s : plan->segments) report.segments.push_back({s.micro_batch, s.algo});
    }
    report.planned_calls = kernel->planned_calls.load(std::memory_order_relaxed);
    report.fallback_calls = kernel->fallback_calls.load(std::memory_order_relaxed);
    reports.push_back(std::move(report));
  }
  return reports;
}

// ---- Session: the planner thread ---------------------------------------------------------------

std::unique_ptr<PlanEntry> Session::MakeEntry(const KernelPlan& plan, uint64_t limit,
                                              bool from_cache) {
  auto entry = std::make_unique<PlanEntry>();
  entry->segments = plan.config.segments;
  entry->workspace_bytes = plan.config.workspace_bytes;
  entry->predicted_ms = plan.config.time_ms;
  entry->undivided_ms = plan.undivided ? plan.undivided->time_ms : 0;
  entry->limit = limit;
  entry->from_cache = from_cache;
  return entry;
}

void Session::Publish(KernelState* kernel, std::unique_ptr<PlanEntry> entry) {
  kernel->state = KernelReport::State::kPlanned;
  kernel->reason.clear();
  // The old entry stays alive in plans_: a caller may still be running it.
  kernel->plan.store(entry.get(), std::memory_order_release);
  plans_.push_back(std::move(entry));
}

Session::Clock::duration Session::Backoff(int attempts) {
  const int64_t initial = std::max<int64_t>(1, config_.retry_initial_ms);
  const int64_t cap = std::max(initial, config_.retry_max_ms);
  int64_t delay = initial;
  for (int i = 0; i < attempts && delay < cap; ++i) delay *= 2;
  delay = std::min(delay, cap);
  // Up to 20% less, so that the jobs of a cluster that lost the server do not retry in step.
  std::uniform_int_distribution<int64_t> jitter(0, delay / 5);
  return std::chrono::milliseconds(delay - jitter(jitter_));
}

PlanRequest Session::MakeRequest(uint64_t limit) const {
  PlanRequest request;
  request.device = device_;
  request.policy = policy_;
  request.workspace_mode = mode_;
  request.workspace_bytes = limit;
  return request;
}

void Session::PlannerLoop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    Clock::time_point wake = Clock::time_point::max();

    if (mode_ == WorkspaceMode::kPerKernel) {
      // Every due kernel with the limit of the first one goes into one request.
      std::vector<Pending> batch;
      std::vector<Pending> rest;
      for (Pending& p : pending_) {
        const bool due = p.due <= now;
        const bool fits = batch.empty() || (p.kernel->limit == batch.front().kernel->limit &&
                                            batch.size() < size_t{kMaxKernelsPerRequest});
        if (due && fits) {
          batch.push_back(p);
        } else {
          if (!due) wake = std::min(wake, p.due);
          if (due) wake = now;  // another limit: next round
          rest.push_back(p);
        }
      }
      if (!batch.empty()) {
        pending_ = std::move(rest);
        RunPerKernelRequest(lock, std::move(batch));
        continue;
      }
    } else if (collected_generation_ != planned_generation_ || network_retry_) {
      const Clock::time_point settled =
          last_new_kernel_ + std::chrono::milliseconds(config_.collect_quiet_ms);
      const Clock::time_point due = prepared_ ? network_due_ : std::max(settled, network_due_);
      if (due <= now) {
        RunNetworkRequest(lock);
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

void Session::RunPerKernelRequest(std::unique_lock<std::mutex>& lock, std::vector<Pending> batch) {
  const uint64_t limit = batch.front().kernel->limit;
  PlanRequest request = MakeRequest(limit);
  for (const Pending& p : batch) {
    request.kernels.push_back(Kernel{p.kernel->problem, p.kernel->batch, p.kernel->name});
  }

  plan_requests_.fetch_add(1, std::memory_order_relaxed);
  lock.unlock();
  Result<NetworkPlan> answer = source_->GetPlan(request);
  lock.lock();
  if (stop_) return;

  if (!answer.ok()) {
    plan_request_failures_.fetch_add(1, std::memory_order_relaxed);
    if (!unavailable_warned_) {
      spdlog::warn("ucudnn: no plans from {} ({}); kernels run undivided meanwhile, retrying",
                   source_->Describe(), answer.status().ToString());
      unavailable_warned_ = true;
    } else {
      spdlog::debug("ucudnn: plan request failed again: {}", answer.status().ToString());
    }
    for (Pending& p : batch) {
      p.kernel->reason = answer.status().ToString();
      p.due = Clock::now() + Backoff(p.attempts++);
      pending_.push_back(p);
    }
    return;
  }
  if (unavailable_warned_) {
    spdlog::info("ucudnn: plans from {} again", source_->Describe());
    unavailable_warned_ = false;
  }

  for (size_t i = 0; i < batch.size(); ++i) {
    Pending& p = batch[i];
    const KernelPlan& kernel_plan = answer->kernels[i];
    if (!(kernel_plan.kernel.problem == p.kernel->problem) ||
        kernel_plan.kernel.mini_batch != p.kernel->batch) {
      p.kernel->reason = "the planner answered another kernel at position " + std::to_string(i);
      p.due = Clock::now() + Backoff(p.attempts++);
      pending_.push_back(p);
      continue;
    }
    switch (kernel_plan.status) {
      case KernelPlanStatus::kPlanned: {
        Publish(p.kernel, MakeEntry(kernel_plan, limit, /*from_cache=*/false));
        plans_received_.fetch_add(1, std::memory_order_relaxed);
        NetworkPlan record;
        record.kernels = {kernel_plan};
        record.workspace_mode = WorkspaceMode::kPerKernel;
        record.policy = policy_;
        record.workspace_budget_bytes = limit;
        record.total_time_ms = kernel_plan.config.time_ms;
        record.total_workspace_bytes = kernel_plan.config.workspace_bytes;
        record.complete = true;
        cache_.Put(CacheRecord{device_, std::move(record)});
        cache_dirty_ = true;
        break;
      }
      case KernelPlanStatus::kMissing:
        p.kernel->state = KernelReport::State::kMissing;
        p.kernel->reason = kernel_plan.reason;
        p.due = Clock::now() + Backoff(p.attempts++);
        pending_.push_back(p);
        break;
      case KernelPlanStatus::kInfeasible:
        p.kernel->state = KernelReport::State::kInfeasible;
        p.kernel->reason = kernel_plan.reason;
        break;
    }
  }
}

void Session::PublishNetwork(const std::vector<KernelState*>& kernels, const NetworkPlan& plan,
                             bool from_cache) {
  size_t offset = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    KernelState* kernel = kernels[i];
    const KernelPlan& kernel_plan = plan.kernels[i];
    if (kernel_plan.status != KernelPlanStatus::kPlanned) {
      kernel->state = kernel_plan.status == KernelPlanStatus::kMissing
                          ? KernelReport::State::kMissing
                          : KernelReport::State::kInfeasible;
      kernel->reason = kernel_plan.reason;
      continue;
    }
    std::unique_ptr<PlanEntry> entry = MakeEntry(kernel_plan, config_.workspace_bytes, from_cache);
    entry->library_workspace = true;
    if (mode_ == WorkspaceMode::kTotalShared) {
      entry->workspace_offset = 0;
      entry->workspace_slice = std::min<size_t>(config_.workspace_bytes, library_workspace_bytes_);
    } else {
      entry->workspace_offset = AlignUp(offset, kSliceAlignment);
      entry->workspace_slice = kernel_plan.config.workspace_bytes;
      offset = entry->workspace_offset + entry->workspace_slice;
    }
    if (entry->workspace_offset + entry->workspace_slice > library_workspace_bytes_ ||
        entry->workspace_bytes > entry->workspace_slice) {
      kernel->state = KernelReport::State::kInfeasible;
      kernel->reason =
          "the plan's workspaces exceed the budget of " + FormatBytes(config_.workspace_bytes);
      continue;
    }
    if (!from_cache) plans_received_.fetch_add(1, std::memory_order_relaxed);
    if (from_cache) plans_from_cache_.fetch_add(1, std::memory_order_relaxed);
    Publish(kernel, std::move(entry));
  }
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

  if (std::optional<NetworkPlan> cached =
          cache_.FindNetwork(device_, mode_, policy_, config_.workspace_bytes, request.kernels)) {
    // The cached record holds the same kernels, maybe in another order.
    NetworkPlan ordered = *cached;
    ordered.kernels.clear();
    for (const Kernel& kernel : request.kernels) {
      for (const KernelPlan& kernel_plan : cached->kernels) {
        if (kernel_plan.kernel.problem == kernel.problem &&
            kernel_plan.kernel.mini_batch == kernel.mini_batch) {
          ordered.kernels.push_back(kernel_plan);
          break;
        }
      }
    }
    if (ordered.kernels.size() == kernels.size()) {
      PublishNetwork(kernels, ordered, /*from_cache=*/true);
      planned_generation_ = generation;
      network_retry_ = false;
      return;
    }
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

  plan_requests_.fetch_add(1, std::memory_order_relaxed);
  lock.unlock();
  Result<NetworkPlan> answer = source_->GetPlan(request);
  lock.lock();
  if (stop_) return;

  if (!answer.ok()) {
    plan_request_failures_.fetch_add(1, std::memory_order_relaxed);
    if (!unavailable_warned_) {
      spdlog::warn(
          "ucudnn: no network plan from {} ({}); kernels run undivided meanwhile, "
          "retrying",
          source_->Describe(), answer.status().ToString());
      unavailable_warned_ = true;
    }
    for (KernelState* kernel : kernels) kernel->reason = answer.status().ToString();
    network_due_ = Clock::now() + Backoff(network_attempts_++);
    network_retry_ = true;
    return;
  }
  if (unavailable_warned_) {
    spdlog::info("ucudnn: plans from {} again", source_->Describe());
    unavailable_warned_ = false;
  }
  for (size_t i = 0; i < request.kernels.size(); ++i) {
    if (!(answer->kernels[i].kernel.problem == request.kernels[i].problem) ||
        answer->kernels[i].kernel.mini_batch != request.kernels[i].mini_batch) {
      spdlog::warn("ucudnn: the planner answered other kernels than asked; ignoring the answer");
      network_due_ = Clock::now() + Backoff(network_attempts_++);
      network_retry_ = true;
      return;
    }
  }
  const std::vector<KernelState*> answered(
      kernels.begin(), kernels.begin() + static_cast<ptrdiff_t>(request.kernels.size()));
  PublishNetwork(answered, *answer, /*from_cache=*/false);
  planned_generation_ = generation;
  if (answer->complete) {
    network_retry_ = false;
    network_attempts_ = 0;
    CacheRecord record{device_, *answer};
    record.plan.workspace_mode = mode_;
    record.plan.policy = policy_;
    record.plan.workspace_budget_bytes = config_.workspace_bytes;
    cache_.Put(std::move(record));
    cache_dirty_ = true;
  } else {
    // Some kernels lack timings: ask again later for the whole network.
    bool missing = false;
    for (const KernelPlan& k : answer->kernels) missing |= k.status == KernelPlanStatus::kMissing;
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
  if (!saved.ok()) spdlog::warn("ucudnn: cannot save the plan cache: {}", saved.ToString());
}

}  // namespace ucudnn::client
