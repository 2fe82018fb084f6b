#include "ucudnn/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <spdlog/spdlog.h>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/units.h"

namespace ucudnn {
namespace {

Status ValidateRequest(const PlanRequest& request, size_t table_count) {
  if (request.kernels.empty()) return InvalidArgument("kernels: must not be empty");
  if (table_count != request.kernels.size()) {
    return InvalidArgument("tables: expected one per kernel (" +
                           std::to_string(request.kernels.size()) + "), got " +
                           std::to_string(table_count));
  }
  switch (request.policy) {
    case BatchPolicy::kUndivided:
    case BatchPolicy::kPowerOfTwo:
    case BatchPolicy::kAll:
      break;
    default:
      return InvalidArgument("policy: unknown value " +
                             std::to_string(static_cast<int>(request.policy)));
  }
  switch (request.workspace_mode) {
    case WorkspaceMode::kPerKernel:
    case WorkspaceMode::kTotalSum:
    case WorkspaceMode::kTotalShared:
      break;
    default:
      return InvalidArgument("workspace_mode: unknown value " +
                             std::to_string(static_cast<int>(request.workspace_mode)));
  }
  for (size_t i = 0; i < request.kernels.size(); ++i) {
    const Kernel& kernel = request.kernels[i];
    const std::string where = "kernels[" + std::to_string(i) + "]";
    UCUDNN_RETURN_IF_ERROR(Validate(kernel.problem).WithContext(where + ".problem"));
    if (kernel.mini_batch < 1 || kernel.mini_batch > kMaxBatch) {
      return InvalidArgument(where + ".mini_batch: must be in [1, " + std::to_string(kMaxBatch) +
                             "], got " + std::to_string(kernel.mini_batch));
    }
  }
  return Status::Ok();
}

// What one distinct (problem, mini-batch, limit, table) yields; shared by identical kernels.
struct KernelResult {
  std::optional<KernelConfig> config;  // kPerKernel, kTotalShared
  std::vector<KernelConfig> front;     // kTotalSum
  // kTotalSum: the undivided options (one algorithm at the full mini-batch) within the budget,
  // the Pareto front of the like-for-like baseline.
  std::vector<KernelConfig> undivided_front;
  std::string infeasible_reason;  // when neither a config nor a front point exists
  std::optional<Segment> undivided;
  double framework_ms = 0;  // KernelPlan::framework_ms
  uint64_t framework_workspace_bytes = 0;
};

// The workspace limit of one kernel: in kPerKernel its own limit when it has one, the request's
// limit or budget otherwise.
uint64_t KernelLimit(const PlanRequest& request, const Kernel& kernel) {
  if (request.workspace_mode == WorkspaceMode::kPerKernel && kernel.workspace_limit) {
    return *kernel.workspace_limit;
  }
  return request.workspace_bytes;
}

KernelConfig UndividedConfig(const Segment& segment) {
  KernelConfig config;
  config.segments = {segment};
  config.time_ms = segment.time_ms;
  config.workspace_bytes = segment.workspace_bytes;
  return config;
}

// The framework's own convolution against ucudnn's choice (dp.h): within the margin a tie, which
// goes to ucudnn where the framework benchmarks in the job (FrameworkBenchmarks) and ucudnn's
// configuration is WorthItsWorkspace; in kTotalSum one more point of the front
// (AddFrameworkPoint). `table`: the request's candidates, `all_timings` the framework's too.
void ConsiderFramework(const PlanRequest& request, const Kernel& kernel,
                       const TimingTable& all_timings, const TimingTable& table,
                       KernelResult* result) {
  if (const Timing* t = FindFramework(all_timings, kernel.mini_batch, request.framework)) {
    result->framework_ms = t->time_ms;
    result->framework_workspace_bytes = t->workspace_bytes;
  }
  const std::optional<Segment> framework = FrameworkSegment(
      all_timings, kernel.mini_batch, request.framework, KernelLimit(request, kernel));
  if (!framework) return;
  const bool benchmarks = FrameworkBenchmarks(request.framework);
  if (request.workspace_mode == WorkspaceMode::kTotalSum) {
    AddFrameworkPoint(*framework, &result->front, benchmarks);
  } else {
    result->config = ChooseAgainstFramework(table, kernel.mini_batch, request.policy,
                                            result->config, *framework, benchmarks);
  }
  result->infeasible_reason.clear();
}

KernelResult SolveOne(const PlanRequest& request, const Kernel& kernel,
                      const TimingTable& all_timings) {
  // A request for one candidate space plans as if the other had never been measured.
  TimingTable filtered;
  if (request.algorithms != AlgorithmSpace::kAll) {
    for (const Timing& t : all_timings.entries) {
      if (InSpace(t, request.algorithms)) filtered.entries.push_back(t);
    }
  }
  const TimingTable& table = request.algorithms == AlgorithmSpace::kAll ? all_timings : filtered;
  KernelResult result;
  const uint64_t limit = KernelLimit(request, kernel);
  if (request.workspace_mode == WorkspaceMode::kTotalSum) {
    result.front = ParetoFront(table, kernel.mini_batch, request.policy, limit);
    if (result.front.empty()) {
      // The DP at the budget explains why nothing fits.
      Result<KernelConfig> dp = SolveKernelDp(table, kernel.mini_batch, request.policy, limit);
      result.infeasible_reason =
          dp.ok() ? "no configuration within the budget" : dp.status().message();
    }
    result.undivided_front = ParetoFront(table, kernel.mini_batch, BatchPolicy::kUndivided, limit);
  } else {
    Result<KernelConfig> dp = SolveKernelDp(table, kernel.mini_batch, request.policy, limit);
    if (dp.ok()) {
      result.config = std::move(dp).value();
    } else {
      result.infeasible_reason = dp.status().message();
    }
  }
  Result<Segment> undivided = FastestUndivided(table, kernel.mini_batch, limit);
  if (undivided.ok()) result.undivided = *undivided;
  // The DP always considers the undivided segment, but its tie rule may trade up to ~1e-12 of
  // time for a smaller workspace: never let that make a plan slower than its baseline.
  if (result.config && result.undivided && result.undivided->time_ms < result.config->time_ms) {
    result.config = UndividedConfig(*result.undivided);
  }
  ConsiderFramework(request, kernel, all_timings, table, &result);
  return result;
}

// The fastest front point within `undivided`'s workspace, to replace that undivided option;
// `undivided` itself where the DP's near-tie rule left every such point a little slower.
KernelConfig NoSlowerThan(const std::vector<KernelConfig>& front, const KernelConfig& undivided) {
  const KernelConfig* best = nullptr;
  for (const KernelConfig& point : front) {
    if (point.workspace_bytes <= undivided.workspace_bytes &&
        (best == nullptr || point.time_ms < best->time_ms)) {
      best = &point;
    }
  }
  return best != nullptr && best->time_ms <= undivided.time_ms ? *best : undivided;
}

// The result of every distinct kernel, and for each kernel of the request the index of its result
// (SIZE_MAX where it has no timings).
struct DistinctResults {
  std::vector<KernelResult> results;
  std::vector<size_t> result_of;
};

// One computation per distinct (problem, mini-batch, limit, table); each kernel's plan takes its
// status, its configuration (except kTotalSum's, chosen later) and its baseline from it.
DistinctResults SolveDistinctKernels(const PlanRequest& request,
                                     const std::vector<const TimingTable*>& tables,
                                     NetworkPlan* plan) {
  std::map<std::tuple<std::string, int64_t, uint64_t, uintptr_t>, size_t> cache;
  DistinctResults distinct;
  distinct.result_of.assign(request.kernels.size(), SIZE_MAX);
  for (size_t i = 0; i < request.kernels.size(); ++i) {
    const Kernel& kernel = request.kernels[i];
    KernelPlan& kp = plan->kernels[i];
    kp.kernel = kernel;
    if (tables[i] == nullptr) {
      kp.status = KernelPlanStatus::kMissing;
      kp.reason = "no timings for this problem on this device";
      continue;
    }
    auto key =
        std::make_tuple(CanonicalKey(kernel.problem), kernel.mini_batch,
                        KernelLimit(request, kernel), reinterpret_cast<uintptr_t>(tables[i]));
    auto [it, inserted] = cache.try_emplace(std::move(key), distinct.results.size());
    if (inserted) distinct.results.push_back(SolveOne(request, kernel, *tables[i]));
    distinct.result_of[i] = it->second;
    const KernelResult& result = distinct.results[it->second];
    kp.undivided = result.undivided;
    kp.framework_ms = result.framework_ms;
    kp.framework_workspace_bytes = result.framework_workspace_bytes;
    if (!result.infeasible_reason.empty()) {
      kp.status = KernelPlanStatus::kInfeasible;
      kp.reason = result.infeasible_reason;
    } else if (result.config) {
      kp.status = KernelPlanStatus::kPlanned;
      kp.config = *result.config;
    }
  }
  return distinct;
}

// Why no choice fits a sum budget: the kernels' smallest workspaces already exceed it.
std::string SumInfeasibleReason(const std::vector<std::vector<IlpOption>>& options,
                                uint64_t budget_bytes) {
  uint64_t smallest = 0;
  for (const auto& kernel_options : options) {
    uint64_t least = UINT64_MAX;
    for (const IlpOption& o : kernel_options) least = std::min(least, o.workspace_bytes);
    smallest = smallest > UINT64_MAX - least ? UINT64_MAX : smallest + least;
  }
  return "the smallest workspaces of the " + std::to_string(options.size()) +
         " kernels that fit alone sum to " + FormatBytes(smallest) + ", more than the budget " +
         FormatBytes(budget_bytes);
}

// The like-for-like baseline of kTotalSum: the same ILP over undivided options only
// (NetworkPlan::undivided_sum_ms). A solve stopped by its gap or time limit may be slower than
// the undivided answer; each kernel then takes its fastest front point within that answer's
// workspace, which keeps the sum within the budget and every kernel no slower.
Status CompareWithUndividedSum(const PlanRequest& request, const IlpOptions& ilp_options,
                               const DistinctResults& distinct, const std::vector<size_t>& in_ilp,
                               const IlpSolution& solution, std::vector<KernelConfig>* chosen,
                               NetworkPlan* plan) {
  std::vector<std::vector<IlpOption>> undivided_options;
  for (size_t i : in_ilp) {
    const std::vector<KernelConfig>& front =
        distinct.results[distinct.result_of[i]].undivided_front;
    if (front.empty()) return Status::Ok();  // no undivided option fits: no baseline
    undivided_options.push_back(ToIlpOptions(front));
  }
  UCUDNN_ASSIGN_OR_RETURN(IlpSolution undivided,
                          SolveNetworkIlp(undivided_options, request.workspace_bytes, ilp_options));
  if (undivided.choice.empty()) return Status::Ok();
  plan->undivided_sum_ms = undivided.total_time_ms;
  if (undivided.total_time_ms >= solution.total_time_ms) return Status::Ok();
  spdlog::info(
      "plan: the ILP's answer ({:.6f} ms, {}) is slower than the undivided one within "
      "the same budget ({:.6f} ms); each kernel takes its best point within the "
      "undivided workspace instead",
      solution.total_time_ms, solution.report.status, undivided.total_time_ms);
  double total = 0;
  for (size_t n = 0; n < in_ilp.size(); ++n) {
    const KernelResult& result = distinct.results[distinct.result_of[in_ilp[n]]];
    (*chosen)[n] = NoSlowerThan(result.front,
                                result.undivided_front[static_cast<size_t>(undivided.choice[n])]);
    total += (*chosen)[n].time_ms;
  }
  plan->ilp.objective_ms = total;
  plan->ilp.gap = total > 0 ? (total - plan->ilp.bound_ms) / total : 0.0;
  return Status::Ok();
}

// kTotalSum: one point of each feasible kernel's Pareto front, by the network-wide ILP.
Status ChooseWithinSumBudget(const PlanRequest& request, const IlpOptions& ilp_options,
                             const DistinctResults& distinct, NetworkPlan* plan) {
  std::vector<size_t> in_ilp;  // kernels with a non-empty front
  std::vector<std::vector<IlpOption>> options;
  for (size_t i = 0; i < plan->kernels.size(); ++i) {
    if (distinct.result_of[i] == SIZE_MAX ||
        plan->kernels[i].status == KernelPlanStatus::kInfeasible) {
      continue;
    }
    in_ilp.push_back(i);
    options.push_back(ToIlpOptions(distinct.results[distinct.result_of[i]].front));
  }
  if (in_ilp.empty()) {
    plan->ilp.used = true;
    plan->ilp.status = "empty";  // nothing to choose: every kernel is missing or infeasible
    return Status::Ok();
  }
  UCUDNN_ASSIGN_OR_RETURN(IlpSolution solution,
                          SolveNetworkIlp(options, request.workspace_bytes, ilp_options));
  plan->ilp = solution.report;
  if (solution.choice.empty()) {
    const std::string reason = SumInfeasibleReason(options, request.workspace_bytes);
    for (size_t i : in_ilp) {
      plan->kernels[i].status = KernelPlanStatus::kInfeasible;
      plan->kernels[i].reason = reason;
    }
    return Status::Ok();
  }
  std::vector<KernelConfig> chosen;
  for (size_t n = 0; n < in_ilp.size(); ++n) {
    chosen.push_back(distinct.results[distinct.result_of[in_ilp[n]]]
                         .front[static_cast<size_t>(solution.choice[n])]);
  }
  UCUDNN_RETURN_IF_ERROR(
      CompareWithUndividedSum(request, ilp_options, distinct, in_ilp, solution, &chosen, plan));
  for (size_t n = 0; n < in_ilp.size(); ++n) {
    KernelPlan& kp = plan->kernels[in_ilp[n]];
    kp.status = KernelPlanStatus::kPlanned;
    kp.config = ReportedConfig(std::move(chosen[n]));
  }
  return Status::Ok();
}

// The plan's totals over its planned kernels, and whether every kernel is planned.
void AddTotals(NetworkPlan* plan) {
  plan->complete = true;
  bool every_baseline = true;  // every planned kernel has an undivided baseline
  for (const KernelPlan& kp : plan->kernels) {
    if (kp.status != KernelPlanStatus::kPlanned) {
      plan->complete = false;
      continue;
    }
    plan->total_time_ms += kp.config.time_ms;
    if (kp.undivided) {
      plan->total_undivided_ms += kp.undivided->time_ms;
    } else {
      every_baseline = false;
    }
    if (plan->workspace_mode == WorkspaceMode::kTotalShared) {
      plan->total_workspace_bytes =
          std::max(plan->total_workspace_bytes, kp.config.workspace_bytes);
    } else {
      plan->total_workspace_bytes += kp.config.workspace_bytes;
    }
  }
  // A sum over fewer kernels than total_time_ms would overstate or understate the speedup.
  if (!every_baseline) plan->total_undivided_ms = 0;
}

}  // namespace

Result<NetworkPlan> PlanNetwork(const PlanRequest& request,
                                const std::vector<const TimingTable*>& tables) {
  IlpOptions ilp_options;
  ilp_options.time_limit_s = request.ilp_time_limit_s;
  return PlanNetwork(request, tables, ilp_options);
}

Result<NetworkPlan> PlanNetwork(const PlanRequest& request,
                                const std::vector<const TimingTable*>& tables,
                                const IlpOptions& ilp_options) {
  UCUDNN_RETURN_IF_ERROR(ValidateRequest(request, tables.size()));
  if (request.workspace_mode == WorkspaceMode::kTotalSum &&
      (!(ilp_options.time_limit_s > 0) || !std::isfinite(ilp_options.time_limit_s))) {
    return InvalidArgument("ilp_time_limit_s: must be positive and finite, got " +
                           std::to_string(ilp_options.time_limit_s));
  }

  NetworkPlan plan;
  plan.workspace_mode = request.workspace_mode;
  plan.policy = request.policy;
  plan.workspace_budget_bytes = request.workspace_bytes;
  plan.framework = request.framework;
  plan.kernels.resize(request.kernels.size());
  const DistinctResults distinct = SolveDistinctKernels(request, tables, &plan);
  if (request.workspace_mode == WorkspaceMode::kTotalSum) {
    UCUDNN_RETURN_IF_ERROR(ChooseWithinSumBudget(request, ilp_options, distinct, &plan));
  }
  AddTotals(&plan);
  spdlog::debug(
      "plan: {} kernels ({} distinct), {} / {} at {}: {:.3f} ms (undivided {:.3f} ms), "
      "workspace {}{}",
      plan.kernels.size(), distinct.results.size(), ToString(plan.workspace_mode),
      ToString(plan.policy), FormatBytes(plan.workspace_budget_bytes), plan.total_time_ms,
      plan.total_undivided_ms, FormatBytes(plan.total_workspace_bytes),
      plan.complete ? "" : ", incomplete");
  return plan;
}

}  // namespace ucudnn
