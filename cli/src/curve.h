// `ucudnn curve`: predicted step time against the workspace limit for a network on a device, the
// picture operators ask for when choosing a limit. The points come from the planner (one GetPlan
// per limit); this file only chooses the limits and draws them. Pure, tested in
// tests/tools/curve_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ucudnn::cli {

struct CurvePoint {
  uint64_t workspace_bytes = 0;  // the limit asked for (per kernel, or the total budget)
  double predicted_ms = 0;       // the plan's total time over its planned kernels
  double undivided_ms = 0;       // cuDNN alone under the same limit; 0 when unknown
  int planned_kernels = 0;
  int kernels = 0;  // planned_kernels < kernels: the plan is incomplete at this limit
};

// 0, then every power of two from 64 KiB up to `max_bytes` (and `max_bytes` itself): the limits
// of the curve, ascending. kInvalidArgument-free: max_bytes below 64 KiB gives {0, max_bytes}.
std::vector<uint64_t> CurveLimits(uint64_t max_bytes);

// One line per point: limit, predicted ms, undivided ms, speedup, kernels planned.
std::string FormatCurveTable(const std::vector<CurvePoint>& points);

// A self-contained SVG: predicted (and undivided) ms against the limit on a log2 axis (the limit 0
// drawn at the left edge), axes labelled, incomplete points marked hollow.
std::string FormatCurveSvg(const std::vector<CurvePoint>& points, const std::string& title);

}  // namespace ucudnn::cli
