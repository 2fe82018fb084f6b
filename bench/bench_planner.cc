// ucudnn-bench-planner: how fast the planner is on realistic networks. For AlexNet, ResNet-50 and
// ResNet-152 training (forward, backward-data and backward-filter of every convolution,
// mini-batch 256, fp32 NCHW) and the batch policies `all` and `power_of_two`, it measures the
// per-kernel DP (PlanNetwork per_kernel at 64 MiB), the Pareto fronts, and the network-wide ILP
// (CBC) at a few total budgets, on one core, and the peak memory of the process. Every time is
// the median of --repeat runs.
//
// dp_ms is PlanNetwork per_kernel, the server's path: kernels with the same problem, mini-batch
// and table are solved once (ResNet-152's 465 kernels are 69 distinct ones). dp_unshared_ms
// solves every kernel separately. The ILP likewise merges kernels with identical fronts into one
// integer variable per option, so a network of repeated layers is a small ILP; the extra network
// "resnet152_perturbed" is ResNet-152 with every kernel's timings scaled by its own deterministic
// pseudo-random factors (per kernel, and per algorithm and micro-batch within it), so that no two
// kernels share a table or a front: its DP, fronts and ILP are the unshared worst case.
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
// `ucudnn-bench-planner --help` lists the flags; SPDLOG_LEVEL=debug shows the CBC log. Times are
// the thread's CPU time (see "fields" in the JSON).
// Pin it to one core for the numbers the issue asks for: taskset -c 0 ucudnn-bench-planner --json
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <spdlog/cfg/env.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/logging.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/planner/ilp.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

constexpr int64_t kMiniBatch = 256;
constexpr uint64_t kPerKernelLimit = 64ull << 20;
constexpr double kTargetGap = 1e-3;  // the target: a proven gap under 0.1%

// This thread's CPU time in milliseconds. The benchmark is single-threaded (CBC runs with one
// thread), so on an idle core this is its wall time, and other load on the core does not count.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
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

// Deterministic pseudo-random numbers in [0, 1) from a key (splitmix64's finaliser).
double Unit(uint64_t key) {
  key += 0x9e3779b97f4a7c15ull;
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  key ^= key >> 31;
  return static_cast<double>(key >> 11) / 9007199254740992.0;  // 2^53
}

// Kernel `index`'s own variant of `table`: the whole table scaled by 0.9..1.1, every entry by a
// further 0.98..1.02 (per algorithm and micro-batch). Workspaces stay as they are.
TimingTable Perturbed(const TimingTable& table, size_t index) {
  TimingTable out = table;
  const double kernel_factor = 0.9 + 0.2 * Unit(index * 0x10001ull);
  for (Timing& t : out.entries) {
    const uint64_t key = (static_cast<uint64_t>(index) << 40) ^
                         (static_cast<uint64_t>(t.algo) << 24) ^
                         static_cast<uint64_t>(t.micro_batch);
    t.time_ms *= kernel_factor * (0.98 + 0.04 * Unit(key));
  }
  return out;
}

// ---- Measurements -------------------------------------------------------------------------------

struct IlpRun {
  std::string budget_name;
  uint64_t budget_bytes = 0;
  double relative_gap = 0;
  double solve_ms = 0;  // median CPU time of SolveNetworkIlp
  int runs = 0;         // solves timed: one only when the time limit ended the first
  IlpSolution solution;
};

struct Run {
  std::string network;
  BatchPolicy policy = BatchPolicy::kAll;
  size_t kernels = 0;
  size_t distinct = 0;  // kernels with their own table
  size_t modelled = 0;  // distinct shapes that were not measured
  size_t table_entries = 0;
  // PlanNetwork per_kernel, identical kernels solved once (the server's path); absent for the
  // perturbed network, where every kernel is distinct and dp_unshared_ms is that time.
  std::optional<double> dp_ms;
  double dp_unshared_ms = 0;  // SolveKernelDp for every kernel separately
  double pareto_ms = 0;       // ParetoFront of every distinct table
  size_t pareto_points = 0;   // over distinct tables
  size_t pareto_max = 0;
  size_t without_front = 0;  // kernels with no usable timing (left out of the ILP)
  double per_kernel_total_ms = 0;
  double undivided_total_ms = 0;
  std::optional<double> plan_total_sum_ms;  // PlanNetwork total_sum at the second budget
  std::vector<IlpRun> ilp;
};

