// A network plan as a human-readable table, for the CLI, the demo and ExplainPlan.
#pragma once

#include <string>

#include "ucudnn/core/plan.h"

namespace ucudnn {

// One line per kernel: name, shape ("n256 c64 56x56 k64 3x3 s1 p1"), segments ("4x64@algo1":
// four micro-batches of 64 with algorithm 1), workspace in MiB, predicted ms, undivided ms and
// speedup ("n/a" without an undivided baseline); kernels without a plan show why. Then a totals
// line over the planned kernels (undivided total and speedup "n/a" when a planned kernel has no
// baseline; a footer then compares the kernels that have one), what the undivided baseline
// means in the plan's workspace mode, and, when the ILP ran, its report.
std::string FormatPlanTable(const NetworkPlan& plan);

// "4x64@algo1 + 1x128@algo0": runs of equal segments in execution order.
std::string FormatSegments(const std::vector<Segment>& segments);

// "n256 c64 56x56 k64 3x3 s1 p1" (non-square parts as "3x1", dilation "d2", groups "g32").
std::string FormatShape(const Kernel& kernel);

}  // namespace ucudnn
