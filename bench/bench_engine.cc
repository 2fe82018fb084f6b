// ucudnn-bench-engine: benchmarks whole timing tables with the worker's engine and reports
//   - the wall time of benchmarking each op (target: under 1 s median per op),
//   - with --repeat 2, how well two measurements of the same table agree (per (micro-batch,
//     algorithm) relative difference of the medians; target: median within 5%),
//   - the median ratio of our times to the measured H100 tables in data/h100/*.csv for the same
//     rows, when the shape is there.
// `ucudnn-bench-engine --help` lists the flags. With --json the report is JSON on stdout and a
// short summary goes to stderr.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "pruning_replay.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/logging.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/units.h"
#include "ucudnn/engine/benchmark.h"

namespace ucudnn {
namespace {

using Json = nlohmann::ordered_json;

struct NamedProblem {
  std::string name;
  ConvProblem problem;  // op set per measurement
};

ConvProblem Conv(int64_t c, int64_t hw, int64_t k, int64_t rs, int64_t pad, int64_t stride) {
  ConvProblem p;
  p.c = c;
  p.h = p.w = hw;
  p.k = k;
  p.r = p.s = rs;
  p.pad_h = p.pad_w = pad;
  p.stride_h = p.stride_w = stride;
  return p;
}

const std::map<std::string, ConvProblem>& KnownLayers() {
  static const std::map<std::string, ConvProblem> layers = {
      {"resnet50_l3_3x3", Conv(256, 14, 256, 3, 1, 1)},
      {"alexnet_conv2", Conv(64, 27, 192, 5, 2, 1)},  // torchvision's AlexNet
      {"resnet50_conv1", Conv(3, 224, 64, 7, 3, 2)},
      {"resnet50_l1_3x3", Conv(64, 56, 64, 3, 1, 1)},
      {"resnet50_l4_3x3", Conv(512, 7, 512, 3, 1, 1)},
  };
  return layers;
}

struct Args {
  bool json = false;
  bool replay_pruning = false;
  bool replay_sizes = false;
  double probe_noise = 0.03;
  std::string backend = "cudnn";
  int device = 0;
  int repeat = 1;
  int64_t batch = 0;  // 0: 256 on cudnn, 8 on cpu
  std::vector<std::string> layers = {"resnet50_l3_3x3", "alexnet_conv2"};
  std::vector<std::string> problem_keys;
  std::vector<ConvOp> ops = {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter};
  DataType dtype = DataType::kFloat32;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  BenchmarkOptions options;
  std::string data_dir;
  std::string log_level = "info";
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// An option whose text one of the core's parsers reads (byte sizes, enum names); a parse error
// is CLI11's, naming the flag.
template <typename T>
CLI::Option* AddParsed(CLI::App& app, const std::string& name, T& target,
                       Result<T> (*parse)(std::string_view), const std::string& help) {
  return app.add_option_function<std::string>(
      name,
      [name, &target, parse](const std::string& text) {
        Result<T> value = parse(text);
        if (!value.ok()) throw CLI::ValidationError(name, value.status().message());
        target = *value;
      },
      help);
}

// The problems: which layers, ops, precision and mini-batch.
void AddProblemFlags(CLI::App& app, Args& a) {
  std::string known;
  for (const auto& [name, problem] : KnownLayers()) known += (known.empty() ? "" : ", ") + name;
  app.add_option("--layers", a.layers, "comma-separated layers to benchmark (" + known + ")")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--problem", a.problem_keys,
                 "a problem's canonical key, benchmarked for each of --ops (repeatable)");
  app.add_option_function<std::string>(
         "--ops",
         [&a](const std::string& text) {
           a.ops.clear();
           for (const std::string& op : Split(text)) {
             Result<ConvOp> parsed = ParseConvOp(op);
             if (!parsed.ok()) throw CLI::ValidationError("--ops", parsed.status().message());
             a.ops.push_back(*parsed);
           }
         },
         "comma-separated ops: fwd, bwd_data, bwd_filter")
      ->default_str("fwd,bwd_data,bwd_filter");
  AddParsed(app, "--dtype", a.dtype, &ParseDataType,
            "fp32 (NCHW) or fp16 (NHWC, tensor cores, as mixed-precision training runs it)")
      ->default_str("fp32");
  app.add_option("--batch", a.batch, "mini-batch size (default: 256 on cudnn, 8 on cpu)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch));
  AddParsed(app, "--policy", a.policy, &ParseBatchPolicy,
            "micro-batch sizes: power_of_two, all or undivided")
      ->default_str("power_of_two");
}

// The benchmark engine's protocol (BenchmarkOptions).
void AddProtocolFlags(CLI::App& app, BenchmarkOptions& o) {
  AddParsed(app, "--workspace-cap", o.workspace_cap_bytes, &ParseByteSize,
            "largest workspace measured (e.g. 2GiB, 512MiB)")
      ->default_str(FormatBytes(o.workspace_cap_bytes));
  app.add_option("--warmup", o.warmup_runs, "untimed runs per configuration")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--min-runs", o.min_runs, "timed runs per configuration, at least")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--max-runs", o.max_runs,
                 "timed runs per configuration, at most (raised to --min-runs)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option_function<int64_t>(
         "--budget-ms", [&o](int64_t ms) { o.config_time_budget_ms = static_cast<double>(ms); },
         "wall time per configuration for timed runs, milliseconds")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}))
      ->default_str(std::to_string(std::llround(o.config_time_budget_ms)));
  app.add_option("--prune-margin", o.prune_margin,
                 "probe pruning: a configuration another of its size beats by more than this "
                 "fraction with at most its workspace keeps its probe only (negative: off)")
      ->capture_default_str();
  app.add_option("--skip-factor", o.skip_factor,
                 "skipping across sizes: a configuration this many times slower than another of "
                 "its size with at most its workspace is not run at the next size (<= 0: off)")
      ->capture_default_str();
  app.add_option("--split-skip-factor", o.split_skip_factor,
                 "skipping where micro-batches do better, in grouped problems: a configuration is "
                 "not run at the larger sizes where micro-batches of a smaller size's fastest "
                 "configuration (with at most its workspace) take less than 1/this of its probe "
                 "(<= 0: off)")
      ->capture_default_str();
  app.add_option("--usable-margin", o.usable_margin,
                 "every size probed before any is measured, and only entries a fastest plan of "
                 "the largest size could run, were they this fraction faster, take the full "
                 "protocol (BenchmarkOptions::usable_margin; negative: every size measured)")
      ->capture_default_str();
  app.add_option("--probe-batch-ms", o.probe_batch_ms,
                 "probes of a size queued on the device together, about this much device time a "
                 "batch (BenchmarkOptions::probe_batch_ms; 0: one configuration at a time)")
      ->check(CLI::Range(0.0, 3.6e6))
      ->capture_default_str();
  app.add_option("--prepare-threads", o.prepare_threads,
                 "host threads that build every micro-batch size's candidates before the timed "
                 "runs (BenchmarkOptions::prepare_threads; 1: one size at a time)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option_function<int64_t>(
         "--short-run-us", [&o](int64_t us) { o.short_run_ms = static_cast<double>(us) / 1000.0; },
         "configurations faster than this are timed in groups of back-to-back runs "
         "(BenchmarkOptions::short_run_ms; 0 times every run on its own, for comparison)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}))
      ->default_str(std::to_string(std::llround(o.short_run_ms * 1000.0)));
  app.add_flag("--device-time-only", o.short_runs_device_time_only,
               "time those groups as the device alone runs them "
               "(BenchmarkOptions::short_runs_device_time_only), for comparison");
}