// The median CPU time of `repeat` calls of f; f returning false stops the repetitions early.
template <typename F>
double MedianMs(int repeat, F&& f) {
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    const double start = ThreadCpuMs();
    bool again = true;
    if constexpr (std::is_same_v<decltype(f()), bool>) {
      again = f();
    } else {
      f();
    }
    times.push_back(ThreadCpuMs() - start);
    if (!again) break;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Budgets: the sum of the smallest workspaces S_min and of the fastest points' S_max frame the
// interesting range; 64 MiB per kernel is what the per-kernel plan may use in total.
std::vector<std::pair<std::string, uint64_t>> Budgets(
    const std::vector<std::vector<IlpOption>>& options) {
  uint64_t smallest = 0, fastest = 0;
  for (const std::vector<IlpOption>& front : options) {
    smallest += front.front().workspace_bytes;
    fastest += front.back().workspace_bytes;
  }
  return {
      {"64MiB_x_kernels", kPerKernelLimit * options.size()},
      {"min+10%", smallest + (fastest - smallest) / 10},
      {"min+50%", smallest + (fastest - smallest) / 2},
  };
}

// The ILP at each budget. A solve that the time limit ended is not repeated: its time is the
// limit's.
Status MeasureIlp(const std::vector<std::vector<IlpOption>>& options, int repeat,
                  const IlpOptions& ilp_options, Run* run) {
  for (const auto& [name, budget] : Budgets(options)) {
    IlpRun ilp;
    ilp.budget_name = name;
    ilp.budget_bytes = budget;
    ilp.relative_gap = ilp_options.relative_gap;
    Status status;
    ilp.solve_ms = MedianMs(repeat, [&] {
      ++ilp.runs;
      Result<IlpSolution> solution = SolveNetworkIlp(options, budget, ilp_options);
      if (!solution.ok()) {
        status = solution.status();
        return false;
      }
      ilp.solution = std::move(solution).value();
      return ilp.solution.report.status != "time_limit";
    });
    UCUDNN_RETURN_IF_ERROR(status);
    run->ilp.push_back(std::move(ilp));
  }
  return Status::Ok();
}

// A table for every distinct kernel (by canonical key), modelled on the measured ones.
std::map<std::string, TimingTable> ModelTables(const std::vector<Kernel>& distinct,
                                               const TimingTables& measured, Run* run) {
  std::map<std::string, TimingTable> tables;
  for (const Kernel& k : distinct) {
    if (FindTimings(measured, k.problem) == nullptr) ++run->modelled;
    TimingTable& t = tables[CanonicalKey(k.problem)] = ModelTable(k.problem, kMiniBatch, measured);
    run->table_entries += t.entries.size();
  }
  return tables;
}

// PlanNetwork per_kernel (identical kernels solved once) and SolveKernelDp for every kernel.
Status MeasureDp(const std::vector<Kernel>& kernels, const std::vector<const TimingTable*>& tables,
                 int repeat, Run* run) {
  PlanRequest request;
  request.kernels = kernels;
  request.policy = run->policy;
  request.workspace_mode = WorkspaceMode::kPerKernel;
  request.workspace_bytes = kPerKernelLimit;
  NetworkPlan per_kernel;
  Status status;
  run->dp_ms = MedianMs(repeat, [&] {
    Result<NetworkPlan> plan = PlanNetwork(request, tables);
    if (!plan.ok()) {
      status = plan.status();
      return;
    }
    per_kernel = std::move(plan).value();
  });
  UCUDNN_RETURN_IF_ERROR(status);
  run->per_kernel_total_ms = per_kernel.total_time_ms;
  run->undivided_total_ms = per_kernel.total_undivided_ms;
  run->dp_unshared_ms = MedianMs(repeat, [&] {
    for (const TimingTable* table : tables) {
      Result<KernelConfig> c = SolveKernelDp(*table, kMiniBatch, run->policy, kPerKernelLimit);
      if (!c.ok()) status = c.status();
    }
  });
  return status;
}

// The Pareto front of every distinct table, by canonical key.
std::map<std::string, std::vector<KernelConfig>> MeasurePareto(
    const std::map<std::string, TimingTable>& tables, int repeat, Run* run) {
  std::map<std::string, std::vector<KernelConfig>> fronts;
  run->pareto_ms = MedianMs(repeat, [&] {
    fronts.clear();
    for (const auto& [key, table] : tables) {
      fronts[key] = ParetoFront(table, kMiniBatch, run->policy);
    }
  });
  for (const auto& [key, front] : fronts) {
    run->pareto_points += front.size();
    run->pareto_max = std::max(run->pareto_max, front.size());
  }
  return fronts;
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
  const std::map<std::string, TimingTable> tables = ModelTables(distinct, measured, &run);
  std::vector<const TimingTable*> pointers;
  for (const Kernel& k : kernels) pointers.push_back(&tables.at(CanonicalKey(k.problem)));
  UCUDNN_RETURN_IF_ERROR(MeasureDp(kernels, pointers, repeat, &run));
  const std::map<std::string, std::vector<KernelConfig>> fronts =
      MeasurePareto(tables, repeat, &run);

  // Kernels without a usable timing have an empty front: left out, as PlanNetwork does.
  std::vector<std::vector<IlpOption>> options;
  for (const Kernel& k : kernels) {
    const std::vector<KernelConfig>& front = fronts.at(CanonicalKey(k.problem));
    if (front.empty()) {
      ++run.without_front;
      continue;
    }
    options.push_back(ToIlpOptions(front));
  }
  if (options.empty()) return run;
  UCUDNN_RETURN_IF_ERROR(MeasureIlp(options, repeat, ilp_options, &run));

  PlanRequest request;
  request.kernels = kernels;
  request.policy = policy;
  request.workspace_mode = WorkspaceMode::kTotalSum;
  request.workspace_bytes = run.ilp[1].budget_bytes;
  Status status;
  run.plan_total_sum_ms = MedianMs(repeat, [&] {
    Result<NetworkPlan> plan = PlanNetwork(request, pointers, ilp_options);
    if (!plan.ok()) status = plan.status();
  });
  UCUDNN_RETURN_IF_ERROR(status);
  return run;
}

// ResNet-152 with every kernel's table perturbed on its own (see the file comment). Tables are
// made one at a time and dropped once their DP and front are measured, to keep memory low.
Result<Run> MeasurePerturbed(BatchPolicy policy, const TimingTables& measured, int repeat,
                             const IlpOptions& ilp_options) {
  Run run;
  run.network = "resnet152_perturbed";
  run.policy = policy;
  UCUDNN_ASSIGN_OR_RETURN(std::vector<Kernel> kernels, NetworkKernels("resnet152", kMiniBatch));
  run.kernels = run.distinct = kernels.size();
  std::map<std::string, TimingTable> shapes;
  for (const Kernel& k : UniqueKernels(kernels)) {
    if (FindTimings(measured, k.problem) == nullptr) ++run.modelled;
    shapes[CanonicalKey(k.problem)] = ModelTable(k.problem, kMiniBatch, measured);
  }
  std::vector<std::vector<IlpOption>> options;
  Status status;
  bool every_baseline = true;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const TimingTable table = Perturbed(shapes[CanonicalKey(kernels[i].problem)], i);
    run.table_entries += table.entries.size();
    run.dp_unshared_ms += MedianMs(repeat, [&] {
      Result<KernelConfig> c = SolveKernelDp(table, kMiniBatch, policy, kPerKernelLimit);
      if (!c.ok()) status = c.status();
    });
    UCUDNN_RETURN_IF_ERROR(status);
    Result<Segment> undivided = FastestUndivided(table, kMiniBatch, kPerKernelLimit);
    UCUDNN_ASSIGN_OR_RETURN(const KernelConfig config,
                            SolveKernelDp(table, kMiniBatch, policy, kPerKernelLimit));
    run.per_kernel_total_ms += config.time_ms;
    // As PlanNetwork's total_undivided_ms: 0 unless every kernel has a baseline.
    every_baseline = every_baseline && undivided.ok();
    if (undivided.ok()) run.undivided_total_ms += undivided->time_ms;
    std::vector<KernelConfig> front;
    run.pareto_ms += MedianMs(repeat, [&] { front = ParetoFront(table, kMiniBatch, policy); });
    run.pareto_points += front.size();
    run.pareto_max = std::max(run.pareto_max, front.size());
    if (front.empty()) {
      ++run.without_front;
      continue;
    }
    options.push_back(ToIlpOptions(front));
  }
  if (!every_baseline) run.undivided_total_ms = 0;
  if (options.empty()) return run;
  UCUDNN_RETURN_IF_ERROR(MeasureIlp(options, repeat, ilp_options, &run));
  // And to the target, a proven gap under 0.1%.
  if (ilp_options.relative_gap < kTargetGap) {
    IlpOptions target = ilp_options;
    target.relative_gap = kTargetGap;
    UCUDNN_RETURN_IF_ERROR(MeasureIlp(options, repeat, target, &run));
  }
  return run;
}

