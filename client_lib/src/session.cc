#include "session.h"
#include "log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <set>
#include <span>
#include <utility>

#include "config_internal.h"
#include "ucudnn/core/dp.h"
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

// PlanWorkspace(): the plan does not fit its slice of the library workspace.
constexpr int64_t kRejectedPlan = -2;

// The packed fallback cache holds the workspace size in the upper 48 bits.
constexpr uint64_t kMaxPackedWorkspace = (uint64_t{1} << 48) - 1;

std::string KernelLabel(const KernelState& kernel) {
  return kernel.name.empty() ? CanonicalKey(kernel.problem) + "@" + std::to_string(kernel.batch)
                             : kernel.name;
}

// Who measured contributed timings (TimingSubmission.measured_by, at most 128 bytes).
std::string MeasuredBy() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string who = std::string("ucudnn-client ") + (host[0] != '\0' ? host : "unknown-host") +
                    " pid " + std::to_string(::getpid());
  if (who.size() > 128) who.resize(128);
  return who;
}

// Whether a measured timing says something about this job rather than about the device: a
// failure (an allocation the training job's memory left no room for, say) or a configuration
// over the engine's workspace cap. Such timings are not submitted, so that a job cannot mark
// configurations unusable for the whole cluster; a worker may measure them later.
bool JobLocal(const Timing& t, const BenchmarkOptions& options) {
  if (t.status == TimingStatus::kFailed) return true;
  return t.status == TimingStatus::kUnsupported && t.workspace_bytes > options.workspace_cap_bytes;
}

// Whether the token would cross the network in plaintext.
bool LoopbackAddress(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address.rfind("localhost", 0) == 0 ||
         address.rfind("[::1]", 0) == 0 || address.rfind("unix:", 0) == 0;
}

}  // namespace

// ---- BackendUndividedRunner -------------------------------------------------------------------

Result<int> BackendUndividedRunner::ChooseAlgorithm(size_t workspace_bytes) {
  int best = -1;
  size_t best_workspace = 0;
  bool any_error = false;
  Status last;
  auto consider = [&](int id) {
    Result<size_t> needed = backend_.WorkspaceSize(problem_, batch_, id);
    if (!needed.ok()) {
      last = needed.status();
      any_error = true;
      return;
    }
    if (*needed > workspace_bytes) return;
    if (best < 0 || *needed > best_workspace) {
      best = id;
      best_workspace = *needed;
    }
  };
  if (!algorithms_.empty()) {
    for (int id : algorithms_) consider(id);
  } else {
    for (const AlgorithmInfo& info : backend_.Algorithms(problem_.op)) consider(info.id);
  }
  if (best >= 0) return best;
  if (any_error) return last;
  return Unsupported("no algorithm of the backend runs " + CanonicalKey(problem_) + " within " +
                     FormatBytes(workspace_bytes));
}

Status BackendUndividedRunner::Run(int algo, void* workspace, size_t workspace_bytes) {
  return backend_.Run(problem_, batch_, algo, operands_, workspace, workspace_bytes, alpha_, beta_);
}

