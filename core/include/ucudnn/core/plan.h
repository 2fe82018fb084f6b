// A network plan: what the planner answers, in plain C++ (proto conversion lives in
// ucudnn::proto, proto/). Plans are pure functions of (timings, request).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

// Which micro-batch sizes a kernel may be split into.
// The names of this file's enums are in dp.cc. Parse* read the canonical names (the API,
// the database, the plan key) in any case; Parse*Choice read what a person types (client
// variables, flags): also trimmed, '-' for '_', and aliases. Their errors name `what`.
enum class BatchPolicy { kUndivided = 0, kPowerOfTwo = 1, kAll = 2 };
std::string_view ToString(BatchPolicy p);  // "undivided" "power_of_two" "all"
Result<BatchPolicy> ParseBatchPolicy(std::string_view s);
// Also "pow2" = "power_of_two".
Result<BatchPolicy> ParseBatchPolicyChoice(std::string_view what, std::string_view s);

// How the workspace limit applies.
//   kPerKernel: every kernel gets at most `workspace_bytes` (μ-cuDNN's WR mode); DP per kernel.
//   kTotalSum: the kernels' workspaces together fit `workspace_bytes` (each kernel owns its
//     workspace; μ-cuDNN's WD mode); network-wide ILP.
//   kTotalShared: kernels run one after another and share one workspace, so the budget bounds
//     the largest kernel workspace; network-wide choice by minimum time per kernel at the budget.
// A total budget means kTotalShared unless kernels run concurrently (several streams, or
// overlapping layers), each needing its own workspace at the same time: only then is the sum
// model right. A framework that reuses one buffer for every kernel runs them one after another.
enum class WorkspaceMode { kPerKernel = 0, kTotalSum = 1, kTotalShared = 2 };
std::string_view ToString(WorkspaceMode m);  // "per_kernel" "total_sum" "total_shared"
Result<WorkspaceMode> ParseWorkspaceMode(std::string_view s);
// Also "total" = "total_shared" (the model of sequential execution, see above) and "shared".
Result<WorkspaceMode> ParseWorkspaceModeChoice(std::string_view what, std::string_view s);

// Which candidates the planner may choose from: both spaces (the default), or one of them (for
// comparing what each space gives; users who distrust one space can also switch it off).
enum class AlgorithmSpace { kAll = 0, kLegacy = 1, kEngines = 2 };
std::string_view ToString(AlgorithmSpace a);  // "all" "legacy" "engines"
Result<AlgorithmSpace> ParseAlgorithmSpace(std::string_view s);
Result<AlgorithmSpace> ParseAlgorithmSpaceChoice(std::string_view what, std::string_view s);
// Whether a measurement belongs to `space`. The framework's own timings belong to every space:
// they are a candidate of their own (PlanRequest::framework).
inline bool InSpace(const Timing& t, AlgorithmSpace space) {
  return space == AlgorithmSpace::kAll || IsFramework(t) ||
         (space == AlgorithmSpace::kEngines) == !t.engine_config.empty();
}

struct PlanRequest {
  DeviceFingerprint device;
  std::vector<Kernel> kernels;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  WorkspaceMode workspace_mode = WorkspaceMode::kPerKernel;
  uint64_t workspace_bytes = 64ull << 20;
  double ilp_time_limit_s = 10.0;
  AlgorithmSpace algorithms = AlgorithmSpace::kAll;
  // The caller's framework identity (CheckFrameworkIdentity); empty: no framework candidate.
  // Only framework timings (kFrameworkAlgo) of exactly this identity are candidates, each only
  // as its whole kernel and only where ucudnn's configuration does not beat it by
  // kFrameworkMargin; the plan then holds that one framework segment with its measured time.
  std::string framework;
};

enum class KernelPlanStatus {
  kPlanned = 0,     // a configuration was chosen
  kMissing = 1,     // timings are missing for this kernel
  kInfeasible = 2,  // no configuration fits the workspace (reason says why)
};

struct KernelPlan {
  Kernel kernel;
  KernelPlanStatus status = KernelPlanStatus::kMissing;
  std::string reason;   // for kMissing / kInfeasible
  KernelConfig config;  // valid when kPlanned
  // The undivided baseline: the fastest single algorithm at the full mini-batch whose workspace
  // fits request.workspace_bytes, in every mode. kPerKernel: the kernel's own limit.
  // kTotalSum and kTotalShared: the whole budget, for this kernel alone, i.e. what cuDNN alone
  // would do with the whole budget as one workspace buffer shared by all kernels (as a framework
  // that reuses one buffer does); in kTotalSum the baselines' workspaces together may exceed the
  // budget that the plan's own workspaces share. Absent when no algorithm fits undivided.
  std::optional<Segment> undivided;
  // The framework's measured time for this kernel at the full mini-batch (PlanRequest::framework),
  // whatever its workspace; 0 when none is known.
  double framework_ms = 0;
  // That framework timing's workspace, bytes; 0 when none is known.
  uint64_t framework_workspace_bytes = 0;
};

// The network-wide ILP's report (ucudnn/planner/ilp.h defines the statuses precisely).
struct IlpReport {
  bool used = false;
  // "optimal" (proven: gap within ~1e-9), "gap_limit" (stopped at the requested relative gap),
  // "time_limit" (the time limit ended the search: feasible, gap says how far from optimal),
  // "stopped" (ended for another reason without reaching the gap; never a proof),
  // "infeasible" (even the smallest workspaces exceed the budget), "empty" (no kernel to
  // choose for: all missing or individually infeasible).
  std::string status;
  double objective_ms = 0;  // total time of the chosen options
  double bound_ms = 0;      // proven lower bound on any feasible choice's total time
  double gap = 0;           // (objective - bound) / objective, as computed from those two
  double solve_seconds = 0;
  int variables = 0;
  int constraints = 0;
};

struct NetworkPlan {
  std::vector<KernelPlan> kernels;  // in request order
  WorkspaceMode workspace_mode = WorkspaceMode::kPerKernel;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  uint64_t workspace_budget_bytes = 0;
  double total_time_ms = 0;  // sum over planned kernels
  // Sum of the planned kernels' undivided baselines (see KernelPlan::undivided), over exactly the
  // kernels of total_time_ms; 0 (unknown) when some planned kernel has no baseline, so that
  // total_undivided_ms / total_time_ms always compares the same kernels.
  double total_undivided_ms = 0;
  // kTotalSum only, the like-for-like baseline: the fastest choice of one undivided algorithm per
  // kernel (full mini-batch) whose workspaces together fit the budget (the ILP over undivided
  // options), over exactly the kernels of total_time_ms. The plan is never slower than it
  // (PlanNetwork checks). 0 (unknown) in other modes, or when some planned kernel has no undivided
  // option within the budget or those options cannot fit the budget together.
  double undivided_sum_ms = 0;
  uint64_t total_workspace_bytes = 0;  // sum (kTotalSum, kPerKernel) or max (kTotalShared)
  bool complete = false;               // every kernel kPlanned
  std::string framework;               // PlanRequest::framework
  IlpReport ilp;
};

}  // namespace ucudnn