// The parsed flags, or the exit status: 0 after --help, 2 for bad flags (CLI11's message).
std::variant<Args, int> ParseArgs(int argc, char** argv) {
  Args a;
  CLI::App app(
      "ucudnn-bench-engine: benchmarks whole timing tables with the worker's engine and reports "
      "the wall time per op, the agreement of repeated measurements and the ratio to the measured "
      "H100 tables (data/h100). With --json the report is JSON on stdout, a summary on stderr.",
      "ucudnn-bench-engine");
  app.add_flag("--json", a.json, "print the report as JSON on stdout");
  app.add_option("--backend", a.backend, "cudnn or cpu")
      ->check(CLI::IsMember({"cudnn", "cpu"}))
      ->capture_default_str();
  app.add_option("--device", a.device, "GPU index")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--repeat", a.repeat,
                 "measurements of each table (2: how well they agree), minutes apart")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  AddProblemFlags(app, a);
  AddProtocolFlags(app, a.options);
  app.add_option("--data-dir", a.data_dir,
                 "the measured H100 tables to compare with (default: data/h100 here, else the "
                 "source tree's)");
  app.add_flag("--replay-pruning", a.replay_pruning,
               "no measurement: replay the worker's pruning and skipping on the measured tables "
               "of --data-dir against the exhaustive search (search cost, planned step time), "
               "as JSON");
  app.add_flag("--replay-sizes", a.replay_sizes,
               "no measurement: per workspace limit, the micro-batch sizes a limit-aware search "
               "would time on the measured tables of --data-dir, and the plans from them against "
               "the plans from every size, as JSON");
  app.add_option("--probe-noise", a.probe_noise,
                 "with --replay-pruning: each replayed sample is the row's time times 1 + a "
                 "uniform error within this fraction (an idle GPU's spread)")
      ->capture_default_str();
  app.add_option("--log-level", a.log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember(
          {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (a.options.max_runs < a.options.min_runs) a.options.max_runs = a.options.min_runs;
  if (a.batch == 0) a.batch = a.backend == "cpu" ? 8 : 256;
  return a;
}

Result<std::vector<NamedProblem>> SelectProblems(const Args& args) {
  std::vector<NamedProblem> problems;
  for (const std::string& name : args.layers) {
    auto it = KnownLayers().find(name);
    if (it == KnownLayers().end()) {
      std::string known;
      for (const auto& [n, p] : KnownLayers()) known += (known.empty() ? "" : ", ") + n;
      return InvalidArgument("--layers: unknown layer '" + name + "' (known: " + known + ")");
    }
    ConvProblem p = it->second;
    p.data_type = args.dtype;
    p.compute_type = DataType::kFloat32;
    // fp16 the way mixed-precision training runs it (and the fp16 reference table): NHWC,
    // tensor cores.
    p.layout = args.dtype == DataType::kFloat32 ? Layout::kNCHW : Layout::kNHWC;
    p.math = args.dtype == DataType::kFloat32 ? MathMode::kDefault : MathMode::kTensorOp;
    problems.push_back({name, p});
  }
  for (size_t i = 0; i < args.problem_keys.size(); ++i) {
    UCUDNN_ASSIGN_OR_RETURN(ConvProblem p, ParseCanonicalKey(args.problem_keys[i]));
    problems.push_back({"problem" + std::to_string(i + 1), p});  // the key is in the JSON
  }
  return problems;
}

// ---- the measured H100 tables ------------------------------------------------------------------

// (op, micro_batch, algo) -> (time_ms, workspace_bytes) of the rows matching one problem.
using ReferenceRows = std::map<std::tuple<std::string, int64_t, int>, std::pair<double, uint64_t>>;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Columns: layer,n,c,h,w,k,r,s,pad,stride,dtype,layout,op,micro_batch,algo,time_ms,
// workspace_bytes (square filters, symmetric padding and stride, no dilation, one group).
ReferenceRows LoadReference(const std::string& dir, const ConvProblem& p, std::string* source) {
  ReferenceRows rows;
  if (dir.empty() || !std::filesystem::is_directory(dir)) return rows;
  if (p.r != p.s || p.pad_h != p.pad_w || p.stride_h != p.stride_w || p.h != p.w ||
      p.dilation_h != 1 || p.dilation_w != 1 || p.groups != 1) {
    return rows;
  }
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".csv") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream ls(line);
      std::string cell;
      while (std::getline(ls, cell, ',')) f.push_back(cell);
      if (f.size() < 17) continue;
      try {
        if (std::stoll(f[2]) != p.c || std::stoll(f[3]) != p.h || std::stoll(f[4]) != p.w ||
            std::stoll(f[5]) != p.k || std::stoll(f[6]) != p.r || std::stoll(f[8]) != p.pad_h ||
            std::stoll(f[9]) != p.stride_h || Lower(f[10]) != ToString(p.data_type) ||
            Lower(f[11]) != ToString(p.layout)) {
          continue;
        }
        rows[{f[12], std::stoll(f[13]), std::stoi(f[14])}] = {std::stod(f[15]), std::stoull(f[16])};
        *source = file.filename().string();
      } catch (const std::exception&) {
        continue;  // a malformed row is not a reference
      }
    }
  }
  return rows;
}

