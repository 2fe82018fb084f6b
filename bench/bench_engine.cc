// ucudnn-bench-engine: benchmarks whole timing tables with the worker's engine and reports
//   - the wall time of benchmarking each op (target: under 1 s median per op),
//   - with --repeat 2, how well two measurements of the same table agree (per (micro-batch,
//     algorithm) relative difference of the medians; target: median within 5%),
//   - the median ratio of our times to the measured H100 tables in data/h100/*.csv for the same
//     rows, when the shape is there.
// Usage: ucudnn-bench-engine [--json] [--backend cudnn|cpu] [--device N] [--repeat N]
//          [--batch B] [--layers resnet50_l3_3x3,alexnet_conv2] [--problem KEY]...
//          (a --problem key's op is replaced by each of --ops)
//          [--ops fwd,bwd_data,bwd_filter] [--dtype fp32|fp16] [--policy power_of_two]
//          [--workspace-cap 2GiB] [--warmup N] [--min-runs N] [--max-runs N] [--budget-ms MS]
//          [--short-run-us US] [--device-time-only] [--data-dir DIR] [--log-level info]
// --short-run-us: configurations faster than this are timed in groups of back-to-back runs
// (BenchmarkOptions::short_run_ms; default 50, 0 times every run on its own, for comparison).
// --device-time-only: those groups timed as the device alone runs them
// (BenchmarkOptions::short_runs_device_time_only), for comparison.
// With --json the report is JSON on stdout and a short summary goes to stderr.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include <vector>

#include "ucudnn/core/backend_factory.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/logging.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/units.h"
#include "ucudnn/worker/benchmark.h"

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

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> Result<std::string> {
      if (i + 1 >= argc) return InvalidArgument(flag + ": needs a value");
      return std::string(argv[++i]);
    };
    const auto integer = [&](int64_t lo, int64_t hi) -> Result<int64_t> {
      UCUDNN_ASSIGN_OR_RETURN(std::string v, value());
      try {
        size_t used = 0;
        const long long n = std::stoll(v, &used);
        if (used == v.size() && n >= lo && n <= hi) return static_cast<int64_t>(n);
      } catch (const std::exception&) {
      }
      return InvalidArgument(flag + ": must be an integer in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "], got '" + v + "'");
    };
    if (flag == "--json") {
      a.json = true;
    } else if (flag == "--backend") {
      UCUDNN_ASSIGN_OR_RETURN(a.backend, value());
    } else if (flag == "--device") {
      UCUDNN_ASSIGN_OR_RETURN(int64_t d, integer(0, 1024));
      a.device = static_cast<int>(d);
    } else if (flag == "--repeat") {
      UCUDNN_ASSIGN_OR_RETURN(int64_t r, integer(1, 100));
      a.repeat = static_cast<int>(r);
    } else if (flag == "--batch") {
      UCUDNN_ASSIGN_OR_RETURN(a.batch, integer(1, kMaxBatch));
    } else if (flag == "--layers") {
      UCUDNN_ASSIGN_OR_RETURN(std::string v, value());
      a.layers = Split(v);
    } else if (flag == "--problem") {
      UCUDNN_ASSIGN_OR_RETURN(std::string v, value());
      a.problem_keys.push_back(v);
    } else if (flag == "--ops") {
      UCUDNN_ASSIGN_OR_RETURN(std::string v, value());
      a.ops.clear();
      for (const std::string& op : Split(v)) {
        UCUDNN_ASSIGN_OR_RETURN(ConvOp parsed, ParseConvOp(op));
        a.ops.push_back(parsed);
      }
    } else if (flag == "--dtype") {
      UCUDNN_ASSIGN_OR_RETURN(std::string v, value());
      UCUDNN_ASSIGN_OR_RETURN(a.dtype, ParseDataType(v));
    } else if (flag == "--policy") {
      UCUDNN_ASSIGN_OR_RETURN(std::string v, value());
      UCUDNN_ASSIGN_OR_RETURN(a.policy, ParseBatchPolicy(v));
    } else if (flag == "--workspace-cap") {
      UCUDNN_ASSIGN_OR_RETURN(std::string v, value());
      UCUDNN_ASSIGN_OR_RETURN(a.options.workspace_cap_bytes, ParseByteSize(v));
    } else if (flag == "--warmup") {
      UCUDNN_ASSIGN_OR_RETURN(int64_t n, integer(1, 1000));
      a.options.warmup_runs = static_cast<int>(n);
    } else if (flag == "--prune-margin") {
      UCUDNN_ASSIGN_OR_RETURN(std::string v, value());
      try {
        a.options.prune_margin = std::stod(v);
      } catch (const std::exception&) {
        return InvalidArgument("--prune-margin: a number (negative: no probe pruning), got '" + v +
                               "'");
      }
    } else if (flag == "--prepare-threads") {
      UCUDNN_ASSIGN_OR_RETURN(int64_t n, integer(1, 256));
      a.options.prepare_threads = static_cast<int>(n);
    } else if (flag == "--device-time-only") {
      a.options.short_runs_device_time_only = true;
    } else if (flag == "--short-run-us") {
      UCUDNN_ASSIGN_OR_RETURN(int64_t n, integer(0, 1'000'000));
      a.options.short_run_ms = static_cast<double>(n) / 1000.0;
    } else if (flag == "--min-runs") {
      UCUDNN_ASSIGN_OR_RETURN(int64_t n, integer(1, 10000));
      a.options.min_runs = static_cast<int>(n);
    } else if (flag == "--max-runs") {
      UCUDNN_ASSIGN_OR_RETURN(int64_t n, integer(1, 10000));
      a.options.max_runs = static_cast<int>(n);
    } else if (flag == "--budget-ms") {
      UCUDNN_ASSIGN_OR_RETURN(int64_t n, integer(1, 3'600'000));
      a.options.config_time_budget_ms = static_cast<double>(n);
    } else if (flag == "--data-dir") {
      UCUDNN_ASSIGN_OR_RETURN(a.data_dir, value());
    } else if (flag == "--log-level") {
      UCUDNN_ASSIGN_OR_RETURN(a.log_level, value());
    } else if (flag == "--help" || flag == "-h") {
      return InvalidArgument("help");
    } else {
      return InvalidArgument("unknown flag '" + flag + "'");
    }
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

