// What `ucudnn explain` adds to the plan table: for each planned kernel, every configuration on
// its time/workspace Pareto front (from CatalogService.GetParetoFront), the chosen one marked,
// and why each was or was not chosen. Pure (no I/O), tested in tests/tools/explain_table_test.cc.
#pragma once

#include <string>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/planner/plan_table.h"

namespace ucudnn::cli {

// One Pareto-optimal configuration of a kernel and the verdict on it.
struct Alternative {
  KernelConfig config;
  bool chosen = false;
  std::string why;  // "chosen: the fastest within the limit", "needs 4 MiB, over the limit", ...
};

// The verdicts on `front` (workspace ascending, time descending) for `kernel`, planned in
// `mode` under `workspace_bytes` (per kernel, or the budget). The chosen point is the one equal
// in time and workspace to the kernel's configuration; in kPerKernel every faster point needs
// more than the limit (that is why the chosen one won); in the total modes the network-wide
// choice decided, and the verdicts say how much time and workspace each point trades.
std::vector<Alternative> ExplainAlternatives(const KernelPlan& kernel,
                                             const std::vector<KernelConfig>& front,
                                             WorkspaceMode mode, uint64_t workspace_bytes);

// A block per kernel: its name, then one line per alternative ("* " marks the chosen one) with
// workspace, predicted ms, segments (named by `names`) and the verdict.
std::string FormatAlternatives(const KernelPlan& kernel,
                               const std::vector<Alternative>& alternatives,
                               const AlgorithmNamer& names = {});

}  // namespace ucudnn::cli
