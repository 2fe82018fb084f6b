#include "explain_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ucudnn/core/units.h"

namespace ucudnn::cli {
namespace {

// Front points and the plan's configuration come from the same timings; times are compared
// with a tolerance only because they travel as doubles through the proto.
bool SameConfig(const KernelConfig& a, const KernelConfig& b) {
  return a.workspace_bytes == b.workspace_bytes &&
         std::abs(a.time_ms - b.time_ms) <= 1e-9 * std::max(1.0, std::abs(b.time_ms));
}

std::string Ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4f ms", ms);
  return text;
}

}  // namespace

std::vector<Alternative> ExplainAlternatives(const KernelPlan& kernel,
                                             const std::vector<KernelConfig>& front,
                                             WorkspaceMode mode, uint64_t workspace_bytes) {
  std::vector<Alternative> out;
  const bool planned = kernel.status == KernelPlanStatus::kPlanned;
  const KernelConfig& chosen = kernel.config;
  for (const KernelConfig& point : front) {
    Alternative alternative;
    alternative.config = point;
    alternative.chosen = planned && SameConfig(point, chosen);
    const bool fits = point.workspace_bytes <= workspace_bytes;
    if (alternative.chosen) {
      alternative.why =
          mode == WorkspaceMode::kPerKernel
              ? "chosen: the fastest that fits the limit of " + FormatBytes(workspace_bytes)
              : "chosen by the network-wide choice under the budget of " +
                    FormatBytes(workspace_bytes);
    } else if (!fits) {
      alternative.why = "needs " + FormatBytes(point.workspace_bytes) + ", over the " +
                        std::string(mode == WorkspaceMode::kPerKernel ? "limit" : "budget");
    } else if (!planned) {
      alternative.why = "fits";
    } else if (point.time_ms > chosen.time_ms) {
      alternative.why = "fits, but " + Ms(point.time_ms - chosen.time_ms) + " slower";
    } else {
      // Faster and within the budget alone: only the total modes leave such a point out, to
      // give the workspace to other kernels.
      alternative.why = Ms(chosen.time_ms - point.time_ms) + " faster, but its " +
                        FormatBytes(point.workspace_bytes) + " went to other kernels of the budget";
    }
    out.push_back(std::move(alternative));
  }
  return out;
}

std::string FormatAlternatives(const KernelPlan& kernel,
                               const std::vector<Alternative>& alternatives,
                               const AlgorithmNamer& names) {
  std::string out = kernel.kernel.name + " (" + FormatShape(kernel.kernel) +
                    "): " + std::to_string(alternatives.size()) + " Pareto-optimal configuration" +
                    (alternatives.size() == 1 ? "" : "s") + "\n";
  if (kernel.status != KernelPlanStatus::kPlanned) {
    out += "    not planned: " + kernel.reason + "\n";
  }
  char line[512];
  for (const Alternative& a : alternatives) {
    std::snprintf(line, sizeof(line), "  %s %12s %14.4f ms  %-32s %s\n", a.chosen ? "*" : " ",
                  FormatBytes(a.config.workspace_bytes).c_str(), a.config.time_ms,
                  FormatSegments(a.config.segments, kernel.kernel.problem.op, names).c_str(),
                  a.why.c_str());
    out += line;
  }
  return out;
}

}  // namespace ucudnn::cli
