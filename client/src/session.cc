// Session: construction, the kernels' registration, waits and reports. The calling threads' path
// is in session_hot_path.cc, the planner thread in session_planner.cc, contribution in
// session_contribution.cc.
#include "session.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "config_internal.h"
#include "log.h"
#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/units.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::client {
namespace {

// Whether the token would cross the network in plaintext.
bool LoopbackAddress(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address.rfind("localhost", 0) == 0 ||
         address.rfind("[::1]", 0) == 0 || address.rfind("unix:", 0) == 0;
}

}  // namespace

std::unique_ptr<Session> Session::Create(ConvBackend& backend, const ClientConfig& config,
                                         std::unique_ptr<PlanSource> source, SessionHooks hooks) {
  return std::unique_ptr<Session>(
      new Session(backend, config, std::move(source), std::move(hooks)));
}

Session::Session(ConvBackend& backend, const ClientConfig& config,
                 std::unique_ptr<PlanSource> source, SessionHooks hooks)
    : backend_(backend),
      config_(config),
      device_(backend.fingerprint()),
      mode_(ToCore(config.workspace_mode)),
      policy_(ToCore(config.policy)),
      algorithms_(ToCore(config.algorithms)),
      table_(config.max_kernels),
      binder_(hooks.binder),
      kernels_by_limit_(hooks.kernels_by_limit),
      contribution_backend_(std::move(hooks.contribution_backend)),
      benchmark_options_(hooks.benchmark),
      source_(std::move(source)),
      jitter_(static_cast<unsigned>(::getpid())) {
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    for (const AlgorithmInfo& info : backend_.Algorithms(op)) {
      algorithm_ids_[static_cast<size_t>(op)].push_back(info.id);
    }
  }
  if (!config_.enabled) return;
  if (!config_.framework.empty()) {
    if (Status valid = CheckFrameworkIdentity("UCUDNN_FRAMEWORK", config_.framework); valid.ok()) {
      framework_ = config_.framework;
    } else {
      client::Log().error("{}; planning without the framework's own convolution", valid.message());
    }
  }
  ConnectPlanner();
  EnableContribution();
  if (mode_ != WorkspaceMode::kPerKernel) AllocateLibraryWorkspace();
  if (!config_.cache_path.empty()) cache_ = PlanCache::Load(config_.cache_path);
  client::Log().debug("session on {} ({}), mode {}, planner {}, cache {}", device_.name,
                      device_.backend, ToString(mode_), source_ ? source_->Describe() : "none",
                      config_.cache_path.empty() ? "none" : config_.cache_path);
  planner_ = std::thread([this] { PlannerMain(); });
}

void Session::ConnectPlanner() {
  if (source_ != nullptr || config_.server.empty()) return;
  Result<std::unique_ptr<PlanSource>> grpc_source = MakeGrpcPlanSource(
      GrpcPlanSourceOptions{config_.server, config_.token, config_.deadline_ms,
                            config_.server_wait_ms, config_.tls, config_.ca_file});
  if (grpc_source.ok()) {
    source_ = std::move(*grpc_source);
    if (!config_.tls && !config_.token.empty() && !LoopbackAddress(config_.server)) {
      client::Log().warn(
          "the token goes to {} in plaintext; set UCUDNN_TLS=1 (and UCUDNN_CA_FILE) "
          "to protect it",
          config_.server);
    }
  } else {
    client::Log().error("no planner: {}; plans come from the local cache only",
                        grpc_source.status().ToString());
  }
}

void Session::EnableContribution() {
  if (!config_.contribute) return;
  if (config_.token.empty()) {
    client::Log().warn(
        "contribution (UCUDNN_CONTRIBUTE) needs the submission token (UCUDNN_TOKEN); "
        "it stays off");
  } else if (source_ == nullptr) {
    client::Log().warn("contribution (UCUDNN_CONTRIBUTE) needs a server; it stays off");
  } else if (!contribution_backend_) {
    client::Log().warn("contribution: no backend of the library's own to measure on; off");
  } else {
    contribution_enabled_ = true;
    client::Log().info(
        "contribution on: missing timings are benchmarked here at quiet points when no "
        "worker serves this device");
  }
}

