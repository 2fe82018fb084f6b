// ucudnn-bench-planner: how fast the planner is on realistic networks. For AlexNet, ResNet-50 and
// ResNet-152 training (forward, backward-data and backward-filter of every convolution,
// mini-batch 256, fp32 NCHW) and the batch policies `all` and `power_of_two`, it measures the
// per-kernel DP (PlanNetwork per_kernel at 64 MiB), the Pareto fronts, and the network-wide ILP
// (CBC) at a few total budgets, on one core, and the peak memory of the process.
//
// Timing tables. The measured H100 tables (data/h100, ResNet-50's 23 shapes x 3 ops at every
// power-of-two micro-batch) are the calibration; the model fills in what was not measured:
// - micro-batch sizes between two measured powers of two: per algorithm, time interpolated
//   linearly in log(time) over log(b), workspace linearly in b (cuDNN's workspaces are affine in
//   the batch); an algorithm is offered at b only where it was measured on both sides;
// - shapes that were not measured (AlexNet's): the nearest measured shape of the same op and
//   filter class (1x1 or larger, stride 1 or more), by distance in log(flops per sample),
//   log(channels) and log(spatial size), is the template; every entry's time is scaled by the
//   ratio of flops and its workspace by the ratio of per-sample tensor bytes.
// ResNet-152 has exactly ResNet-50's distinct shapes, so its tables are measured ones
// (interpolated for policy `all`).
//
// Usage: ucudnn-bench-planner [--json] [--data DIR] [--repeat N] [--gap G]
// (--gap: the ILP's relative gap, default IlpOptions'; SPDLOG_LEVEL=debug shows the CBC log) [--gap
// G]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <spdlog/cfg/env.h>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/planner/ilp.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

constexpr int64_t kMiniBatch = 256;
constexpr uint64_t kPerKernelLimit = 64ull << 20;

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// ---- Timing model -------------------------------------------------------------------------------

struct Point {
  double time_ms;
  uint64_t workspace_bytes;
};

// algo -> micro-batch -> measurement.
using Curves = std::map<int, std::map<int64_t, Point>>;

Curves CurvesOf(const TimingTable& table) {
  Curves curves;
  for (const Timing& t : table.entries) {
    if (t.status == TimingStatus::kOk)
      curves[t.algo][t.micro_batch] = {t.time_ms, t.workspace_bytes};
  }
  return curves;
}

double FlopsPerSample(const ConvProblem& p) { return p.flops(1); }

double LogRatio(double a, double b) { return std::fabs(std::log(a / b)); }

const ProblemTimings* Template(const ConvProblem& p, const TimingTables& measured) {
  const ProblemTimings* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int strict = 1; strict >= 0 && best == nullptr; --strict) {
    for (const auto& [key, m] : measured) {
      const ConvProblem& q = m.problem;
      if (q.op != p.op) continue;
      if (strict && ((q.r > 1) != (p.r > 1) || (q.stride_h > 1) != (p.stride_h > 1))) continue;
      const double distance =
          LogRatio(FlopsPerSample(p), FlopsPerSample(q)) +
          0.5 * LogRatio(static_cast<double>(p.c), static_cast<double>(q.c)) +
          0.5 * LogRatio(static_cast<double>(p.h * p.w), static_cast<double>(q.h * q.w));
      if (distance < best_distance) {
        best_distance = distance;
        best = &m;
      }
    }
  }
  return best;
}