// ---- Session: construction ---------------------------------------------------------------------

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
      algorithms_(config.algorithms == ClientConfig::Algorithms::kLegacy ? AlgorithmSpace::kLegacy
                  : config.algorithms == ClientConfig::Algorithms::kEngines
                      ? AlgorithmSpace::kEngines
                      : AlgorithmSpace::kAll),
      table_(config.max_kernels),
      binder_(hooks.binder),
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
  if (source_ == nullptr && !config_.server.empty()) {
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
  if (config_.contribute) {
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
  if (mode_ != WorkspaceMode::kPerKernel) {
    if (config_.workspace_bytes == 0) {
      client::Log().warn(
          "workspace mode {} needs a budget (UCUDNN_WORKSPACE_BYTES); planning "
          "per kernel instead",
          ToString(mode_));
      mode_ = WorkspaceMode::kPerKernel;
    } else {
      // Room for every slice's alignment on top of the budget.
      const size_t bytes = config_.workspace_bytes + size_t{config_.max_kernels} * kSliceAlignment;
      Result<std::unique_ptr<BackendBuffer>> buffer = backend_.Allocate(bytes);
      if (!buffer.ok()) {
        client::Log().warn("cannot allocate the {} workspace ({}); planning per kernel instead",
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
  client::Log().debug("session on {} ({}), mode {}, planner {}, cache {}", device_.name,
                      device_.backend, ToString(mode_), source_ ? source_->Describe() : "none",
                      config_.cache_path.empty() ? "none" : config_.cache_path);
  planner_ = std::thread([this] { PlannerMain(); });
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

// ---- Session: the calling threads ---------------------------------------------------------------

Status Session::Execute(const ConvProblem& problem, int64_t batch, const ConvOperands& operands,
                        void* workspace, size_t workspace_bytes, float alpha, float beta,
                        UndividedRunner* runner) {
  BackendUndividedRunner backend_runner(backend_, problem, batch, operands, alpha, beta,
                                        AlgorithmIds(problem.op));
  UndividedRunner& undivided = runner != nullptr ? *runner : backend_runner;

  if (!config_.enabled) {
    passthrough_calls_.fetch_add(1, std::memory_order_relaxed);
    UCUDNN_ASSIGN_OR_RETURN(const int algo, undivided.ChooseAlgorithm(workspace_bytes));
    return undivided.Run(algo, workspace, workspace_bytes);
  }

  KernelState* kernel = FindOrRegister(problem, batch, workspace_bytes);
  if (kernel == nullptr) {
    untracked_calls_.fetch_add(1, std::memory_order_relaxed);
    UCUDNN_ASSIGN_OR_RETURN(const int algo, undivided.ChooseAlgorithm(workspace_bytes));
    return undivided.Run(algo, workspace, workspace_bytes);
  }
  return Execute(*kernel, operands, workspace, workspace_bytes, alpha, beta, undivided);
}

Status Session::Execute(KernelState& kernel_state, const ConvOperands& operands, void* workspace,
                        size_t workspace_bytes, float alpha, float beta,
                        UndividedRunner& undivided) {
  KernelState* kernel = &kernel_state;
  const ConvProblem& problem = kernel->problem;
  const int64_t batch = kernel->batch;
  const PlanEntry* plan = kernel->plan.load(std::memory_order_acquire);
  if (plan != nullptr && !plan->failed.load(std::memory_order_relaxed)) {
    void* plan_workspace = workspace;
    size_t plan_workspace_bytes = workspace_bytes;
    if (plan->library_workspace) {
      plan_workspace = library_workspace_base_ + plan->workspace_offset;
      plan_workspace_bytes = plan->workspace_slice;
    }
    int64_t needed = plan->required_bytes.load(std::memory_order_acquire);
    if (needed == PlanEntry::kUnverified) needed = Verify(*plan, problem);
    if (needed >= 0 && static_cast<uint64_t>(needed) <= plan_workspace_bytes) {
      // The first run goes through the executor and all its checks; later ones skip them, and
      // run on what the binder resolved for this plan when there is one.
      const bool executed = plan->executed.load(std::memory_order_relaxed);
      size_t completed = 0;
      Status status;
      if (!executed) {
        status = ExecuteMicroBatched(backend_, problem, batch, plan->segments, operands,
                                     plan_workspace, plan_workspace_bytes, alpha, beta, &completed);
      } else if (MicroBatchRunner* bound = plan->runner.load(std::memory_order_acquire)) {
        status = RunMicroBatches(*bound, problem, plan->segments, operands, plan_workspace,
                                 plan_workspace_bytes, alpha, beta, &completed);
      } else {
        status = RunMicroBatches(backend_, problem, plan->segments, operands, plan_workspace,
                                 plan_workspace_bytes, alpha, beta, &completed);
      }
      if (status.ok()) {
        if (!executed) plan->executed.store(true, std::memory_order_relaxed);
        kernel->planned_calls.fetch_add(1, std::memory_order_relaxed);
        return status;
      }
      return RecoverFailedPlan(kernel, *plan, status, completed, problem, batch, operands,
                               workspace, workspace_bytes, plan_workspace, plan_workspace_bytes,
                               alpha, beta, undivided);
    }
    if (needed >= 0) kernel->rejected_calls.fetch_add(1, std::memory_order_relaxed);
  }

  UCUDNN_ASSIGN_OR_RETURN(const int algo, FallbackAlgorithm(kernel, workspace_bytes, undivided));
  kernel->fallback_calls.fetch_add(1, std::memory_order_relaxed);
  return undivided.Run(algo, workspace, workspace_bytes);
}

// A plan can fail while running although it was verified: cuDNN may decline a planned algorithm
// at run time (CUDNN_STATUS_NOT_SUPPORTED for a shape or alignment its workspace query accepted),
// or the plan came from a cache file or server that does not match this machine. The step must
// not fail for it. A failed call writes nothing (the backends report errors before launching
// work), so what the output holds is known:
//  - no segment ran yet (completed == 0): the output is untouched; the whole batch runs again
//    undivided with the caller's beta;
//  - beta == 0: the output is rewritten whole whatever the segments wrote; the whole batch runs
//    again undivided (also backward-filter: its accumulation restarts from beta = 0);
//  - beta != 0 after segments wrote: their part of the output already holds
//    alpha * result + beta * old, and the old values are gone, so running the whole batch again
//    would apply beta twice. The samples the plan did not reach run as one undivided call
//    instead: forward and backward-data with the caller's beta on their own, untouched slice;
//    backward-filter with beta = 1, adding the rest of the batch onto the partial sum, exactly
//    as the plan's remaining micro-batches would have.
Status Session::RecoverFailedPlan(KernelState* kernel, const PlanEntry& plan, const Status& failure,
                                  size_t completed, const ConvProblem& problem, int64_t batch,
                                  const ConvOperands& operands, void* workspace,
                                  size_t workspace_bytes, void* plan_workspace,
                                  size_t plan_workspace_bytes, float alpha, float beta,
                                  UndividedRunner& undivided) {
  if (!plan.failed.exchange(true, std::memory_order_acq_rel)) {
    failed_plans_.fetch_add(1, std::memory_order_relaxed);
    client::Log().warn(
        "the plan of {} failed after {} of {} micro-batches; it runs undivided from now "
        "on: {}",
        KernelLabel(*kernel), completed, plan.segments.size(), failure.ToString());
    std::lock_guard lock(mutex_);
    if (kernel->plan.load(std::memory_order_relaxed) == &plan) {
      kernel->state = KernelReport::State::kPlanFailed;
      kernel->reason = failure.ToString();
    }
  }
  Status status;
  if (completed == 0 || beta == 0.0f) {
    Result<int> algo = FallbackAlgorithm(kernel, workspace_bytes, undivided);
    if (!algo.ok()) return algo.status();
    status = undivided.Run(*algo, workspace, workspace_bytes);
  } else {
    const bool plan_larger = plan_workspace_bytes > workspace_bytes;
    status = RunRemainder(problem, batch, plan, completed, operands,
                          plan_larger ? plan_workspace : workspace,
                          plan_larger ? plan_workspace_bytes : workspace_bytes, alpha, beta);
    if (!status.ok()) {
      client::Log().error("cannot finish {} after its plan failed: {}", KernelLabel(*kernel),
                          status.ToString());
    }
  }
  if (status.ok()) {
    kernel->fallback_calls.fetch_add(1, std::memory_order_relaxed);
    kernel->recovered_calls.fetch_add(1, std::memory_order_relaxed);
  }
  return status;
}

Status Session::RunRemainder(const ConvProblem& problem, int64_t batch, const PlanEntry& plan,
                             size_t from, const ConvOperands& operands, void* workspace,
                             size_t workspace_bytes, float alpha, float beta) {
  int64_t done = 0;
  for (size_t i = 0; i < from && i < plan.segments.size(); ++i) {
    done += plan.segments[i].micro_batch;
  }
  const int64_t rest = batch - done;
  if (rest <= 0) return Internal("the plan failed past the end of the batch");
  const ConvOperands shifted = OffsetOperands(problem, operands, done);
  const float rest_beta = SegmentBeta(problem.op, from, beta);
  // Every algorithm that fits, most workspace first (mostly the fastest); the failed segment's
  // algorithm last. A failing attempt writes nothing, so the next one may follow it.
  const int failed_algo = from < plan.segments.size() ? plan.segments[from].algo : -1;
  std::vector<std::pair<size_t, int>> candidates;
  Status last = Unsupported("no algorithm runs the remaining " + std::to_string(rest) +
                            " samples within " + FormatBytes(workspace_bytes));
  for (int id : AlgorithmIds(problem.op)) {
    Result<size_t> needed = backend_.WorkspaceSize(problem, rest, id);
    if (!needed.ok()) {
      last = needed.status();
      continue;
    }
    if (*needed <= workspace_bytes) candidates.emplace_back(*needed, id);
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](const auto& a, const auto& b) {
    if ((a.second == failed_algo) != (b.second == failed_algo)) return b.second == failed_algo;
    return a.first > b.first;
  });
  for (const auto& [bytes, id] : candidates) {
    last = backend_.Run(problem, rest, id, shifted, bytes > 0 ? workspace : nullptr,
                        bytes > 0 ? workspace_bytes : 0, alpha, rest_beta);
    if (last.ok()) return last;
  }
  return last;
}

int64_t Session::Verify(const PlanEntry& plan, const ConvProblem& problem) {
  int64_t needed = 0;
  for (const Segment& segment : plan.segments) {
    Result<size_t> bytes =
        backend_.WorkspaceSize(problem, segment.micro_batch, AlgorithmOf(segment));
    if (!bytes.ok()) {
      client::Log().warn("plan segment (micro-batch {}, algo {}) of {} cannot run here: {}",
                         segment.micro_batch, AlgorithmText(AlgorithmOf(segment)),
                         CanonicalKey(problem), bytes.status().ToString());
      needed = PlanEntry::kNotRunnable;
      break;
    }
    needed = std::max<int64_t>(needed, static_cast<int64_t>(*bytes));
  }
  // Resolved once here, so that later calls of the plan look nothing up.
  if (needed >= 0 && binder_ != nullptr && plan.runner.load(std::memory_order_acquire) == nullptr) {
    Result<std::unique_ptr<MicroBatchRunner>> bound = binder_->Bind(problem, plan.segments);
    if (bound.ok()) {
      MicroBatchRunner* expected = nullptr;
      if (plan.runner.compare_exchange_strong(expected, bound->get(), std::memory_order_acq_rel)) {
        (void)bound->release();  // the entry owns it now
      }
    } else {
      client::Log().debug("the plan of {} runs through the backend: {}", CanonicalKey(problem),
                          bound.status().ToString());
    }
  }
  plan.required_bytes.store(needed, std::memory_order_release);
  return needed;
}

Result<int> Session::FallbackAlgorithm(KernelState* kernel, size_t workspace_bytes,
                                       UndividedRunner& runner) {
  for (const std::atomic<uint64_t>& slot : kernel->fallback_choice) {
    const uint64_t packed = slot.load(std::memory_order_relaxed);
    if (packed != 0 && (packed >> 16) == workspace_bytes) {
      return static_cast<int>(packed & 0xffff) - 1;
    }
  }
  UCUDNN_ASSIGN_OR_RETURN(const int algo, runner.ChooseAlgorithm(workspace_bytes));
  if (workspace_bytes <= kMaxPackedWorkspace && algo >= 0 && algo < 0xffff) {
    const uint32_t slot =
        kernel->fallback_next.fetch_add(1, std::memory_order_relaxed) % KernelState::kFallbackSlots;
    kernel->fallback_choice[slot].store(
        (uint64_t{workspace_bytes} << 16) | static_cast<uint64_t>(algo + 1),
        std::memory_order_relaxed);
  }
  return algo;
}

std::span<const int> Session::AlgorithmIds(ConvOp op) const {
  const size_t index = static_cast<size_t>(op);
  if (index >= algorithm_ids_.size()) return {};
  return algorithm_ids_[index];
}

const PlanEntry* Session::PlanOf(const ConvProblem& problem, int64_t batch) const {
  const KernelState* kernel = table_.Find(KernelKeyHash(problem, batch), problem, batch);
  return kernel != nullptr ? kernel->plan.load(std::memory_order_acquire) : nullptr;
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
    if (UsesPlanCache()) cached = cache_.FindKernel(device_, policy_, limit, key);
    if (cached) {
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

KernelState* Session::FindOrRegister(const ConvProblem& problem, int64_t batch, uint64_t limit,
                                     std::string_view name) {
  const uint64_t hash = KernelKeyHash(problem, batch);
  KernelState* kernel = table_.Find(hash, problem, batch);
  // Once the table is full, an unknown kernel stays unknown: no mutex, no allocation.
  if (kernel == nullptr && !table_full_.load(std::memory_order_relaxed)) {
    kernel = Register(problem, batch, hash, limit, name);
  }
  return kernel;
}

int64_t Session::PlannedWorkspace(const ConvProblem& problem, int64_t batch, uint64_t limit) {
  if (!config_.enabled) {
    passthrough_calls_.fetch_add(1, std::memory_order_relaxed);
    return -1;
  }
  KernelState* kernel = FindOrRegister(problem, batch, limit);
  if (kernel == nullptr) {
    untracked_calls_.fetch_add(1, std::memory_order_relaxed);
    return -1;
  }
  return PlannedWorkspace(*kernel);
}

KernelState* Session::FindKernel(const ConvProblem& problem, int64_t batch, uint64_t limit) {
  return config_.enabled ? FindOrRegister(problem, batch, limit) : nullptr;
}

int64_t Session::PlannedWorkspace(KernelState& kernel) {
  const int64_t needed = PlanWorkspace(kernel);
  if (needed >= 0) return needed;
  if (needed == kRejectedPlan) kernel.rejected_calls.fetch_add(1, std::memory_order_relaxed);
  kernel.fallback_calls.fetch_add(1, std::memory_order_relaxed);
  return -1;
}

int64_t Session::PlanWorkspace(KernelState& kernel) {
  const PlanEntry* plan = kernel.plan.load(std::memory_order_acquire);
  if (plan == nullptr || plan->failed.load(std::memory_order_relaxed)) return -1;
  int64_t needed = plan->required_bytes.load(std::memory_order_acquire);
  if (needed == PlanEntry::kUnverified) needed = Verify(*plan, kernel.problem);
  if (needed < 0) return -1;
  if (!plan->library_workspace) return needed;
  // Execute() rejects a slice smaller than the plan needs; so does this answer.
  return static_cast<uint64_t>(needed) <= plan->workspace_slice ? 0 : kRejectedPlan;
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

// ---- Session: contribution ---------------------------------------------------------------------

Result<int> Session::Contribute(Clock::time_point deadline) {
  if (!contribution_enabled_) return 0;
  std::lock_guard contributing(contribute_mutex_);

  // The problems the server lacks timings for, with every micro-batch size of the policy that one
  // of their kernels needs (the server asks a request's kernels of a problem for the sizes up to
  // their largest mini-batch, and a per-kernel request may hold any one of them; the policy's
  // sizes of two mini-batches need not nest: those of 3 are not among those of 6).
  struct Missing {
    ConvProblem problem;
    std::set<int64_t> sizes;
  };
  std::vector<Missing> missing;
  {
    std::lock_guard lock(mutex_);
    for (const auto& kernel : table_.entries()) {
      if (kernel->state != KernelReport::State::kMissing) continue;
      auto m = std::find_if(missing.begin(), missing.end(),
                            [&](const Missing& x) { return x.problem == kernel->problem; });
      if (m == missing.end()) m = missing.insert(missing.end(), Missing{kernel->problem, {}});
      for (int64_t size : MicroBatchSizes(policy_, kernel->batch)) m->sizes.insert(size);
    }
    // Once per problem and size: what this session submitted, the server has.
    for (Missing& m : missing) {
      for (const auto& [problem, size] : contributed_) {
        if (problem == m.problem) m.sizes.erase(size);
      }
    }
    std::erase_if(missing, [](const Missing& m) { return m.sizes.empty(); });
  }
  if (missing.empty()) return 0;

  auto guarded = [](const char* what, auto call) -> decltype(call()) {
    try {
      return call();
    } catch (const std::exception& e) {
      return Internal(std::string(what) + " threw: " + e.what());
    } catch (...) {
      return Internal(std::string(what) + " threw");
    }
  };

  // Workers first: when one serves this device, the server's queue reaches it.
  Result<int> live =
      guarded("ListDevices", [&]() -> Result<int> { return source_->LiveWorkers(device_); });
  if (!live.ok()) {
    contribution_failures_.fetch_add(1, std::memory_order_relaxed);
    client::Log().warn(
        "contribution: cannot tell whether a worker serves this device ({}); "
        "not benchmarking",
        live.status().ToString());
    return live.status();
  }
  if (*live > 0) {
    client::Log().info(
        "contribution: {} live worker(s) serve this device; leaving the {} missing "
        "problem(s) to them",
        *live, missing.size());
    return 0;
  }

  Result<std::unique_ptr<ConvBackend>> bench =
      guarded("contribution backend",
              [&]() -> Result<std::unique_ptr<ConvBackend>> { return contribution_backend_(); });
  if (bench.ok() && !((*bench)->fingerprint() == device_)) {
    bench = Internal("its device " + (*bench)->fingerprint().Key() + " is not the job's " +
                     device_.Key());
  }
  if (!bench.ok()) {
    contribution_failures_.fetch_add(1, std::memory_order_relaxed);
    client::Log().warn("contribution: no backend to measure on: {}", bench.status().ToString());
    return bench.status();
  }

  const std::string measured_by = MeasuredBy();
  int submitted = 0;
  for (size_t i = 0; i < missing.size(); ++i) {
    const Missing& m = missing[i];
    if (Clock::now() >= deadline) {
      client::Log().info("contribution: out of time; {} problem(s) left for the next quiet point",
                         missing.size() - i);
      break;
    }
    const std::string key = CanonicalKey(m.problem);
    const std::vector<int64_t> sizes(m.sizes.begin(), m.sizes.end());
    client::Log().info("contribution: benchmarking {} at micro-batches {} ({})", key,
                       fmt::join(sizes, ","), ToString(policy_));
    Result<TimingTable> table = guarded("benchmark", [&]() -> Result<TimingTable> {
      return BenchmarkMicroBatches(**bench, m.problem, sizes, benchmark_options_);
    });
    if (!table.ok()) {
      contribution_failures_.fetch_add(1, std::memory_order_relaxed);
      client::Log().warn("contribution: benchmarking {} failed: {}", key,
                         table.status().ToString());
      continue;
    }
    std::vector<Timing> timings;
    size_t dropped = 0;
    for (Timing& t : table->entries) {
      if (JobLocal(t, benchmark_options_)) {
        ++dropped;
      } else {
        timings.push_back(std::move(t));
      }
    }
    if (timings.empty()) {
      contribution_failures_.fetch_add(1, std::memory_order_relaxed);
      client::Log().warn("contribution: nothing to submit for {} ({} configurations failed here)",
                         key, dropped);
      continue;
    }
    Result<int> stored = guarded("SubmitTimings", [&]() -> Result<int> {
      return source_->SubmitTimings(device_, m.problem, timings, measured_by);
    });
    if (!stored.ok()) {
      contribution_failures_.fetch_add(1, std::memory_order_relaxed);
      client::Log().warn("contribution: submitting the timings of {} failed: {}", key,
                         stored.status().ToString());
      continue;
    }
    contributed_problems_.fetch_add(1, std::memory_order_relaxed);
    contributed_timings_.fetch_add(static_cast<uint64_t>(std::max(0, *stored)),
                                   std::memory_order_relaxed);
    ++submitted;
    client::Log().info("contribution: {} timings of {} submitted ({} kept back as job-local)",
                       *stored, key, dropped);
    std::lock_guard lock(mutex_);
    for (int64_t size : sizes) contributed_.emplace_back(m.problem, size);
    AskAgainAfterContribution(m.problem);
  }
  return submitted;
}

void Session::AskAgainAfterContribution(const ConvProblem& problem) {
  const Clock::time_point now = Clock::now();
  ++contribution_epoch_;
  bool any = false;
  for (const auto& kernel : table_.entries()) {
    if (!(kernel->problem == problem)) continue;
    // Also kernels in a request in flight now: its answer was made from the timings before these
    // and must not mark them missing (see ContributedSince).
    kernel->contributed_epoch = contribution_epoch_;
    if (kernel->state != KernelReport::State::kMissing) continue;
    any = true;
    kernel->state = KernelReport::State::kWaiting;
    kernel->reason = "timings contributed; asking again";
    for (Pending& p : pending_) {
      if (p.kernel == kernel.get()) {
        p.due = now;
        p.attempts = 0;
      }
    }
  }
  if (any && mode_ != WorkspaceMode::kPerKernel) {
    // The same network again, at once: no need to wait for the collection to settle.
    prepared_ = true;
    network_retry_ = true;
    network_due_ = now;
    network_attempts_ = 0;
  }
  work_cv_.notify_one();
}

// ---- Session: introspection --------------------------------------------------------------------

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
  request.algorithms = algorithms_;
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
          network_retry_ = true;
          network_due_ = Clock::now() + Backoff(network_attempts_++);
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
    request.kernels.push_back(Kernel{p.kernel->problem, p.kernel->batch, p.kernel->name});
  }

  plan_requests_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t asked_epoch = contribution_epoch_;
  lock.unlock();
  Result<NetworkPlan> answer = AskSource(request);
  lock.lock();
  if (stop_) return;

  if (!answer.ok()) {
    plan_request_failures_.fetch_add(1, std::memory_order_relaxed);
    if (!unavailable_warned_) {
      client::Log().warn("no plans from {} ({}); kernels run undivided meanwhile, retrying",
                         source_->Describe(), answer.status().ToString());
      unavailable_warned_ = true;
    } else {
      client::Log().debug("plan request failed again: {}", answer.status().ToString());
    }
    for (Pending& p : batch) {
      p.kernel->reason = answer.status().ToString();
      p.due = Clock::now() + Backoff(p.attempts++);
      pending_.push_back(p);
    }
    return;
  }
  if (unavailable_warned_) {
    client::Log().info("plans from {} again", source_->Describe());
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
          p.due = Clock::now() + Backoff(p.attempts++);
        }
        pending_.push_back(p);
        break;
      case KernelPlanStatus::kInfeasible:
        p.kernel->state = KernelReport::State::kInfeasible;
        p.kernel->reason = kernel_plan.reason;
        break;
    }
  }
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

  std::optional<NetworkPlan> cached;
  if (UsesPlanCache()) {
    cached = cache_.FindNetwork(device_, mode_, policy_, config_.workspace_bytes, request.kernels);
  }
  if (cached) {
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
      PublishNetwork(kernels, ordered, /*from_cache=*/true, contribution_epoch_);
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
  const uint64_t asked_epoch = contribution_epoch_;
  lock.unlock();
  Result<NetworkPlan> answer = AskSource(request);
  lock.lock();
  if (stop_) return;

  if (!answer.ok()) {
    plan_request_failures_.fetch_add(1, std::memory_order_relaxed);
    if (!unavailable_warned_) {
      client::Log().warn(
          "no network plan from {} ({}); kernels run undivided meanwhile, "
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
    client::Log().info("plans from {} again", source_->Describe());
    unavailable_warned_ = false;
  }
  for (size_t i = 0; i < request.kernels.size(); ++i) {
    if (!(answer->kernels[i].kernel.problem == request.kernels[i].problem) ||
        answer->kernels[i].kernel.mini_batch != request.kernels[i].mini_batch) {
      client::Log().warn("the planner answered other kernels than asked; ignoring the answer");
      network_due_ = Clock::now() + Backoff(network_attempts_++);
      network_retry_ = true;
      return;
    }
  }
  const std::vector<KernelState*> answered(
      kernels.begin(), kernels.begin() + static_cast<ptrdiff_t>(request.kernels.size()));
  const bool stale = PublishNetwork(answered, *answer, /*from_cache=*/false, asked_epoch);
  planned_generation_ = generation;
  if (stale) {
    // Timings contributed while this request was in flight: the same network again, at once.
    prepared_ = true;
    network_retry_ = true;
    network_due_ = Clock::now();
    network_attempts_ = 0;
  } else if (answer->complete) {
    network_retry_ = false;
    network_attempts_ = 0;
    CacheRecord record{device_, *answer};
    record.plan.workspace_mode = mode_;
    record.plan.policy = policy_;
    record.plan.workspace_budget_bytes = config_.workspace_bytes;
    if (UsesPlanCache()) {
      cache_.Put(std::move(record));
      cache_dirty_ = true;
    }
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
  if (!saved.ok()) client::Log().warn("cannot save the plan cache: {}", saved.ToString());
}

}  // namespace ucudnn::client