void Session::AllocateLibraryWorkspace() {
  if (config_.workspace_bytes == 0) {
    client::Log().warn(
        "workspace mode {} needs a budget (UCUDNN_WORKSPACE_BYTES); planning "
        "per kernel instead",
        ToString(mode_));
    mode_ = WorkspaceMode::kPerKernel;
    return;
  }
  // Room for every slice's alignment on top of the budget.
  const size_t bytes = config_.workspace_bytes + size_t{config_.max_kernels} * kSliceAlignment;
  Result<std::unique_ptr<BackendBuffer>> buffer = backend_.Allocate(bytes);
  if (!buffer.ok()) {
    client::Log().warn("cannot allocate the {} workspace ({}); planning per kernel instead",
                       FormatBytes(bytes), buffer.status().ToString());
    mode_ = WorkspaceMode::kPerKernel;
    return;
  }
  library_workspace_ = std::move(*buffer);
  library_workspace_base_ = static_cast<char*>(library_workspace_->data());
  library_workspace_bytes_ = library_workspace_->size();
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
  // Plans that arrived just before shutdown are kept too. A destructor must not throw.
  if (cache_dirty_ && !config_.cache_path.empty()) {
    try {
      Status saved = cache_.Save(config_.cache_path);
      if (!saved.ok()) client::Log().warn("cannot save the plan cache: {}", saved.ToString());
    } catch (const std::exception& e) {
      client::Log().warn("cannot save the plan cache: {}", e.what());
    }
  }
}