int Run(int argc, char** argv) {
  Result<Args> parsed = ParseArgs(argc, argv);
  if (!parsed.ok()) {
    if (parsed.status().message() != "help") {
      std::fprintf(stderr, "ucudnn-bench-engine: %s\n", parsed.status().message().c_str());
    }
    std::fprintf(stderr,
                 "usage: ucudnn-bench-engine [--json] [--backend cudnn|cpu] [--device N] "
                 "[--repeat N] [--batch B] [--layers a,b] [--problem KEY] [--ops fwd,...] "
                 "[--dtype fp32|fp16] [--policy power_of_two|all|undivided] [--workspace-cap "
                 "2GiB] [--warmup N] [--min-runs N] [--max-runs N] [--budget-ms MS] "
                 "[--short-run-us US] [--device-time-only] [--data-dir DIR] [--log-level LEVEL]\n");
    return 2;
  }
  Args args = *parsed;
  // Logs go to stderr: stdout carries the JSON report.
  LogToStderr("ucudnn-bench-engine");
  spdlog::set_level(spdlog::level::from_str(args.log_level));
  if (args.data_dir.empty()) {
    args.data_dir = std::filesystem::is_directory("data/h100")
                        ? "data/h100"
                        : std::string(UCUDNN_SOURCE_DIR) + "/data/h100";
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
  ConvBackend& b = **backend;
  const DeviceFingerprint& fp = b.fingerprint();

  struct Measurement {
    std::string layer;
    ConvProblem problem;
    std::vector<double> wall_s;
    std::vector<TimingTable> tables;
  };
  std::vector<Measurement> measurements;
  for (const NamedProblem& np : *problems) {
    for (ConvOp op : args.ops) {
      ConvProblem p = np.problem;
      p.op = op;
      measurements.push_back({np.name, p, {}, {}});
    }
  }
  // Repeats are the outer loop, so two measurements of one table are minutes, not
  // milliseconds, apart.
  for (int r = 0; r < args.repeat; ++r) {
    for (Measurement& m : measurements) {
      const auto start = std::chrono::steady_clock::now();
      Result<TimingTable> table =
          BenchmarkProblem(b, m.problem, args.batch, args.policy, args.options);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!table.ok()) {
        std::fprintf(stderr, "ucudnn-bench-engine: %s %s: %s\n", m.layer.c_str(),
                     std::string(ToString(m.problem.op)).c_str(),
                     table.status().ToString().c_str());
        return 1;
      }
      m.wall_s.push_back(wall);
      m.tables.push_back(std::move(*table));
    }
  }

  Json report;
  report["benchmark"] = "engine";
  report["backend"] = args.backend;
  report["device"] = {{"key", fp.Key()},
                      {"name", fp.name},
                      {"cc", std::to_string(fp.cc_major) + "." + std::to_string(fp.cc_minor)},
                      {"cudnn_version", fp.cudnn_version},
                      {"cuda_runtime_version", fp.cuda_runtime_version}};
  report["options"] = {{"mini_batch", args.batch},
                       {"policy", ToString(args.policy)},
                       {"repeat", args.repeat},
                       {"warmup_runs", args.options.warmup_runs},
                       {"min_runs", args.options.min_runs},
                       {"max_runs", args.options.max_runs},
                       {"target_relative_spread", args.options.target_relative_spread},
                       {"config_time_budget_ms", args.options.config_time_budget_ms},
                       {"workspace_cap_bytes", args.options.workspace_cap_bytes},
                       {"short_run_ms", args.options.short_run_ms},
                       {"short_runs_device_time_only", args.options.short_runs_device_time_only},
                       {"group_target_ms", args.options.group_target_ms},
                       {"max_group", args.options.max_group},
                       {"data_dir", args.data_dir}};
  Json ops = Json::array();
  std::vector<double> all_walls, first_walls, agreement_medians, all_diffs, reference_ratios;
  std::string summary;
  char line[512];
  std::snprintf(line, sizeof(line), "%-18s %-10s %6s %6s %10s %10s %10s %8s\n", "layer", "op", "ok",
                "total", "wall_s", "agree_med", "ref_ratio", "ref_rows");
  summary += line;
  for (const Measurement& m : measurements) {
    Json op_json;
    op_json["layer"] = m.layer;
    op_json["op"] = ToString(m.problem.op);
    op_json["problem"] = CanonicalKey(m.problem);
    op_json["wall_s"] = m.wall_s;
    all_walls.insert(all_walls.end(), m.wall_s.begin(), m.wall_s.end());
    first_walls.push_back(m.wall_s.front());
    const TimingTable& first = m.tables.front();
    int ok = 0;
    for (const Timing& t : first.entries) ok += t.status == TimingStatus::kOk;
    op_json["entries"] = first.entries.size();
    op_json["ok"] = ok;

    // Agreement between the first two measurements of the table, over the configurations both
    // measured with the full protocol (a configuration dominated at the probe keeps one sample: it
    // says "slower than another", not a time to repeat).
    double agree_median = std::nan("");
    if (m.tables.size() >= 2) {
      using Key = std::tuple<int64_t, int, std::string>;
      std::map<Key, double> a;
      for (const Timing& t : m.tables[0].entries) {
        if (t.status == TimingStatus::kOk && t.samples > 1) {
          a[{t.micro_batch, t.algo, t.engine_config}] = t.time_ms;
        }
      }
      std::vector<double> diffs;
      for (const Timing& t : m.tables[1].entries) {
        auto it = a.find({t.micro_batch, t.algo, t.engine_config});
        if (t.status != TimingStatus::kOk || t.samples <= 1 || it == a.end()) continue;
        diffs.push_back(std::abs(t.time_ms - it->second) / (0.5 * (t.time_ms + it->second)));
      }
      agree_median = Median(diffs);
      if (std::isfinite(agree_median)) agreement_medians.push_back(agree_median);
      all_diffs.insert(all_diffs.end(), diffs.begin(), diffs.end());
      const auto within =
          std::count_if(diffs.begin(), diffs.end(), [](double d) { return d <= 0.05; });
      op_json["agreement"] = {{"pairs", diffs.size()},
                              {"median_rel_diff", NumberOrNull(agree_median)},
                              {"p90_rel_diff", NumberOrNull(Percentile(diffs, 0.9))},
                              {"max_rel_diff", NumberOrNull(Percentile(diffs, 1.0))},
                              {"within_5pct", within}};
    }

    // Against the measured H100 table, row by row.
    std::string source;
    // The tables were measured with cuDNN on an H100: a CPU run has nothing to compare with.
    const ReferenceRows ref =
        fp.backend == "cudnn" ? LoadReference(args.data_dir, m.problem, &source) : ReferenceRows{};
    std::vector<double> ratios;
    int workspace_mismatches = 0;
    for (const Timing& t : first.entries) {
      if (t.status != TimingStatus::kOk || !t.engine_config.empty()) continue;  // legacy rows
      auto it = ref.find({std::string(ToString(m.problem.op)), t.micro_batch, t.algo});
      if (it == ref.end() || it->second.first <= 0) continue;
      ratios.push_back(t.time_ms / it->second.first);
      workspace_mismatches += t.workspace_bytes != it->second.second;
    }
    const double ref_ratio = Median(ratios);
    if (std::isfinite(ref_ratio)) reference_ratios.push_back(ref_ratio);
    if (!ref.empty()) {
      op_json["reference"] = {{"file", source},
                              {"rows_matched", ratios.size()},
                              {"median_ratio_ours_over_reference", NumberOrNull(ref_ratio)},
                              {"p10_ratio", NumberOrNull(Percentile(ratios, 0.1))},
                              {"p90_ratio", NumberOrNull(Percentile(ratios, 0.9))},
                              {"workspace_mismatches", workspace_mismatches}};
    }
    Json tables = Json::array();
    for (const TimingTable& t : m.tables) tables.push_back(TableJson(t));
    op_json["tables"] = tables;
    ops.push_back(op_json);

    std::snprintf(line, sizeof(line), "%-18s %-10s %6d %6zu %10.3f %10.4f %10.3f %8zu\n",
                  m.layer.c_str(), std::string(ToString(m.problem.op)).c_str(), ok,
                  first.entries.size(), m.wall_s.front(), agree_median, ref_ratio, ratios.size());
    summary += line;
  }
  report["ops"] = ops;
  const double median_wall = Median(all_walls);
  const double median_agreement = Median(all_diffs);
  report["summary"] = {
      {"median_wall_s_per_op", NumberOrNull(median_wall)},
      {"median_wall_s_per_op_first_repeat", NumberOrNull(Median(first_walls))},
      {"target_wall_s_per_op", 1.0},
      {"meets_wall_target", std::isfinite(median_wall) && median_wall < 1.0},
      {"median_rel_diff_between_repeats", NumberOrNull(median_agreement)},
      {"target_rel_diff", 0.05},
      {"meets_agreement_target",
       std::isfinite(median_agreement) ? Json(median_agreement <= 0.05) : Json(nullptr)},
      {"median_ratio_ours_over_reference", NumberOrNull(Median(reference_ratios))}};
  std::snprintf(line, sizeof(line),
                "median wall per op %.3f s (target < 1 s); median repeat difference %.4f (target "
                "<= 0.05); median ratio ours/reference %.3f\n",
                median_wall, median_agreement, Median(reference_ratios));
  summary += line;

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