double PeakMemoryMb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

std::string OptionalMs(const std::optional<double>& ms) {
  if (!ms) return "null";
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3f", *ms);
  return buffer;
}

using Json = nlohmann::ordered_json;

Json OptionalJson(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

Json FieldsJson() {
  return {
      {"times",
       "this thread's CPU time (the benchmark is single-threaded, CBC too), so that other load on "
       "a shared core does not count: milliseconds (solve_s: seconds), median of `repeat` runs; "
       "solve_wall_s is the solver's own wall time of the last run"},
      {"dp_ms",
       "PlanNetwork per_kernel at per_kernel_limit_bytes: kernels with the same problem, "
       "mini-batch and table solved once, as the server plans (null where every kernel is "
       "distinct: see dp_unshared_ms)"},
      {"dp_unshared_ms", "SolveKernelDp for every kernel separately"},
      {"pareto_ms", "ParetoFront of every distinct table"},
      {"ilp",
       "SolveNetworkIlp over the kernels' fronts (kernels with identical fronts share integer "
       "variables); gap = (objective - bound) / objective with the bound CBC and the LP proved"},
      {"plan_total_sum_wall_ms", "PlanNetwork total_sum at the min+10% budget, end to end"},
      {"ilp.runs", "solves timed; a solve ended by the time limit is not repeated"},
      {"resnet152_perturbed",
       "ResNet-152 with every kernel's timings perturbed on its own: no two kernels share a table "
       "or a front; its ILP also at relative_gap 0.001, the issue's target"}};
}

Json IlpJson(const IlpRun& ilp) {
  const IlpReport& rep = ilp.solution.report;
  return {{"budget", ilp.budget_name},
          {"budget_bytes", ilp.budget_bytes},
          {"relative_gap", ilp.relative_gap},
          {"status", rep.status},
          {"solve_s", ilp.solve_ms / 1000.0},
          {"solve_wall_s", rep.solve_seconds},
          {"runs", ilp.runs},
          {"gap", rep.gap},
          {"objective_ms", rep.objective_ms},
          {"bound_ms", rep.bound_ms},
          {"workspace_bytes", ilp.solution.total_workspace_bytes},
          {"variables", rep.variables},
          {"constraints", rep.constraints}};
}

Json RunJson(const Run& run) {
  Json ilp = Json::array();
  for (const IlpRun& i : run.ilp) ilp.push_back(IlpJson(i));
  return {{"network", run.network},
          {"policy", ToString(run.policy)},
          {"kernels", run.kernels},
          {"distinct_kernels", run.distinct},
          {"modelled_shapes", run.modelled},
          {"table_entries", run.table_entries},
          {"dp_ms", OptionalJson(run.dp_ms)},
          {"dp_unshared_ms", run.dp_unshared_ms},
          {"pareto_ms", run.pareto_ms},
          {"pareto_points", run.pareto_points},
          {"pareto_max_points", run.pareto_max},
          {"kernels_without_front", run.without_front},
          {"per_kernel_plan_ms", run.per_kernel_total_ms},
          {"undivided_ms", run.undivided_total_ms},
          {"plan_total_sum_wall_ms", OptionalJson(run.plan_total_sum_ms)},
          {"ilp", ilp}};
}

Json ReportJson(const std::vector<Run>& runs, double peak_mb, int repeat,
                const IlpOptions& ilp_options) {
  Json runs_json = Json::array();
  for (const Run& run : runs) runs_json.push_back(RunJson(run));
  return {{"benchmark", "planner"},
          {"mini_batch", kMiniBatch},
          {"per_kernel_limit_bytes", kPerKernelLimit},
          {"repeat", repeat},
          {"ilp_relative_gap", ilp_options.relative_gap},
          {"ilp_time_limit_s", ilp_options.time_limit_s},
          {"fields", FieldsJson()},
          {"runs", runs_json},
          {"peak_rss_mb", peak_mb}};
}

void PrintText(const std::vector<Run>& runs, double peak_mb) {
  std::printf("%-19s %-13s %7s %8s %9s %8s %9s %8s  %s\n", "network", "policy", "kernels", "dp ms",
              "dp unsh.", "pareto", "points", "plan ms",
              "ILP (budget@relative gap: status, CPU seconds, gap)");
  for (const Run& run : runs) {
    std::string ilp;
    for (const IlpRun& i : run.ilp) {
      char buffer[160];
      std::snprintf(buffer, sizeof(buffer), "%s%s@%g: %s %.3fs %.2g", ilp.empty() ? "" : "; ",
                    i.budget_name.c_str(), i.relative_gap, i.solution.report.status.c_str(),
                    i.solve_ms / 1000.0, i.solution.report.gap);
      ilp += buffer;
    }
    std::printf("%-19s %-13s %7zu %8s %9.3f %8.2f %9zu %8.2f  %s\n", run.network.c_str(),
                std::string(ToString(run.policy)).c_str(), run.kernels,
                OptionalMs(run.dp_ms).c_str(), run.dp_unshared_ms, run.pareto_ms, run.pareto_points,
                run.per_kernel_total_ms, ilp.c_str());
  }
  std::printf("peak memory: %.1f MB\n", peak_mb);
}

struct Args {
  bool json = false;
  std::string data = std::string(UCUDNN_SOURCE_DIR) + "/data/h100";
  int repeat = 5;
  std::string only;  // one network, or all
  IlpOptions ilp_options;
};

const char* const kNetworks[] = {"alexnet", "resnet50", "resnet152", "resnet152_perturbed"};

// The parsed flags, or the exit status: 0 after --help, 2 for bad flags (CLI11's message).
std::variant<Args, int> ParseArgs(int argc, char** argv) {
  Args a;
  CLI::App app(
      "ucudnn-bench-planner: the planner's DP, Pareto fronts and network-wide ILP (CBC) on "
      "AlexNet and ResNet-50/152 training at mini-batch 256, fp32 NCHW, with timing tables "
      "modelled on the measured H100 tables. Times are this thread's CPU time, the median of "
      "--repeat runs; pin it to one core: taskset -c 0 ucudnn-bench-planner --json",
      "ucudnn-bench-planner");
  app.footer("Environment: SPDLOG_LEVEL=debug shows the CBC log.");
  app.add_flag("--json", a.json, "print the results as JSON on stdout");
  app.add_option("--data", a.data,
                 "directory of the measured H100 tables "
                 "(h100-cudnn91400-resnet50-fp32-nchw.csv)")
      ->capture_default_str();
  app.add_option("--repeat", a.repeat, "runs per time (their median is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--gap", a.ilp_options.relative_gap, "the ILP's relative gap")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  std::vector<std::string> networks(std::begin(kNetworks), std::end(kNetworks));
  app.add_option("--network", a.only, "only this network (default: all)")
      ->check(CLI::IsMember(networks));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return a;
}

}  // namespace
}  // namespace ucudnn