KernelState* Session::Register(const ConvProblem& problem, int64_t batch, uint64_t hash,
                               uint64_t limit, std::string_view name) {
  std::lock_guard lock(mutex_);
  if (KernelState* existing = table_.Find(hash, problem, batch, KeyLimit(limit))) return existing;

  auto state = std::make_unique<KernelState>();
  state->hash = hash;
  state->problem = problem;
  state->batch = batch;
  state->name = std::string(name.substr(0, kMaxKernelNameBytes));
  state->limit = limit;
  KernelState* kernel = table_.Insert(std::move(state));
  if (kernel == nullptr) {
    table_full_.store(true, std::memory_order_relaxed);
    if (!table_full_warned_) {
      client::Log().warn("more than {} distinct kernels; further ones run undivided, untracked",
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
    std::optional<KernelPlan> cached;
    if (UsesPlanCache()) cached = cache_.FindKernel(device_, policy_, limit, key, framework_);
    if (cached) {
      // What the server said of the framework's own with it, so that a job whose plans all come
      // from the file does not measure the framework again.
      kernel->KnowFramework(*cached);
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
  (void)FindOrRegister(problem, batch, limit, name);
}

void Session::Prepare(const std::vector<Kernel>& kernels) {
  for (const Kernel& kernel : kernels) {
    Declare(kernel.problem, kernel.mini_batch, config_.workspace_bytes, kernel.name);
  }
  Prepare();
}

void Session::Prepare() {
  if (!config_.enabled) return;
  {
    std::lock_guard lock(mutex_);
    prepared_ = true;
    work_cv_.notify_one();
  }
  if (contribution_enabled_) {
    // A quiet point: the server's answers first (one deadline and some), then every missing
    // problem, however long that takes: this is the job's setup.
    (void)WaitForAnswers(Clock::now() + std::chrono::milliseconds(config_.deadline_ms) +
                         std::chrono::seconds(1));
    (void)Contribute();
  }
}

bool Session::AnyWaiting() const {
  for (const auto& kernel : table_.entries()) {
    if (kernel->state == KernelReport::State::kWaiting) return true;
  }
  return false;
}

bool Session::WaitForAnswers(Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return answered_cv_.wait_until(lock, deadline, [this] { return stop_ || !AnyWaiting(); });
}

bool Session::WaitForPlans(std::chrono::milliseconds timeout) {
  // Bounded so that the deadline cannot overflow the clock.
  const auto bounded = std::clamp(timeout, std::chrono::milliseconds(0),
                                  std::chrono::milliseconds(int64_t{1} << 40));
  const Clock::time_point deadline = Clock::now() + bounded;
  bool answered = WaitForAnswers(deadline);
  if (contribution_enabled_ && answered) {
    Result<int> contributed = Contribute(deadline);
    if (contributed.ok() && *contributed > 0) answered = WaitForAnswers(deadline);
  }
  return answered;
}

size_t Session::BindPlans() {
  std::vector<std::pair<const PlanEntry*, const KernelState*>> unverified;
  {
    std::lock_guard lock(mutex_);
    for (const auto& kernel : table_.entries()) {
      const PlanEntry* plan = kernel->plan.load(std::memory_order_acquire);
      if (plan == nullptr || plan->framework || plan->failed.load(std::memory_order_relaxed) ||
          plan->required_bytes.load(std::memory_order_acquire) != PlanEntry::kUnverified) {
        continue;
      }
      unverified.emplace_back(plan, kernel.get());
    }
  }
  if (unverified.empty()) return 0;
  const auto start = Clock::now();
  // Plan entries and kernels live as long as the session: safe outside the lock.
  for (const auto& [plan, kernel] : unverified) (void)Verify(*plan, kernel->problem);
  client::Log().info("bound {} plans in {:.2f} s", unverified.size(),
                     std::chrono::duration<double>(Clock::now() - start).count());
  return unverified.size();
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
    stats.recovered_calls += kernel->recovered_calls.load(std::memory_order_relaxed);
    stats.framework_calls += kernel->framework_calls.load(std::memory_order_relaxed);
  }
  stats.passthrough_calls = passthrough_calls_.load(std::memory_order_relaxed);
  stats.untracked_calls = untracked_calls_.load(std::memory_order_relaxed);
  stats.plan_requests = plan_requests_.load(std::memory_order_relaxed);
  stats.plan_request_failures = plan_request_failures_.load(std::memory_order_relaxed);
  stats.plans_received = plans_received_.load(std::memory_order_relaxed);
  stats.plans_from_cache = plans_from_cache_.load(std::memory_order_relaxed);
  stats.failed_plans = failed_plans_.load(std::memory_order_relaxed);
  stats.contributed_problems = contributed_problems_.load(std::memory_order_relaxed);
  stats.contributed_timings = contributed_timings_.load(std::memory_order_relaxed);
  stats.contribution_failures = contribution_failures_.load(std::memory_order_relaxed);
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
      for (const Segment& s : plan->segments) {
        report.segments.push_back({s.micro_batch, s.algo, s.engine_config});
      }
    }
    report.planned_calls = kernel->planned_calls.load(std::memory_order_relaxed);
    report.fallback_calls = kernel->fallback_calls.load(std::memory_order_relaxed);
    report.framework_calls = kernel->framework_calls.load(std::memory_order_relaxed);
    report.framework_ms = kernel->framework_ms;
    reports.push_back(std::move(report));
  }
  return reports;
}

KernelInfo Session::Info(const KernelState& kernel) const {
  KernelInfo info;
  std::lock_guard lock(mutex_);
  info.framework_ms = kernel.framework_ms;
  info.framework_workspace_bytes = kernel.framework_workspace_bytes;
  const PlanEntry* plan = kernel.plan.load(std::memory_order_acquire);
  if (plan != nullptr && !plan->failed.load(std::memory_order_relaxed)) {
    info.state = plan->framework ? KernelInfo::State::kFramework : KernelInfo::State::kPlanned;
    info.segments = static_cast<int32_t>(plan->segments.size());
    info.predicted_ms = plan->predicted_ms;
    info.undivided_ms = plan->undivided_ms;
    info.workspace_bytes = plan->workspace_bytes;
  } else if (kernel.state == KernelReport::State::kMissing) {
    info.state = KernelInfo::State::kMissing;
  } else if (kernel.state != KernelReport::State::kWaiting) {
    info.state = KernelInfo::State::kNoPlan;
  }
  return info;
}

}  // namespace ucudnn::client
