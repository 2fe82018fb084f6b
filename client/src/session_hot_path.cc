// Session: the calling threads. Execute() runs a kernel as its plan's micro-batches when a plan
// that fits is published, else undivided; a kernel already seen costs one hash lookup (none
// through its entry), one atomic load of the plan pointer and relaxed counter increments.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "log.h"
#include "session.h"
#include "ucudnn/core/executor.h"
#include "ucudnn/core/units.h"

namespace ucudnn::client {
namespace {

// PlanWorkspace(): the plan does not fit its slice of the library workspace.
constexpr int64_t kRejectedPlan = -2;

// The packed fallback cache holds the workspace size in the upper 48 bits.
constexpr uint64_t kMaxPackedWorkspace = (uint64_t{1} << 48) - 1;

std::string KernelLabel(const KernelState& kernel) {
  return kernel.name.empty() ? CanonicalKey(kernel.problem) + "@" + std::to_string(kernel.batch)
                             : kernel.name;
}

}  // namespace

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

KernelState* Session::FindOrRegister(const ConvProblem& problem, int64_t batch, uint64_t limit,
                                     std::string_view name) {
  const uint64_t hash = KernelKeyHash(problem, batch);
  KernelState* kernel = table_.Find(hash, problem, batch, KeyLimit(limit));
  // Once the table is full, an unknown kernel stays unknown: no mutex, no allocation.
  if (kernel == nullptr && !table_full_.load(std::memory_order_relaxed)) {
    kernel = Register(problem, batch, hash, limit, name);
  }
  return kernel;
}

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

  // Where kernels are by limit, the caller's workspace is not a limit: the kernel of this
  // problem declared first, whatever its limit (registered with this workspace if none).
  KernelState* kernel =
      KernelsByLimit() ? table_.Find(KernelKeyHash(problem, batch), problem, batch) : nullptr;
  if (kernel == nullptr) kernel = FindOrRegister(problem, batch, workspace_bytes);
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
  if (plan != nullptr && plan->framework) {
    // The plan chose the framework's own convolution: undivided with the runner's own choice
    // (the drop-in handle: cuDNN's; the shape-level API: the caller's), never a backend run of
    // the framework segment.
    UCUDNN_ASSIGN_OR_RETURN(const int algo, FallbackAlgorithm(kernel, workspace_bytes, undivided));
    kernel->framework_calls.fetch_add(1, std::memory_order_relaxed);
    undivided.NoteFramework();
    return undivided.Run(algo, workspace, workspace_bytes);
  }
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

const PlanEntry* Session::PlanOf(const ConvProblem& problem, int64_t batch, uint64_t limit) const {
  const KernelState* kernel =
      table_.Find(KernelKeyHash(problem, batch), problem, batch, KeyLimit(limit));
  return kernel != nullptr ? kernel->plan.load(std::memory_order_acquire) : nullptr;
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
  if (needed == kFrameworkPlan) {
    kernel.framework_calls.fetch_add(1, std::memory_order_relaxed);
    return kFrameworkPlan;
  }
  if (needed == kRejectedPlan) kernel.rejected_calls.fetch_add(1, std::memory_order_relaxed);
  kernel.fallback_calls.fetch_add(1, std::memory_order_relaxed);
  return -1;
}

int64_t Session::PlanWorkspace(KernelState& kernel) {
  const PlanEntry* plan = kernel.plan.load(std::memory_order_acquire);
  if (plan == nullptr || plan->failed.load(std::memory_order_relaxed)) return -1;
  if (plan->framework) return kFrameworkPlan;
  int64_t needed = plan->required_bytes.load(std::memory_order_acquire);
  if (needed == PlanEntry::kUnverified) needed = Verify(*plan, kernel.problem);
  if (needed < 0) return -1;
  if (!plan->library_workspace) return needed;
  // Execute() rejects a slice smaller than the plan needs; so does this answer.
  return static_cast<uint64_t>(needed) <= plan->workspace_slice ? 0 : kRejectedPlan;
}

}  // namespace ucudnn::client