int main(int argc, char** argv) {
  using namespace ucudnn;
  LogToStderr("ucudnn-bench-planner");  // stdout is for --json
  spdlog::cfg::load_env_levels();       // SPDLOG_LEVEL=debug shows the CBC log
  std::variant<Args, int> parsed = ParseArgs(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const Args& args = std::get<Args>(parsed);
  Result<TimingTables> measured =
      ReadTimingCsvFile(args.data + "/h100-cudnn91400-resnet50-fp32-nchw.csv");
  if (!measured.ok()) {
    std::fprintf(stderr, "%s\n", measured.status().ToString().c_str());
    return 1;
  }
  std::vector<Run> runs;
  for (const char* network : kNetworks) {
    if (!args.only.empty() && args.only != network) continue;
    for (BatchPolicy policy : {BatchPolicy::kAll, BatchPolicy::kPowerOfTwo}) {
      Result<Run> run = std::string(network) == "resnet152_perturbed"
                            ? MeasurePerturbed(policy, *measured, args.repeat, args.ilp_options)
                            : Measure(network, policy, *measured, args.repeat, args.ilp_options);
      if (!run.ok()) {
        std::fprintf(stderr, "%s: %s\n", network, run.status().ToString().c_str());
        return 1;
      }
      runs.push_back(std::move(run).value());
    }
  }
  const double peak = PeakMemoryMb();
  if (args.json) {
    std::printf("%s\n", ReportJson(runs, peak, args.repeat, args.ilp_options).dump(2).c_str());
  } else {
    PrintText(runs, peak);
  }
  return 0;
}
