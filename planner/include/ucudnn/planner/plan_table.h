// A network plan as a human-readable table, for the CLI, the demo and ExplainPlan.
#pragma once

#include <functional>
#include <string>

#include "ucudnn/core/plan.h"

namespace ucudnn {

// One line per kernel: name, shape ("n256 c64 56x56 k64 3x3 s1 p1"), segments ("4x64@algo1":
// four micro-batches of 64 with algorithm 1), workspace in MiB, predicted ms, undivided ms and
// speedup ("n/a" without an undivided baseline); kernels without a plan show why. Then a totals
// line over the planned kernels (undivided total and speedup "n/a" when a planned kernel has no
// baseline; a footer then compares the kernels that have one), what the undivided baseline
// means in the plan's workspace mode, and, when the ILP ran, its report.
// Names algorithm `algo` of `op` ("im2col_gemm"); the tables print "algo<id>" without one, or
// where it returns "".
using AlgorithmNamer = std::function<std::string(ConvOp op, int algo)>;
// The names of `backend`'s algorithms ("cudnn" or "cpu", a device fingerprint's backend).
AlgorithmNamer AlgorithmNamerFor(const std::string& backend);

std::string FormatPlanTable(const NetworkPlan& plan, const AlgorithmNamer& names = {});

// "4x64@algo1 + 1x128@algo0": runs of equal segments in execution order (with `names`:
// "4x64@im2col_gemm").
std::string FormatSegments(const std::vector<Segment>& segments, ConvOp op = ConvOp::kForward,
                           const AlgorithmNamer& names = {});

// "n256 c64 56x56 k64 3x3 s1 p1" (non-square parts as "3x1", dilation "d2", groups "g32").
std::string FormatShape(const Kernel& kernel);

}  // namespace ucudnn
