#include "ucudnn/planner/plan_table.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ucudnn/core/algorithm_names.h"
#include "ucudnn/core/units.h"

namespace ucudnn {
namespace {

std::string Printf(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

std::string Mib(uint64_t bytes) {
  return Printf("%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

std::string Pair(int64_t a, int64_t b) {
  return a == b ? std::to_string(a) : std::to_string(a) + "x" + std::to_string(b);
}

struct Row {
  std::vector<std::string> cells;
  bool overflow_last = false;  // a long reason: it does not widen its column
};

std::string FormatRows(const std::vector<Row>& rows, const std::vector<bool>& left_aligned) {
  std::vector<size_t> width(left_aligned.size(), 0);
  for (const Row& row : rows) {
    for (size_t c = 0; c < row.cells.size() && c < width.size(); ++c) {
      if (row.overflow_last && c + 1 == row.cells.size()) continue;
      width[c] = std::max(width[c], row.cells[c].size());
    }
  }
  std::string out;
  for (const Row& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.cells.size(); ++c) {
      const std::string& cell = row.cells[c];
      const size_t pad = c < width.size() && width[c] > cell.size() ? width[c] - cell.size() : 0;
      const bool left = c >= left_aligned.size() || left_aligned[c];
      if (c > 0) line += "  ";
      if (!left) line.append(pad, ' ');
      line += cell;
      if (left && c + 1 < row.cells.size()) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

AlgorithmNamer AlgorithmNamerFor(const std::string& backend) {
  return [backend](ConvOp op, int algo) { return AlgorithmName(backend, op, algo); };
}

std::string FormatSegments(const std::vector<Segment>& segments, ConvOp op,
                           const AlgorithmNamer& names) {
  std::string out;
  for (size_t i = 0; i < segments.size();) {
    size_t j = i;
    while (j < segments.size() && segments[j].micro_batch == segments[i].micro_batch &&
           segments[j].algo == segments[i].algo &&
           segments[j].engine_config == segments[i].engine_config) {
      ++j;
    }
    if (!out.empty()) out += " + ";
    if (IsFramework(segments[i])) {  // always the whole kernel, alone
      out += "framework " + segments[i].engine_config;
      i = j;
      continue;
    }
    // An engine configuration is named by its key ("4x64@eng34{k3=2}"); legacy ones by name.
    std::string name = !segments[i].engine_config.empty() ? segments[i].engine_config
                       : names                            ? names(op, segments[i].algo)
                                                          : std::string();
    if (name.empty()) name = "algo" + std::to_string(segments[i].algo);
    out += std::to_string(j - i) + "x" + std::to_string(segments[i].micro_batch) + "@" + name;
    i = j;
  }
  return out;
}

std::string FormatShape(const Kernel& kernel) {
  const ConvProblem& p = kernel.problem;
  const bool three_d = p.is_3d();
  // Sizes "HxW" ("DxHxW" in 3-D); strides, pads and dilations one number when equal (Pair).
  auto size = [three_d](int64_t depth, int64_t a, int64_t b) {
    return (three_d ? std::to_string(depth) + "x" : std::string()) + std::to_string(a) + "x" +
           std::to_string(b);
  };
  auto each = [three_d](int64_t depth, int64_t a, int64_t b) {
    if (!three_d || (depth == a && a == b)) return Pair(a, b);
    return std::to_string(depth) + "x" + std::to_string(a) + "x" + std::to_string(b);
  };
  std::string out = "n" + std::to_string(kernel.mini_batch) + " c" + std::to_string(p.c) + " " +
                    size(p.d, p.h, p.w) + " k" + std::to_string(p.k) + " " + size(p.t, p.r, p.s) +
                    " s" + each(p.stride_d, p.stride_h, p.stride_w) + " p" +
                    each(p.pad_d, p.pad_h, p.pad_w);
  if (p.dilation_h != 1 || p.dilation_w != 1 || p.dilation_d != 1) {
    out += " d" + each(p.dilation_d, p.dilation_h, p.dilation_w);
  }
  if (p.groups != 1) out += " g" + std::to_string(p.groups);
  return out;
}

namespace {

// How many kernels of a plan are in each state, and the planned kernels that have an undivided
// baseline.
struct KernelCounts {
  int planned = 0, missing = 0, infeasible = 0, without_baseline = 0;
  double with_baseline_time = 0, with_baseline_undivided = 0;  // kernels with a baseline
};

KernelCounts CountKernels(const NetworkPlan& plan) {
  KernelCounts counts;
  for (const KernelPlan& kp : plan.kernels) {
    if (kp.status == KernelPlanStatus::kMissing) ++counts.missing;
    if (kp.status == KernelPlanStatus::kInfeasible) ++counts.infeasible;
    if (kp.status != KernelPlanStatus::kPlanned) continue;
    ++counts.planned;
    if (!kp.undivided) {
      ++counts.without_baseline;
    } else {
      counts.with_baseline_time += kp.config.time_ms;
      counts.with_baseline_undivided += kp.undivided->time_ms;
    }
  }
  return counts;
}

std::string WorkspaceLimitText(const NetworkPlan& plan) {
  switch (plan.workspace_mode) {
    case WorkspaceMode::kPerKernel: {
      const auto own =
          std::count_if(plan.kernels.begin(), plan.kernels.end(),
                        [](const KernelPlan& kp) { return kp.kernel.workspace_limit.has_value(); });
      return FormatBytes(plan.workspace_budget_bytes) + " per kernel" +
             (own > 0 ? " (" + std::to_string(own) + " with a limit of their own)" : "");
    }
    case WorkspaceMode::kTotalSum:
      return FormatBytes(plan.workspace_budget_bytes) +
             " in total (each kernel owns its workspace; ILP)";
    case WorkspaceMode::kTotalShared:
      return FormatBytes(plan.workspace_budget_bytes) +
             " shared (kernels run one after another in one workspace)";
  }
  return "";
}

// "fp32 nchw" when every kernel has the first one's type and layout, else "mixed types".
std::string PrecisionText(const NetworkPlan& plan) {
  if (plan.kernels.empty()) return "";
  const ConvProblem& first = plan.kernels.front().kernel.problem;
  for (const KernelPlan& kp : plan.kernels) {
    if (kp.kernel.problem.data_type != first.data_type ||
        kp.kernel.problem.layout != first.layout) {
      return "mixed types";
    }
  }
  return std::string(ToString(first.data_type)) + " " + std::string(ToString(first.layout));
}

Row KernelRow(const KernelPlan& kp, const AlgorithmNamer& names) {
  Row row;
  row.cells = {kp.kernel.name.empty() ? "-" : kp.kernel.name, FormatShape(kp.kernel)};
  if (kp.status != KernelPlanStatus::kPlanned) {
    row.cells.push_back(
        std::string(kp.status == KernelPlanStatus::kMissing ? "MISSING: " : "INFEASIBLE: ") +
        kp.reason);
    row.overflow_last = true;
    return row;
  }
  row.cells.push_back(FormatSegments(kp.config.segments, kp.kernel.problem.op, names));
  row.cells.push_back(Mib(kp.config.workspace_bytes));
  row.cells.push_back(Printf("%.3f", kp.config.time_ms));
  if (kp.undivided) {
    row.cells.push_back(Printf("%.3f", kp.undivided->time_ms));
    row.cells.push_back(
        kp.config.time_ms > 0 ? Printf("%.2fx", kp.undivided->time_ms / kp.config.time_ms) : "-");
  } else {
    row.cells.push_back("n/a");
    row.cells.push_back("n/a");
  }
  return row;
}

Row TotalRow(const NetworkPlan& plan, const KernelCounts& counts) {
  std::string total_name = "total";
  if (counts.planned != static_cast<int>(plan.kernels.size())) {
    total_name += " (" + std::to_string(counts.planned) + " planned)";
  }
  // The undivided total and the speedup compare the same kernels: with a baseline missing, the
  // plan has no undivided total (NetworkPlan::total_undivided_ms is 0), and the table says n/a.
  std::string total_undivided = "-", total_speedup = "-";
  if (counts.without_baseline > 0) {
    total_undivided = total_speedup = "n/a";
  } else if (counts.planned > 0) {
    total_undivided = Printf("%.3f", plan.total_undivided_ms);
    if (plan.total_time_ms > 0) {
      total_speedup = Printf("%.2fx", plan.total_undivided_ms / plan.total_time_ms);
    }
  }
  return {{total_name, "",
           plan.workspace_mode == WorkspaceMode::kTotalShared ? "(largest workspace)" : "",
           Mib(plan.total_workspace_bytes), Printf("%.3f", plan.total_time_ms), total_undivided,
           total_speedup}};
}

// What the totals leave out: kernels not planned, and planned ones without a baseline.
std::string LeftOutNotes(const KernelCounts& counts) {
  std::string out;
  if (counts.missing > 0 || counts.infeasible > 0) {
    out += "Not planned: " + std::to_string(counts.missing) + " missing, " +
           std::to_string(counts.infeasible) + " infeasible (left out of the totals).\n";
  }
  if (counts.without_baseline > 0) {
    out += std::to_string(counts.without_baseline) + " of " + std::to_string(counts.planned) +
           " planned kernels have no undivided configuration within the limit: undivided total "
           "and speedup n/a.";
    if (counts.planned > counts.without_baseline) {
      out +=
          " The other " + std::to_string(counts.planned - counts.without_baseline) + ": " +
          Printf("%.3f", counts.with_baseline_time) + " ms planned vs " +
          Printf("%.3f", counts.with_baseline_undivided) + " ms undivided" +
          (counts.with_baseline_time > 0
               ? " (" +
                     Printf("%.2fx", counts.with_baseline_undivided / counts.with_baseline_time) +
                     ")"
               : std::string()) +
          ".";
    }
    out += "\n";
  }
  return out;
}

// What "undivided" compares with in this mode, and in kTotalSum the like-for-like baseline.
std::string BaselineNotes(const NetworkPlan& plan) {
  std::string out;
  switch (plan.workspace_mode) {
    case WorkspaceMode::kPerKernel:
      out +=
          "Undivided: each kernel's fastest single algorithm at the full mini-batch within "
          "the per-kernel limit.\n";
      break;
    case WorkspaceMode::kTotalSum:
    case WorkspaceMode::kTotalShared:
      out +=
          "Undivided: each kernel's fastest single algorithm at the full mini-batch within the "
          "whole budget, i.e. what cuDNN alone would do with the whole budget as one shared "
          "workspace buffer";
      out += plan.workspace_mode == WorkspaceMode::kTotalSum
                 ? " (the plan's own workspaces share the budget as a sum).\n"
                 : ".\n";
      break;
  }
  if (plan.workspace_mode == WorkspaceMode::kTotalSum) {
    // The like-for-like comparison: undivided kernels whose workspaces also sum to the budget.
    out += "Undivided within the same sum budget: ";
    if (plan.undivided_sum_ms <= 0) {
      out += "n/a (some kernel has no undivided option that fits).\n";
    } else {
      out += Printf("%.3f", plan.undivided_sum_ms) + " ms";
      if (plan.total_time_ms > 0) {
        out += " (" + Printf("%.2fx", plan.undivided_sum_ms / plan.total_time_ms) + ")";
      }
      out += ".\n";
    }
  }
  return out;
}

std::string IlpNote(const IlpReport& ilp) {
  if (!ilp.used) return "";
  return "ILP (COIN-OR CBC): " + ilp.status + ", objective " + Printf("%.3f", ilp.objective_ms) +
         " ms, bound " + Printf("%.3f", ilp.bound_ms) + " ms, gap " +
         Printf("%.4f", ilp.gap * 100) + "%, " + Printf("%.3f", ilp.solve_seconds) + " s, " +
         std::to_string(ilp.variables) + " variables, " + std::to_string(ilp.constraints) +
         " constraints\n";
}

}  // namespace

std::string FormatPlanTable(const NetworkPlan& plan, const AlgorithmNamer& names) {
  const KernelCounts counts = CountKernels(plan);
  std::string out = "Plan: " + std::to_string(plan.kernels.size()) + " kernels (" +
                    PrecisionText(plan) + "), policy " + std::string(ToString(plan.policy)) +
                    ", workspace " + WorkspaceLimitText(plan) + "\n";
  std::vector<Row> rows;
  rows.push_back({{"kernel", "shape", "segments", "ws MiB", "time ms", "undiv ms", "speedup"}});
  for (const KernelPlan& kp : plan.kernels) rows.push_back(KernelRow(kp, names));
  rows.push_back(TotalRow(plan, counts));
  out += FormatRows(rows, {true, true, true, false, false, false, false});
  out += LeftOutNotes(counts);
  out += BaselineNotes(plan);
  out += IlpNote(plan.ilp);
  return out;
}

}  // namespace ucudnn