double Median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::round(q * static_cast<double>(v.size() - 1)))];
}

Json NumberOrNull(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

Json TableJson(const TimingTable& table) {
  Json rows = Json::array();
  for (const Timing& t : table.entries) {
    Json row = {{"micro_batch", t.micro_batch},
                {"algo", t.algo},
                {"engine_config", t.engine_config},
                {"status", ToString(t.status)},
                {"time_ms", t.time_ms},
                {"spread_ms", t.spread_ms},
                {"samples", t.samples},
                {"workspace_bytes", t.workspace_bytes}};
    if (!t.error.empty()) row["error"] = t.error;
    rows.push_back(row);
  }
  return rows;
}

// ---- measuring ---------------------------------------------------------------------------------

struct Measurement {
  std::string layer;
  ConvProblem problem;
  std::vector<double> wall_s;
  std::vector<TimingTable> tables;
};

// Every problem with each op, measured `args.repeat` times. Repeats are the outer loop, so two
// measurements of one table are minutes, not milliseconds, apart.
Result<std::vector<Measurement>> MeasureAll(ConvBackend& backend,
                                            const std::vector<NamedProblem>& problems,
                                            const Args& args) {
  std::vector<Measurement> measurements;
  for (const NamedProblem& np : problems) {
    for (ConvOp op : args.ops) {
      ConvProblem p = np.problem;
      p.op = op;
      measurements.push_back({np.name, p, {}, {}});
    }
  }
  for (int r = 0; r < args.repeat; ++r) {
    for (Measurement& m : measurements) {
      const auto start = std::chrono::steady_clock::now();
      Result<TimingTable> table =
          BenchmarkProblem(backend, m.problem, args.batch, args.policy, args.options);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!table.ok()) {
        return table.status().WithContext(m.layer + " " + std::string(ToString(m.problem.op)));
      }
      m.wall_s.push_back(wall);
      m.tables.push_back(std::move(*table));
    }
  }
  return measurements;
}

