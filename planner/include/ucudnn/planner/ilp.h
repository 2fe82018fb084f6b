// The network-wide ILP (μ-cuDNN's WD mode): every kernel chooses exactly one of its options
// (points of its time/workspace Pareto front); minimise the total time subject to the sum of the
// chosen workspaces fitting a budget. A multiple-choice knapsack, solved with COIN-OR CBC.
#pragma once

#include <cstdint>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

// One choice of one kernel.
struct IlpOption {
  double time_ms = 0;
  uint64_t workspace_bytes = 0;
  bool operator==(const IlpOption&) const = default;
};

struct IlpOptions {
  // Wall clock for the whole solve: the LP relaxation, the rounding and local-search heuristics
  // and CBC's branch and bound. When it runs out, the best solution found so far is returned
  // (status "time_limit"), at worst all smallest workspaces. The solvers check their clocks
  // between iterations and nodes (CLP the process's CPU time), so a solve can overrun the limit
  // a little, and the model's setup before the LP is not interrupted.
  double time_limit_s = 10.0;
  // The search stops once (objective - bound) / objective is at most this (status "gap_limit"):
  // 0.01%, far below the spread of the measured timings, and tight enough that a total-budget
  // plan is not slower than the per-kernel plan that fits the same total (tests/planner). The
  // price: a network whose every kernel has its own table, at a tight budget, can use the whole
  // time limit (ResNet-152 perturbed in ucudnn-bench-planner: 10 s, gap 2e-4, where 1e-3 takes
  // 0.03 s). 0 asks for a proof of optimality.
  double relative_gap = 1e-4;
};

// Within this of its bound a solution counts as proven optimal: max(1e-9 ms, 1e-9 x objective),
// rounding noise of the floating-point sums and of the LP.
constexpr double kIlpOptimalAbsoluteMs = 1e-9;
constexpr double kIlpOptimalRelative = 1e-9;

struct IlpSolution {
  // Per kernel, the index of the chosen option in that kernel's list; empty when the budget is
  // infeasible (report.status == "infeasible").
  std::vector<int> choice;
  double total_time_ms = 0;
  uint64_t total_workspace_bytes = 0;
  IlpReport report;
};

// Solves the ILP. Options need not be Pareto-optimal (dominated ones are dropped first). Kernels
// with identical option lists are merged into one integer variable per option (a count), which
// removes the symmetry between repeated layers.
//
// report (see IlpReport in plan.h):
//   objective_ms  the chosen options' total time (summed in kernel order);
//   bound_ms      a proven lower bound on every feasible answer's total time, as the solver
//                 established it and never adjusted to the answer: the sum of the kernels'
//                 fastest options when those fit together, else the LP relaxation's optimum
//                 raised by CBC's branch-and-bound bound where CBC ran (CBC works on a model
//                 reduced by reduced-cost fixing, which provably keeps every answer faster
//                 than the heuristic incumbent);
//   gap           (objective - bound) / objective (0 when both are 0), from those two numbers
//                 only; rounding can make it negative by ~1e-12.
//   status        "optimal"     objective - bound <= max(kIlpOptimalAbsoluteMs,
//                               kIlpOptimalRelative x objective): proven optimal;
//                 "gap_limit"   not proven optimal, but the gap is within relative_gap: the
//                               search stopped there, as asked;
//                 "time_limit"  the time limit ended the search before either: a feasible
//                               answer, the gap says how far from optimal it may be;
//                 "stopped"     the search ended for another reason without reaching the gap:
//                               CBC stopped early, or CBC's best answer failed the exact check
//                               (integral counts, budget to the byte) and the heuristic answer
//                               was kept; its bound then no longer proves that answer optimal,
//                               so such a solve is never reported "optimal";
//                 "infeasible"  even the kernels' smallest workspaces exceed the budget
//                               (choice empty, objective and bound 0).
//
// Ties (several answers equally fast), in this order:
//   1. within a kernel, of options equal in time and workspace the lowest index is chosen;
//   2. equal total time at a smaller total workspace is preferred as far as exchanges between
//      two kernels reach: in the answer, no two kernels can both change their options so that
//      the total time stays the same (to 1e-12 relative) and the total workspace shrinks;
//   3. kernels with identical option lists take their share of the options in kernel order,
//      smaller workspace first;
//   4. what remains (equally fast answers of equal total workspace that differ between kernels
//      with different options) is decided by the fixed search: LP rounding, a greedy fill and
//      swaps in a fixed order, then single-threaded CBC, which replaces that answer only by a
//      strictly faster one.
// Same input -> same answer, byte for byte, unless the time limit cut the search (rule 2 may then
// be left unfinished).
// CBC's log goes to spdlog at debug level.
// Errors: kInvalidArgument for a kernel without options, a negative or non-finite time, or a
// non-positive time limit; kInternal if CLP or CBC fails.
Result<IlpSolution> SolveNetworkIlp(const std::vector<std::vector<IlpOption>>& options,
                                    uint64_t budget_bytes, const IlpOptions& ilp_options = {});

// The options of a Pareto front, in order.
std::vector<IlpOption> ToIlpOptions(const std::vector<KernelConfig>& front);

}  // namespace ucudnn