// A table for `p` at every micro-batch 1..mini_batch (see the file comment).
TimingTable ModelTable(const ConvProblem& p, int64_t mini_batch, const TimingTables& measured) {
  const TimingTable* exact = FindTimings(measured, p);
  const ProblemTimings* templ = exact != nullptr ? nullptr : Template(p, measured);
  const Curves curves = CurvesOf(exact != nullptr ? *exact : templ->table);
  double time_scale = 1, workspace_scale = 1;
  if (templ != nullptr) {
    const ConvProblem& q = templ->problem;
    time_scale = FlopsPerSample(p) / FlopsPerSample(q);
    workspace_scale =
        static_cast<double>(p.input_bytes_per_sample() + p.output_bytes_per_sample()) /
        static_cast<double>(q.input_bytes_per_sample() + q.output_bytes_per_sample());
  }
  TimingTable table;
  for (const auto& [algo, curve] : curves) {
    for (int64_t b = 1; b <= mini_batch; ++b) {
      auto upper = curve.lower_bound(b);
      if (upper == curve.end()) break;
      Point point = upper->second;
      if (upper->first != b) {
        if (upper == curve.begin()) continue;
        auto lower = std::prev(upper);
        const double x =
            (std::log(static_cast<double>(b)) - std::log(static_cast<double>(lower->first))) /
            (std::log(static_cast<double>(upper->first)) -
             std::log(static_cast<double>(lower->first)));
        point.time_ms = std::exp(std::log(lower->second.time_ms) * (1 - x) +
                                 std::log(upper->second.time_ms) * x);
        const double y = static_cast<double>(b - lower->first) /
                         static_cast<double>(upper->first - lower->first);
        point.workspace_bytes = static_cast<uint64_t>(
            std::llround(static_cast<double>(lower->second.workspace_bytes) * (1 - y) +
                         static_cast<double>(upper->second.workspace_bytes) * y));
      }
      Timing t;
      t.micro_batch = b;
      t.algo = algo;
      t.time_ms = point.time_ms * time_scale;
      t.workspace_bytes = static_cast<uint64_t>(
          std::llround(static_cast<double>(point.workspace_bytes) * workspace_scale));
      table.entries.push_back(t);
    }
  }
  return table;
}

// ---- Measurements -------------------------------------------------------------------------------

struct IlpRun {
  std::string budget_name;
  uint64_t budget_bytes = 0;
  IlpSolution solution;
};

struct Run {
  std::string network;
  BatchPolicy policy = BatchPolicy::kAll;
  size_t kernels = 0;
  size_t distinct = 0;
  size_t modelled = 0;  // distinct kernels whose shape was not measured
  size_t table_entries = 0;
  double dp_ms = 0;           // PlanNetwork per_kernel, distinct kernels shared (median)
  double dp_unshared_ms = 0;  // SolveKernelDp for every kernel separately (median)
  double pareto_ms = 0;       // ParetoFront of every distinct kernel (median)
  size_t pareto_points = 0;   // over distinct kernels
  size_t pareto_max = 0;
  double per_kernel_total_ms = 0;
  double undivided_total_ms = 0;
  double plan_total_sum_ms = 0;  // PlanNetwork total_sum at the first budget, end to end
  std::vector<IlpRun> ilp;
};

