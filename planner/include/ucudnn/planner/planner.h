// Network planning: a plan for every kernel of a request from its timing table (pure: no I/O).
#pragma once

#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"
#include "ucudnn/planner/ilp.h"

namespace ucudnn {

// Plans `request.kernels`; tables[i] holds kernel i's timings (for its problem, on the request's
// device), or nullptr when they are missing (the kernel is then kMissing). By workspace mode:
//   kPerKernel:   the DP of each kernel at request.workspace_bytes.
//   kTotalSum:    each kernel's Pareto front up to the budget, then the ILP (CBC) choosing one
//                 point per kernel with the sum of workspaces within request.workspace_bytes;
//                 plan.ilp reports it. Missing and individually infeasible kernels are left out
//                 of the ILP; when even the smallest workspaces exceed the budget together, the
//                 others are kInfeasible and say so.
//   kTotalShared: kernels run one after another and share one workspace of
//                 request.workspace_bytes: the DP of each kernel at the budget;
//                 total_workspace_bytes is the largest kernel workspace.
// With request.framework set, the framework's own timing of that identity at a kernel's full
// mini-batch is one more candidate of the kernel in every mode (dp.h: ChooseAgainstFramework,
// AddFrameworkPoint): within kFrameworkMargin of ucudnn's configuration a tie, which goes to
// ucudnn where the identity's framework benchmarks in the job (FrameworkBenchmarks: its own
// convolution costs the job that benchmark) and to the framework otherwise; reported with its
// measured time (the ILP's objective and its undivided comparison count it at
// FrameworkPlanningMs).
// The undivided baseline of each kernel is the fastest algorithm at the full mini-batch within
// request.workspace_bytes in every mode: in kPerKernel the kernel's own limit; in kTotalSum and
// kTotalShared the whole budget for that kernel alone, i.e. what cuDNN alone would do with the
// whole budget as one workspace buffer shared by all kernels (KernelPlan::undivided).
// total_time_ms sums the planned kernels; total_undivided_ms sums their baselines, and is 0 when
// some planned kernel has none, so that the two always cover the same kernels.
// Never slower than undivided: in kPerKernel and kTotalShared a kernel's plan is never slower
// than its baseline (the DP considers the undivided segment; a near-tie that its tie rule would
// take with a smaller workspace yields to the baseline). In kTotalSum the ILP also runs over the
// undivided options alone (undivided_sum_ms, the like-for-like baseline); should the main ILP's
// answer be slower (stopped by its gap or time limit), each kernel takes its fastest front point
// within the workspace of its undivided answer instead, so the plan is never slower than it.
// That second ILP gets the same ilp_options, so kTotalSum may take up to twice the time limit.
// Kernels with the same problem, mini-batch and table share one computation. Same input -> same
// plan (except ilp.solve_seconds, and unless the ILP hit its time limit).
// Errors: kInvalidArgument for an invalid request (the message names the field, e.g.
// "kernels[3].mini_batch") or a tables vector of the wrong length; kInternal if CBC fails.
Result<NetworkPlan> PlanNetwork(const PlanRequest& request,
                                const std::vector<const TimingTable*>& tables);

// The same with the ILP's settings spelled out (request.ilp_time_limit_s is ignored).
Result<NetworkPlan> PlanNetwork(const PlanRequest& request,
                                const std::vector<const TimingTable*>& tables,
                                const IlpOptions& ilp_options);

}  // namespace ucudnn