// ---- the report --------------------------------------------------------------------------------

// Relative differences between the first two measurements of the table, over the configurations
// both measured with the full protocol (a configuration dominated at the probe keeps one sample:
// it says "slower than another", not a time to repeat). Empty with one measurement.
std::vector<double> RepeatDifferences(const Measurement& m) {
  std::vector<double> diffs;
  if (m.tables.size() < 2) return diffs;
  using Key = std::tuple<int64_t, int, std::string>;
  std::map<Key, double> first;
  for (const Timing& t : m.tables[0].entries) {
    if (t.status == TimingStatus::kOk && t.samples > 1) {
      first[{t.micro_batch, t.algo, t.engine_config}] = t.time_ms;
    }
  }
  for (const Timing& t : m.tables[1].entries) {
    auto it = first.find({t.micro_batch, t.algo, t.engine_config});
    if (t.status != TimingStatus::kOk || t.samples <= 1 || it == first.end()) continue;
    diffs.push_back(std::abs(t.time_ms - it->second) / (0.5 * (t.time_ms + it->second)));
  }
  return diffs;
}

Json AgreementJson(const std::vector<double>& diffs) {
  const auto within = std::count_if(diffs.begin(), diffs.end(), [](double d) { return d <= 0.05; });
  return {{"pairs", diffs.size()},
          {"median_rel_diff", NumberOrNull(Median(diffs))},
          {"p90_rel_diff", NumberOrNull(Percentile(diffs, 0.9))},
          {"max_rel_diff", NumberOrNull(Percentile(diffs, 1.0))},
          {"within_5pct", within}};
}

// The first table against the measured H100 table, row by row (legacy algorithms only).
struct ReferenceComparison {
  std::string file;
  bool found = false;  // the reference has rows of this problem
  std::vector<double> ratios;
  int workspace_mismatches = 0;
};