template <typename F>
double MedianMs(int repeat, F&& f) {
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(Ms(std::chrono::steady_clock::now() - start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Result<Run> Measure(const std::string& network, BatchPolicy policy, const TimingTables& measured,
                    int repeat, const IlpOptions& ilp_options) {
  Run run;
  run.network = network;
  run.policy = policy;
  UCUDNN_ASSIGN_OR_RETURN(std::vector<Kernel> kernels, NetworkKernels(network, kMiniBatch));
  const std::vector<Kernel> distinct = UniqueKernels(kernels);
  run.kernels = kernels.size();
  run.distinct = distinct.size();
  std::map<std::string, TimingTable> tables;
  for (const Kernel& k : distinct) {
    if (FindTimings(measured, k.problem) == nullptr) ++run.modelled;
    TimingTable& t = tables[CanonicalKey(k.problem)] = ModelTable(k.problem, kMiniBatch, measured);
    run.table_entries += t.entries.size();
  }
  std::vector<const TimingTable*> pointers;
  for (const Kernel& k : kernels) pointers.push_back(&tables[CanonicalKey(k.problem)]);

  PlanRequest request;
  request.kernels = kernels;
  request.policy = policy;
  request.workspace_mode = WorkspaceMode::kPerKernel;
  request.workspace_bytes = kPerKernelLimit;
  NetworkPlan per_kernel;
  Status status;
  run.dp_ms = MedianMs(repeat, [&] {
    Result<NetworkPlan> plan = PlanNetwork(request, pointers);
    if (!plan.ok()) {
      status = plan.status();
      return;
    }
    per_kernel = std::move(plan).value();
  });
  UCUDNN_RETURN_IF_ERROR(status);
  run.per_kernel_total_ms = per_kernel.total_time_ms;
  run.undivided_total_ms = per_kernel.total_undivided_ms;
  run.dp_unshared_ms = MedianMs(repeat, [&] {
    for (size_t i = 0; i < kernels.size(); ++i) {
      Result<KernelConfig> c = SolveKernelDp(*pointers[i], kMiniBatch, policy, kPerKernelLimit);
      if (!c.ok()) status = c.status();
    }
  });
  UCUDNN_RETURN_IF_ERROR(status);

  std::map<std::string, std::vector<KernelConfig>> fronts;
  run.pareto_ms = MedianMs(repeat, [&] {
    fronts.clear();
    for (const Kernel& k : distinct) {
      const std::string key = CanonicalKey(k.problem);
      fronts[key] = ParetoFront(tables[key], kMiniBatch, policy);
    }
  });
  for (const auto& [key, front] : fronts) {
    run.pareto_points += front.size();
    run.pareto_max = std::max(run.pareto_max, front.size());
  }

  // Budgets: the sum of the smallest workspaces S_min and of the fastest points' S_max frame
  // the interesting range; 64 MiB per kernel is what the per-kernel plan may use in total.
  std::vector<std::vector<IlpOption>> options;
  uint64_t smallest = 0, fastest = 0;
  for (const Kernel& k : kernels) {
    const std::vector<KernelConfig>& front = fronts[CanonicalKey(k.problem)];
    options.push_back(ToIlpOptions(front));
    smallest += front.front().workspace_bytes;
    fastest += front.back().workspace_bytes;
  }
  const std::vector<std::pair<std::string, uint64_t>> budgets = {
      {"64MiB_x_kernels", kPerKernelLimit * kernels.size()},
      {"min+10%", smallest + (fastest - smallest) / 10},
      {"min+50%", smallest + (fastest - smallest) / 2},
  };
  for (const auto& [name, budget] : budgets) {
    IlpRun ilp;
    ilp.budget_name = name;
    ilp.budget_bytes = budget;
    UCUDNN_ASSIGN_OR_RETURN(ilp.solution, SolveNetworkIlp(options, budget, ilp_options));
    run.ilp.push_back(std::move(ilp));
  }

  request.workspace_mode = WorkspaceMode::kTotalSum;
  request.workspace_bytes = budgets[1].second;
  run.plan_total_sum_ms = MedianMs(1, [&] {
    Result<NetworkPlan> plan = PlanNetwork(request, pointers);
    if (!plan.ok()) status = plan.status();
  });
  UCUDNN_RETURN_IF_ERROR(status);
  return run;
}

double PeakMemoryMb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

std::string Json(const std::vector<Run>& runs, double peak_mb) {
  std::string out = "{\n  \"benchmark\": \"planner\",\n  \"mini_batch\": 256,\n";
  out += "  \"per_kernel_limit_bytes\": " + std::to_string(kPerKernelLimit) + ",\n";
  out += "  \"runs\": [\n";
  char buffer[512];
  for (size_t r = 0; r < runs.size(); ++r) {
    const Run& run = runs[r];
    std::snprintf(buffer, sizeof(buffer),
                  "    {\"network\": \"%s\", \"policy\": \"%s\", \"kernels\": %zu, "
                  "\"distinct_kernels\": %zu, \"modelled_shapes\": %zu, \"table_entries\": %zu,\n"
                  "     \"dp_ms\": %.3f, \"dp_unshared_ms\": %.3f, \"pareto_ms\": %.3f, "
                  "\"pareto_points\": %zu, \"pareto_max_points\": %zu,\n"
                  "     \"per_kernel_plan_ms\": %.3f, \"undivided_ms\": %.3f, "
                  "\"plan_total_sum_wall_ms\": %.3f,\n     \"ilp\": [\n",
                  run.network.c_str(), std::string(ToString(run.policy)).c_str(), run.kernels,
                  run.distinct, run.modelled, run.table_entries, run.dp_ms, run.dp_unshared_ms,
                  run.pareto_ms, run.pareto_points, run.pareto_max, run.per_kernel_total_ms,
                  run.undivided_total_ms, run.plan_total_sum_ms);
    out += buffer;
    for (size_t i = 0; i < run.ilp.size(); ++i) {
      const IlpRun& ilp = run.ilp[i];
      const IlpReport& rep = ilp.solution.report;
      std::snprintf(buffer, sizeof(buffer),
                    "       {\"budget\": \"%s\", \"budget_bytes\": %llu, \"status\": \"%s\", "
                    "\"solve_s\": %.4f, \"gap\": %.3g, \"objective_ms\": %.3f, "
                    "\"bound_ms\": %.3f, \"workspace_bytes\": %llu, \"variables\": %d, "
                    "\"constraints\": %d}%s\n",
                    ilp.budget_name.c_str(), static_cast<unsigned long long>(ilp.budget_bytes),
                    rep.status.c_str(), rep.solve_seconds, rep.gap, rep.objective_ms, rep.bound_ms,
                    static_cast<unsigned long long>(ilp.solution.total_workspace_bytes),
                    rep.variables, rep.constraints, i + 1 < run.ilp.size() ? "," : "");
      out += buffer;
    }
    out += std::string("     ]}") + (r + 1 < runs.size() ? "," : "") + "\n";
  }
  std::snprintf(buffer, sizeof(buffer), "  ],\n  \"peak_rss_mb\": %.1f\n}\n", peak_mb);
  out += buffer;
  return out;
}

void PrintText(const std::vector<Run>& runs, double peak_mb) {
  std::printf("%-10s %-13s %7s %8s %8s %9s %7s  %s\n", "network", "policy", "kernels", "dp ms",
              "pareto", "points", "plan ms", "ILP (budget: status, seconds, gap)");
  for (const Run& run : runs) {
    std::string ilp;
    for (const IlpRun& i : run.ilp) {
      char buffer[160];
      std::snprintf(buffer, sizeof(buffer), "%s%s: %s %.3fs %.2g", ilp.empty() ? "" : "; ",
                    i.budget_name.c_str(), i.solution.report.status.c_str(),
                    i.solution.report.solve_seconds, i.solution.report.gap);
      ilp += buffer;
    }
    std::printf("%-10s %-13s %7zu %8.3f %8.2f %9zu %7.2f  %s\n", run.network.c_str(),
                std::string(ToString(run.policy)).c_str(), run.kernels, run.dp_ms, run.pareto_ms,
                run.pareto_points, run.per_kernel_total_ms, ilp.c_str());
  }
  std::printf("peak memory: %.1f MB\n", peak_mb);
}

}  // namespace
}  // namespace ucudnn

int main(int argc, char** argv) {
  using namespace ucudnn;
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug shows the CBC log
  bool json = false;
  std::string data = std::string(UCUDNN_SOURCE_DIR) + "/data/h100";
  int repeat = 5;
  IlpOptions ilp_options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--data" && i + 1 < argc) {
      data = argv[++i];
    } else if (arg == "--gap" && i + 1 < argc) {
      ilp_options.relative_gap = std::atof(argv[++i]);
    } else if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--json] [--data DIR] [--repeat N] [--gap G]\n", argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  Result<TimingTables> measured =
      ReadTimingCsvFile(data + "/h100-cudnn91400-resnet50-fp32-nchw.csv");
  if (!measured.ok()) {
    std::fprintf(stderr, "%s\n", measured.status().ToString().c_str());
    return 1;
  }
  std::vector<Run> runs;
  for (const char* network : {"alexnet", "resnet50", "resnet152"}) {
    for (BatchPolicy policy : {BatchPolicy::kAll, BatchPolicy::kPowerOfTwo}) {
      Result<Run> run = Measure(network, policy, *measured, repeat, ilp_options);
      if (!run.ok()) {
        std::fprintf(stderr, "%s: %s\n", network, run.status().ToString().c_str());
        return 1;
      }
      runs.push_back(std::move(run).value());
    }
  }
  const double peak = PeakMemoryMb();
  if (json) {
    std::fputs(Json(runs, peak).c_str(), stdout);
  } else {
    PrintText(runs, peak);
  }
  return 0;
}
