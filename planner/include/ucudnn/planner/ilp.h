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
  double time_limit_s = 10.0;  // wall clock; the best solution found so far is returned
  // CBC stops when (objective - bound) / objective is below: 0.01%, far below the spread of the
  // measured timings; 0 asks for a proof of optimality.
  double relative_gap = 1e-4;
};

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
// removes the symmetry between repeated layers; the counts are then handed to those kernels in
// order, smaller workspaces first. Same input -> same answer, unless the time limit cut the search.
// report.status: "optimal" (within relative_gap), "time_limit" (a feasible, possibly
// sub-optimal solution), "infeasible" (even the smallest workspaces exceed the budget).
// CBC's log goes to spdlog at debug level.
// Errors: kInvalidArgument for a kernel without options, a negative or non-finite time, or a
// non-positive time limit; kInternal if CBC fails.
Result<IlpSolution> SolveNetworkIlp(const std::vector<std::vector<IlpOption>>& options,
                                    uint64_t budget_bytes, const IlpOptions& ilp_options = {});

// The options of a Pareto front, in order.
std::vector<IlpOption> ToIlpOptions(const std::vector<KernelConfig>& front);

}  // namespace ucudnn
