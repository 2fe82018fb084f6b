#include "bench_table.h"

#include <algorithm>
#include <cstdio>

#include "ucudnn/core/problem.h"
#include "ucudnn/core/text.h"
#include "ucudnn/core/units.h"
#include "ucudnn/planner/plan_table.h"

namespace ucudnn::cli {
namespace {

std::string Printf(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

std::string Mib(uint64_t bytes) {
  return Printf("%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

std::string AlgorithmName(const std::map<int, std::string>& names, int algo) {
  auto it = names.find(algo);
  return it != names.end() ? it->second : "algo" + std::to_string(algo);
}

std::string Segments(const std::vector<Segment>& segments,
                     const std::map<int, std::string>& names) {
  std::string out;
  for (size_t i = 0; i < segments.size();) {
    size_t j = i;
    while (j < segments.size() && segments[j].micro_batch == segments[i].micro_batch &&
           segments[j].algo == segments[i].algo) {
      ++j;
    }
    if (!out.empty()) out += " + ";
    out += std::to_string(j - i) + "x" + std::to_string(segments[i].micro_batch) + "@" +
           AlgorithmName(names, segments[i].algo);
    i = j;
  }
  return out;
}

struct Row {
  std::vector<std::string> cells;
  bool overflow_last = false;  // a long reason: it does not widen its column
};

// Columns two spaces apart, text left-aligned and numbers right-aligned.
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

// "1 kernel", "3 kernels".
std::string Kernels(size_t n) { return std::to_string(n) + (n == 1 ? " kernel" : " kernels"); }

std::string Types(const std::vector<KernelPlan>& kernels) {
  if (kernels.empty()) return "no kernels";
  const ConvProblem& first = kernels.front().kernel.problem;
  for (const KernelPlan& kp : kernels) {
    if (kp.kernel.problem.data_type != first.data_type ||
        kp.kernel.problem.layout != first.layout) {
      return "mixed types";
    }
  }
  return std::string(ToString(first.data_type)) + " " + Uppercase(ToString(first.layout));
}

}  // namespace

std::string FormatBenchTable(const BenchTableHeader& header, const std::vector<KernelPlan>& kernels,
                             const std::map<int, std::string>& algorithm_names) {
  const DeviceFingerprint& d = header.device;
  std::string out =
      "cpu-bench " + header.network + ": " + Kernels(kernels.size()) + ", mini-batch " +
      (kernels.empty() ? std::string("-") : std::to_string(kernels.front().kernel.mini_batch)) +
      ", " + Types(kernels) + "\n";
  out += "Device: " + d.backend + " \"" + d.name + "\", " + std::to_string(d.sm_count) +
         " cores, " + FormatBytes(d.memory_bytes) + ", " + (d.blas.empty() ? "no BLAS" : d.blas) +
         "; fingerprint " + HashHex(d.Hash()) + "\n";
  out += "Workspace limit " + FormatBytes(header.workspace_limit) + " per kernel, policy " +
         std::string(ToString(header.policy)) + ", BLAS threads " +
         (header.blas_threads > 0 ? std::to_string(header.blas_threads) : "OpenBLAS's default") +
         "\n";

  std::vector<Row> rows;
  rows.push_back({{"kernel", "shape", "segments", "ws MiB", "time ms", "undiv ms", "speedup"}});
  int counted = 0, without_baseline = 0, not_planned = 0;
  double total_time = 0, total_undivided = 0;
  uint64_t total_workspace = 0;
  for (const KernelPlan& kp : kernels) {
    Row row;
    row.cells = {kp.kernel.name.empty() ? "-" : kp.kernel.name, FormatShape(kp.kernel)};
    if (kp.status != KernelPlanStatus::kPlanned) {
      ++not_planned;
      row.cells.push_back(
          std::string(kp.status == KernelPlanStatus::kMissing ? "MISSING: " : "INFEASIBLE: ") +
          kp.reason);
      row.overflow_last = true;
      rows.push_back(std::move(row));
      continue;
    }
    row.cells.push_back(Segments(kp.config.segments, algorithm_names));
    row.cells.push_back(Mib(kp.config.workspace_bytes));
    row.cells.push_back(Printf("%.3f", kp.config.time_ms));
    if (kp.undivided) {
      ++counted;
      total_time += kp.config.time_ms;
      total_undivided += kp.undivided->time_ms;
      total_workspace += kp.config.workspace_bytes;
      row.cells.push_back(Printf("%.3f", kp.undivided->time_ms));
      row.cells.push_back(
          kp.config.time_ms > 0 ? Printf("%.2fx", kp.undivided->time_ms / kp.config.time_ms) : "-");
    } else {
      ++without_baseline;
      row.cells.push_back("n/a");
      row.cells.push_back("n/a");
    }
    rows.push_back(std::move(row));
  }
  std::string total_name = "total";
  if (counted != static_cast<int>(kernels.size())) {
    total_name += " (" + std::to_string(counted) + " of " + Kernels(kernels.size()) + ")";
  }
  if (counted > 0) {
    rows.push_back({{total_name, "", "", Mib(total_workspace), Printf("%.3f", total_time),
                     Printf("%.3f", total_undivided),
                     total_time > 0 ? Printf("%.2fx", total_undivided / total_time) : "-"}});
  } else {
    rows.push_back({{total_name, "", "", "-", "-", "-", "-"}});
  }
  out += "\n" + FormatRows(rows, {true, true, true, false, false, false, false});
  std::vector<std::string> left_out;
  if (without_baseline > 0) {
    left_out.push_back(Kernels(static_cast<size_t>(without_baseline)) +
                       " with no undivided configuration within the limit (n/a)");
  }
  if (not_planned > 0) {
    left_out.push_back(Kernels(static_cast<size_t>(not_planned)) + " without a configuration");
  }
  if (!left_out.empty()) {
    out += "Not in the totals: " + left_out.front();
    if (left_out.size() > 1) out += ", " + left_out.back();
    out += ".\n";
  }
  return out;
}

}  // namespace ucudnn::cli