ReferenceComparison CompareWithReference(const Measurement& m, const DeviceFingerprint& fp,
                                         const std::string& data_dir) {
  ReferenceComparison c;
  // The tables were measured with cuDNN on an H100: a CPU run has nothing to compare with.
  if (fp.backend != "cudnn") return c;
  const ReferenceRows ref = LoadReference(data_dir, m.problem, &c.file);
  c.found = !ref.empty();
  for (const Timing& t : m.tables.front().entries) {
    if (t.status != TimingStatus::kOk || !t.engine_config.empty()) continue;  // legacy rows
    auto it = ref.find({std::string(ToString(m.problem.op)), t.micro_batch, t.algo});
    if (it == ref.end() || it->second.first <= 0) continue;
    c.ratios.push_back(t.time_ms / it->second.first);
    c.workspace_mismatches += t.workspace_bytes != it->second.second;
  }
  return c;
}

Json ReferenceJson(const ReferenceComparison& c) {
  return {{"file", c.file},
          {"rows_matched", c.ratios.size()},
          {"median_ratio_ours_over_reference", NumberOrNull(Median(c.ratios))},
          {"p10_ratio", NumberOrNull(Percentile(c.ratios, 0.1))},
          {"p90_ratio", NumberOrNull(Percentile(c.ratios, 0.9))},
          {"workspace_mismatches", c.workspace_mismatches}};
}

// What the summary gathers over every op.
struct Totals {
  std::vector<double> walls, first_walls, diffs, reference_ratios;
};

Json DeviceJson(const DeviceFingerprint& fp) {
  return {{"key", fp.Key()},
          {"name", fp.name},
          {"cc", std::to_string(fp.cc_major) + "." + std::to_string(fp.cc_minor)},
          {"cudnn_version", fp.cudnn_version},
          {"cuda_runtime_version", fp.cuda_runtime_version}};
}

Json OptionsJson(const Args& args) {
  const BenchmarkOptions& o = args.options;
  return {{"mini_batch", args.batch},
          {"policy", ToString(args.policy)},
          {"repeat", args.repeat},
          {"warmup_runs", o.warmup_runs},
          {"min_runs", o.min_runs},
          {"max_runs", o.max_runs},
          {"target_relative_spread", o.target_relative_spread},
          {"config_time_budget_ms", o.config_time_budget_ms},
          {"workspace_cap_bytes", o.workspace_cap_bytes},
          {"short_run_ms", o.short_run_ms},
          {"short_runs_device_time_only", o.short_runs_device_time_only},
          {"group_target_ms", o.group_target_ms},
          {"probe_group_target_ms", o.probe_group_target_ms},
          {"max_group", o.max_group},
          {"data_dir", args.data_dir}};
}

