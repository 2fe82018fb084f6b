// A network plan: what the planner answers, in plain C++ (proto conversion lives in
// ucudnn_proto_convert). Plans are pure functions of (timings, request).
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
enum class BatchPolicy { kUndivided = 0, kPowerOfTwo = 1, kAll = 2 };
std::string_view ToString(BatchPolicy p);  // "undivided" "power_of_two" "all"
Result<BatchPolicy> ParseBatchPolicy(std::string_view s);

// How the workspace limit applies.
//   kPerKernel: every kernel gets at most `workspace_bytes` (μ-cuDNN's WR mode); DP per kernel.
//   kTotalSum: the kernels' workspaces together fit `workspace_bytes` (each kernel owns its
//     workspace; μ-cuDNN's WD mode); network-wide ILP.
//   kTotalShared: kernels run one after another and share one workspace, so the budget bounds
//     the largest kernel workspace; network-wide choice by minimum time per kernel at the budget.
enum class WorkspaceMode { kPerKernel = 0, kTotalSum = 1, kTotalShared = 2 };
std::string_view ToString(WorkspaceMode m);  // "per_kernel" "total_sum" "total_shared"
Result<WorkspaceMode> ParseWorkspaceMode(std::string_view s);

struct PlanRequest {
  DeviceFingerprint device;
  std::vector<Kernel> kernels;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  WorkspaceMode workspace_mode = WorkspaceMode::kPerKernel;
  uint64_t workspace_bytes = 64ull << 20;
  double ilp_time_limit_s = 10.0;
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
  // The fastest single algorithm at the full mini-batch within the kernel's limit; absent when
  // no algorithm fits undivided.
  std::optional<Segment> undivided;
};

struct IlpReport {
  bool used = false;
  std::string status;  // "optimal", "time_limit", "infeasible", ...
  double objective_ms = 0;
  double bound_ms = 0;
  double gap = 0;  // relative: (objective - bound) / objective
  double solve_seconds = 0;
  int variables = 0;
  int constraints = 0;
};

struct NetworkPlan {
  std::vector<KernelPlan> kernels;  // in request order
  WorkspaceMode workspace_mode = WorkspaceMode::kPerKernel;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  uint64_t workspace_budget_bytes = 0;
  double total_time_ms = 0;            // sum over planned kernels
  double total_undivided_ms = 0;       // sum of undivided baselines (planned kernels only)
  uint64_t total_workspace_bytes = 0;  // sum (kTotalSum, kPerKernel) or max (kTotalShared)
  bool complete = false;               // every kernel kPlanned
  IlpReport ilp;
};

}  // namespace ucudnn