std::string Line(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Line(const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  return line;
}

// One op's entry of the report; its row of the text summary goes to `summary`, its numbers to
// `totals`.
Json OpJson(const Measurement& m, const DeviceFingerprint& fp, const std::string& data_dir,
            Totals& totals, std::string& summary) {
  Json op_json;
  op_json["layer"] = m.layer;
  op_json["op"] = ToString(m.problem.op);
  op_json["problem"] = CanonicalKey(m.problem);
  op_json["wall_s"] = m.wall_s;
  totals.walls.insert(totals.walls.end(), m.wall_s.begin(), m.wall_s.end());
  totals.first_walls.push_back(m.wall_s.front());
  const TimingTable& first = m.tables.front();
  int ok = 0;
  for (const Timing& t : first.entries) ok += t.status == TimingStatus::kOk;
  op_json["entries"] = first.entries.size();
  op_json["ok"] = ok;

  const std::vector<double> diffs = RepeatDifferences(m);
  if (m.tables.size() >= 2) op_json["agreement"] = AgreementJson(diffs);
  totals.diffs.insert(totals.diffs.end(), diffs.begin(), diffs.end());

  const ReferenceComparison ref = CompareWithReference(m, fp, data_dir);
  const double ref_ratio = Median(ref.ratios);
  if (std::isfinite(ref_ratio)) totals.reference_ratios.push_back(ref_ratio);
  if (ref.found) op_json["reference"] = ReferenceJson(ref);

  Json tables = Json::array();
  for (const TimingTable& t : m.tables) tables.push_back(TableJson(t));
  op_json["tables"] = tables;

  summary += Line("%-18s %-10s %6d %6zu %10.3f %10.4f %10.3f %8zu\n", m.layer.c_str(),
                  std::string(ToString(m.problem.op)).c_str(), ok, first.entries.size(),
                  m.wall_s.front(), Median(diffs), ref_ratio, ref.ratios.size());
  return op_json;
}

Json SummaryJson(const Totals& totals, std::string& summary) {
  const double median_wall = Median(totals.walls);
  const double median_agreement = Median(totals.diffs);
  const double median_ratio = Median(totals.reference_ratios);
  summary += Line(
      "median wall per op %.3f s (target < 1 s); median repeat difference %.4f (target <= 0.05); "
      "median ratio ours/reference %.3f\n",
      median_wall, median_agreement, median_ratio);
  return {{"median_wall_s_per_op", NumberOrNull(median_wall)},
          {"median_wall_s_per_op_first_repeat", NumberOrNull(Median(totals.first_walls))},
          {"target_wall_s_per_op", 1.0},
          {"meets_wall_target", std::isfinite(median_wall) && median_wall < 1.0},
          {"median_rel_diff_between_repeats", NumberOrNull(median_agreement)},
          {"target_rel_diff", 0.05},
          {"meets_agreement_target",
           std::isfinite(median_agreement) ? Json(median_agreement <= 0.05) : Json(nullptr)},
          {"median_ratio_ours_over_reference", NumberOrNull(median_ratio)}};
}

// The JSON report, and the text summary beside it.
std::pair<Json, std::string> Report(const Args& args, const DeviceFingerprint& fp,
                                    const std::vector<Measurement>& measurements) {
  Json report;
  report["benchmark"] = "engine";
  report["backend"] = args.backend;
  report["device"] = DeviceJson(fp);
  report["options"] = OptionsJson(args);
  std::string summary = Line("%-18s %-10s %6s %6s %10s %10s %10s %8s\n", "layer", "op", "ok",
                             "total", "wall_s", "agree_med", "ref_ratio", "ref_rows");
  Totals totals;
  Json ops = Json::array();
  for (const Measurement& m : measurements) {
    ops.push_back(OpJson(m, fp, args.data_dir, totals, summary));
  }
  report["ops"] = ops;
  report["summary"] = SummaryJson(totals, summary);
  return {report, summary};
}

int Run(int argc, char** argv) {
  std::variant<Args, int> parsed = ParseArgs(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  Args& args = std::get<Args>(parsed);
  // Logs go to stderr: stdout carries the JSON report.
  LogToStderr("ucudnn-bench-engine");
  spdlog::set_level(spdlog::level::from_str(args.log_level));
  if (args.data_dir.empty()) {
    args.data_dir = std::filesystem::is_directory("data/h100")
                        ? "data/h100"
                        : std::string(UCUDNN_SOURCE_DIR) + "/data/h100";
  }
  if (args.replay_pruning || args.replay_sizes) {
    Result<nlohmann::ordered_json> replay =
        args.replay_sizes ? ReplaySizes(args.data_dir)
                          : ReplayPruning(args.data_dir, args.probe_noise, args.options);
    if (!replay.ok()) {
      std::fprintf(stderr, "ucudnn-bench-engine: %s\n", replay.status().ToString().c_str());
      return 1;
    }
    std::cout << replay->dump(2) << std::endl;
    return 0;
  }
  Result<std::vector<NamedProblem>> problems = SelectProblems(args);
  if (!problems.ok()) {
    std::fprintf(stderr, "ucudnn-bench-engine: %s\n", problems.status().message().c_str());
    return 2;
  }
  Result<std::unique_ptr<ConvBackend>> backend = MakeBackend(args.backend, args.device);
  if (!backend.ok()) {
    std::fprintf(stderr, "ucudnn-bench-engine: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  Result<std::vector<Measurement>> measurements = MeasureAll(**backend, *problems, args);
  if (!measurements.ok()) {
    std::fprintf(stderr, "ucudnn-bench-engine: %s\n", measurements.status().ToString().c_str());
    return 1;
  }
  const DeviceFingerprint& fp = (*backend)->fingerprint();
  const auto [report, summary] = Report(args, fp, *measurements);
  const std::string header = "device: " + fp.Key() + "\n";
  if (args.json) {
    std::cout << report.dump(2) << std::endl;
    std::cerr << header << summary;
  } else {
    std::cout << header << summary;
  }
  return 0;
}

}  // namespace
}  // namespace ucudnn

int main(int argc, char** argv) { return ucudnn::Run(argc, argv); }
