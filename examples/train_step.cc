// ucudnn-example-train-step: the convolutions of one training step of a network (forward over
// the layers, then backward-data and backward-filter in reverse), timed without the library and
// with it, for several per-kernel workspace limits and one total budget, beside the plan's
// predicted time.
//
//   ucudnn-example-train-step                                  # ResNet-50, batch 256, cuDNN
//       --offline-timings data/h100/h100-cudnn91400-resnet50-fp32-nchw.csv
//   ucudnn-example-train-step --server planner:7000 --json
//   ucudnn-example-train-step --backend cpu --network alexnet --batch 2 --measure
//   ucudnn-example-train-step --help                           # every flag
//
// Plans come from --server (a planner server), or from a planner run inside this process over
// --offline-timings files or over timings it measures itself (--measure). Without any of them
// the library only falls back (the predicted time is then absent).
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "train_step_engine.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/logging.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/random_fill.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/core/units.h"
#include "ucudnn/planner/planner.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::example {

std::string KernelKey(const ConvProblem& problem, int64_t mini_batch) {
  return CanonicalKey(problem) + "@" + std::to_string(mini_batch);
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

namespace {

struct Options {
  std::string backend = "cudnn";
  std::string network = "resnet50";
  int64_t batch = 256;
  std::vector<uint64_t> limits_mib = {8, 64, 256};
  uint64_t total_budget_mib = 1024;
  std::string total_mode = "total";  // as ParseWorkspaceModeChoice reads it
  WorkspaceMode total_workspace_mode = WorkspaceMode::kTotalShared;
  std::string dtype, layout, math;  // as ParseNetworkPrecision reads them
  NetworkPrecision precision;
  std::string policy = "power_of_two";
  BatchPolicy batch_policy = BatchPolicy::kPowerOfTwo;
  std::string algorithms = "all";  // the candidates plans may use: all, legacy, engines
  std::string server;
  std::vector<std::string> offline_timings;
  bool measure = false;
  int measure_warmup = 1;
  int measure_runs = 3;
  int steps = 3;
  int warmup = 1;
  int64_t plan_wait_s = 60;
  bool find_baseline = false;
  bool per_kernel = false;
  bool json = false;
};

void AddNetworkFlags(CLI::App& app, Options& o) {
  app.add_option("--backend", o.backend,
                 "convolution backend: cudnn, or cpu (runs the library's session)")
      ->check(CLI::IsMember({"cudnn", "cpu"}))
      ->capture_default_str();
  app.add_option("--network", o.network, "alexnet, resnet50, ...")->capture_default_str();
  app.add_option("--batch", o.batch, "mini-batch")
      ->check(CLI::Range(int64_t{1}, kMaxBatch))
      ->capture_default_str();
  app.add_option("--dtype", o.dtype,
                 "data type of the network's tensors: fp32 (default), fp16 or bf16; compute fp32");
  app.add_option("--layout", o.layout, "nchw or nhwc (default nchw for fp32, nhwc for fp16, bf16)");
  app.add_option("--math", o.math,
                 "default, tensor_op, tensor_op_allow_conversion or fma (default: default for "
                 "fp32, tensor_op for fp16 and bf16)");
}

// Workspace sizes in MiB up to 1 PiB: their byte counts stay far from overflowing.
constexpr uint64_t kMaxMib = uint64_t{1} << 30;

void AddWorkspaceFlags(CLI::App& app, Options& o) {
  app.add_option("--limits-mib", o.limits_mib, "per-kernel workspace limits in MiB, A,B,...")
      ->delimiter(',')
      ->check(CLI::Range(uint64_t{0}, kMaxMib))
      ->capture_default_str();
  app.add_option("--total-budget-mib", o.total_budget_mib,
                 "total workspace budget in MiB, 0 for none")
      ->check(CLI::Range(uint64_t{0}, kMaxMib))
      ->capture_default_str();
  app.add_option("--total-mode", o.total_mode,
                 "total (= total_shared: kernels run one after another in one workspace) or "
                 "total_sum (each kernel its own slice; ILP)")
      ->capture_default_str();
  app.add_option("--policy", o.policy, "micro-batch sizes: undivided, power_of_two or all")
      ->capture_default_str();
  app.add_option("--algorithms", o.algorithms, "candidates of the plans: all, legacy, engines")
      ->capture_default_str();
}

void AddPlanSourceFlags(CLI::App& app, Options& o) {
  app.add_option("--server", o.server, "planner server (HOST:PORT) to get plans from");
  app.add_option("--offline-timings", o.offline_timings,
                 "timing CSV to plan from in this process (repeatable)");
  app.add_flag("--measure", o.measure,
               "measure every algorithm and micro-batch here, then plan from that");
  app.add_option("--measure-runs", o.measure_runs, "timed runs per measurement (0 counts as 1)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  app.add_option("--measure-warmup", o.measure_warmup, "untimed runs per measurement")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--plan-wait-s", o.plan_wait_s, "how long to wait for plans before timing")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}))
      ->capture_default_str();
}

void AddTimingFlags(CLI::App& app, Options& o) {
  app.add_option("--steps", o.steps, "timed steps per configuration (0 counts as 1)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps per configuration")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_flag("--find-baseline", o.find_baseline,
               "cuDNN baseline by cudnnFind (measured) instead of the heuristics");
  app.add_flag("--per-kernel", o.per_kernel,
               "also time each distinct kernel alone (cuDNN) and list the kernels");
  app.add_flag("--json", o.json, "one JSON object on stdout instead of the table");
}

// The flags' words the core reads (policy, candidates, total mode, precision).
Status ParseWords(Options& o) {
  UCUDNN_ASSIGN_OR_RETURN(o.batch_policy, ParseBatchPolicyChoice("--policy", o.policy));
  UCUDNN_RETURN_IF_ERROR(ParseAlgorithmSpaceChoice("--algorithms", o.algorithms).status());
  UCUDNN_ASSIGN_OR_RETURN(o.total_workspace_mode,
                          ParseWorkspaceModeChoice("--total-mode", o.total_mode));
  if (o.total_workspace_mode == WorkspaceMode::kPerKernel) {
    return InvalidArgument("--total-mode: expected total, total_shared or total_sum");
  }
  UCUDNN_ASSIGN_OR_RETURN(o.precision, ParseNetworkPrecision(o.dtype, o.layout, o.math));
  return Status::Ok();
}

// The parsed flags, or the exit status: 0 after --help, 2 for bad flags.
std::variant<Options, int> ParseOptions(int argc, char** argv) {
  Options o;
  CLI::App app(
      "ucudnn-example-train-step: the convolutions of one training step of a network, timed "
      "without the library and with it, for per-kernel workspace limits and one total budget, "
      "beside the plan's predicted time. Plans come from --server, or from a planner in this "
      "process over --offline-timings or over timings it measures (--measure); without any, the "
      "library only falls back.",
      "ucudnn-example-train-step");
  app.footer(
      "Environment: UCUDNN_LOG_LEVEL sets the library's log level (default info; the example's "
      "own is warn).");
  AddNetworkFlags(app, o);
  AddWorkspaceFlags(app, o);
  AddPlanSourceFlags(app, o);
  AddTimingFlags(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  o.measure_runs = std::max(1, o.measure_runs);
  o.steps = std::max(1, o.steps);
  if (Status words = ParseWords(o); !words.ok()) {
    std::fprintf(stderr, "%s\n", words.message().c_str());
    return 2;
  }
  return o;
}

// ---- Local planning ---------------------------------------------------------------------------

// A PlannerService in this process over timing tables: the same planning as the server's (the
// planner library), without its database. It trusts that the tables are this device's.
class LocalPlanner final : public v1::PlannerService::Service {
 public:
  explicit LocalPlanner(TimingTables tables) : tables_(std::move(tables)) {}

  Status Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) return Unavailable("cannot start the local planner");
    return Status::Ok();
  }
  ~LocalPlanner() override {
    if (server_ != nullptr) server_->Shutdown();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  grpc::Status GetPlan(grpc::ServerContext*, const v1::GetPlanRequest* message,
                       v1::GetPlanResponse* response) override {
    Result<PlanRequest> request = FromProto(*message);
    if (!request.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, request.status().message());
    }
    std::vector<const TimingTable*> tables;
    for (const Kernel& kernel : request->kernels) {
      tables.push_back(FindTimings(tables_, kernel.problem));
    }
    Result<NetworkPlan> plan = PlanNetwork(*request, tables);
    if (!plan.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, plan.status().message());
    *response->mutable_plan() = ToProto(*plan, request->device);
    return grpc::Status::OK;
  }

 private:
  TimingTables tables_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Times every algorithm at every micro-batch size of the policy on this machine's backend, as a
// worker would; workspaces above `max_workspace` are left out.
Result<TimingTables> MeasureTimings(const Options& o, const std::vector<Kernel>& kernels,
                                    BatchPolicy policy, uint64_t max_workspace) {
  UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<ConvBackend> backend, MakeBackend(o.backend));
  size_t x_bytes = 0, y_bytes = 0, w_bytes = 0;
  for (const Kernel& k : kernels) {
    const size_t e = ElementSize(k.problem.data_type);
    x_bytes = std::max(x_bytes, k.mini_batch * k.problem.input_elements_per_sample() * e);
    y_bytes = std::max(y_bytes, k.mini_batch * k.problem.output_elements_per_sample() * e);
    w_bytes = std::max(w_bytes, k.problem.filter_elements() * e);
  }
  UCUDNN_ASSIGN_OR_RETURN(auto x, backend->Allocate(x_bytes));
  UCUDNN_ASSIGN_OR_RETURN(auto y, backend->Allocate(y_bytes));
  UCUDNN_ASSIGN_OR_RETURN(auto w, backend->Allocate(w_bytes));
  UCUDNN_ASSIGN_OR_RETURN(auto dw, backend->Allocate(w_bytes));
  const DataType type = kernels.front().problem.data_type;
  const size_t element = ElementSize(type);
  UCUDNN_RETURN_IF_ERROR(FillRandom(*backend, x->data(), x_bytes / element, type, 1));
  UCUDNN_RETURN_IF_ERROR(FillRandom(*backend, y->data(), y_bytes / element, type, 2));
  UCUDNN_RETURN_IF_ERROR(FillRandom(*backend, w->data(), w_bytes / element, type, 3));
  std::unique_ptr<BackendBuffer> workspace;

  TimingTables tables;
  for (const Kernel& k : kernels) {
    ProblemTimings& entry = tables[CanonicalKey(k.problem)];
    if (!entry.table.entries.empty()) continue;
    entry.problem = k.problem;
    entry.layer = k.name;
    entry.mini_batch = k.mini_batch;
    ConvOperands operands;
    operands.x = x->data(), operands.w = w->data(), operands.dy = y->data();
    operands.y = y->data(), operands.dx = x->data(), operands.dw = dw->data();
    for (int64_t micro : MicroBatchSizes(policy, k.mini_batch)) {
      for (const AlgorithmInfo& algo : backend->Algorithms(k.problem.op)) {
        Result<size_t> bytes = backend->WorkspaceSize(k.problem, micro, algo.id);
        if (!bytes.ok() || *bytes > max_workspace) continue;
        if (workspace == nullptr || workspace->size() < *bytes) {
          workspace.reset();
          UCUDNN_ASSIGN_OR_RETURN(workspace, backend->Allocate(*bytes));
        }
        Result<std::vector<double>> runs =
            backend->TimeRuns(k.problem, micro, algo.id, operands, workspace->data(),
                              workspace->size(), o.measure_warmup, o.measure_runs);
        if (!runs.ok()) continue;
        Timing t;
        t.micro_batch = micro;
        t.algo = algo.id;
        t.time_ms = std::max(Median(*runs), 1e-6);
        t.samples = static_cast<int>(runs->size());
        t.workspace_bytes = *bytes;
        entry.table.entries.push_back(t);
      }
    }
    spdlog::info("measured {} ({} timings)", k.name, entry.table.entries.size());
  }
  return tables;
}

// ---- Reporting --------------------------------------------------------------------------------

struct ConfigResult {
  std::string mode;  // "per_kernel", "total_sum", "total_shared"
  uint64_t workspace_bytes = 0;
  StepTiming baseline;
  LibraryRun library;
  std::optional<double> predicted_ms;            // all kernels planned
  std::optional<double> predicted_undivided_ms;  // the planner's undivided baselines
  size_t planned_kernels = 0;
  size_t distinct_kernels = 0;
};

void Predict(const std::vector<Kernel>& step, ConfigResult* result) {
  std::map<std::string, const KernelReport*> reports;
  for (const KernelReport& r : result->library.kernels) {
    reports[r.problem + "@" + std::to_string(r.mini_batch)] = &r;  // KernelKey()
  }
  result->distinct_kernels = reports.size();
  for (const auto& [key, r] : reports) {
    if (r->state == KernelReport::State::kPlanned) ++result->planned_kernels;
  }
  double predicted = 0, undivided = 0;
  bool complete = true, undivided_known = true;
  for (const Kernel& k : step) {
    auto it = reports.find(CanonicalKey(k.problem) + "@" + std::to_string(k.mini_batch));
    if (it == reports.end() || it->second->state != KernelReport::State::kPlanned) {
      complete = false;
      continue;
    }
    predicted += it->second->predicted_ms;
    undivided += it->second->undivided_ms;
    undivided_known = undivided_known && it->second->undivided_ms > 0;
  }
  if (complete) result->predicted_ms = predicted;
  if (complete && undivided_known) result->predicted_undivided_ms = undivided;
}

using Json = nlohmann::ordered_json;

Json NumberOrNull(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }

std::optional<double> Lookup(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

std::string Segments(const KernelReport& k) {
  // "64x4 a1" (legacy) or "64x4 eng34{k3=2}" per run of equal segments.
  std::string text;
  for (size_t i = 0; i < k.segments.size();) {
    size_t j = i;
    while (j < k.segments.size() && k.segments[j].micro_batch == k.segments[i].micro_batch &&
           k.segments[j].algo == k.segments[i].algo &&
           k.segments[j].engine_config == k.segments[i].engine_config) {
      ++j;
    }
    if (!text.empty()) text += " + ";
    text += std::to_string(k.segments[i].micro_batch) + "x" + std::to_string(j - i) + " " +
            (k.segments[i].engine_config.empty() ? "a" + std::to_string(k.segments[i].algo)
                                                 : k.segments[i].engine_config);
    i = j;
  }
  return text.empty() ? "-" : text;
}

Json KernelJson(const KernelReport& k, const ConfigResult& r) {
  const std::string key = k.problem + "@" + std::to_string(k.mini_batch);
  return {{"name", k.name},
          {"state", ToString(k.state)},
          {"segments", Segments(k)},
          {"workspace_bytes", k.plan_workspace_bytes},
          {"predicted_ms", k.predicted_ms},
          {"predicted_undivided_ms", k.undivided_ms},
          {"with_library_ms", NumberOrNull(Lookup(r.library.timing.kernel_ms, key))},
          {"without_library_ms", NumberOrNull(Lookup(r.baseline.kernel_ms, key))}};
}

std::optional<double> Speedup(const ConfigResult& r) {
  if (r.library.timing.ms_per_step <= 0) return std::nullopt;
  return r.baseline.ms_per_step / r.library.timing.ms_per_step;
}

Json ResultJson(const ConfigResult& r, bool per_kernel) {
  Json json = {{"workspace_mode", r.mode},
               {"workspace_bytes", r.workspace_bytes},
               {"without_library_ms", r.baseline.ms_per_step},
               {"with_library_ms", r.library.timing.ms_per_step},
               {"predicted_ms", NumberOrNull(r.predicted_ms)},
               {"predicted_undivided_ms", NumberOrNull(r.predicted_undivided_ms)},
               {"speedup", NumberOrNull(Speedup(r))},
               {"planned_kernels", r.planned_kernels},
               {"distinct_kernels", r.distinct_kernels},
               {"planned_calls", r.library.stats.planned_calls},
               {"fallback_calls", r.library.stats.fallback_calls}};
  if (per_kernel) {
    Json kernels = Json::array();
    for (const KernelReport& k : r.library.kernels) kernels.push_back(KernelJson(k, r));
    json["kernels"] = std::move(kernels);
  }
  return json;
}

void PrintJson(const Options& o, const DeviceFingerprint& device, size_t step_kernels,
               const std::string& plans_from, const std::vector<ConfigResult>& results) {
  Json results_json = Json::array();
  for (const ConfigResult& r : results) results_json.push_back(ResultJson(r, o.per_kernel));
  const Json report = {{"network", o.network},
                       {"mini_batch", o.batch},
                       {"dtype", ToString(o.precision.data_type)},
                       {"layout", ToString(o.precision.layout)},
                       {"math", ToString(o.precision.math)},
                       {"backend", o.backend},
                       {"device", device.name},
                       {"cudnn_version", device.cudnn_version},
                       {"policy", o.policy},
                       {"algorithms", o.algorithms},
                       {"plans_from", plans_from},
                       {"kernels_per_step", step_kernels},
                       {"baseline", o.backend == "cpu" ? "workspace_rule"
                                    : o.find_baseline  ? "cudnn_find"
                                                       : "heuristic"},
                       {"results", std::move(results_json)}};
  std::printf("%s\n", report.dump(2).c_str());
}

void PrintTable(const Options& o, const DeviceFingerprint& device, size_t step_kernels,
                const std::string& plans_from, const std::vector<ConfigResult>& results) {
  std::printf("ucudnn train step: %s (%s), mini-batch %lld, %zu kernels per step, on %s (%s",
              o.network.c_str(), ToString(o.precision).c_str(), static_cast<long long>(o.batch),
              step_kernels, device.name.c_str(), device.backend.c_str());
  if (device.cudnn_version > 0) std::printf(" %d", device.cudnn_version);
  const char* baseline = o.backend == "cpu" ? "the backend's best algorithm (workspace rule)"
                         : o.find_baseline  ? "cuDNN's fastest measured algorithm (cudnnFind)"
                                            : "cuDNN's heuristic best algorithm";
  std::printf(
      ")\nplans: %s\nwithout the library: %s within the limit (a total budget is one "
      "workspace reused by every call)\n\n",
      plans_from.c_str(), baseline);
  std::printf("%-24s %14s %14s %14s %9s %9s %11s\n", "workspace", "without ms", "with ms",
              "predicted ms", "speedup", "planned", "fallbacks");
  for (const ConfigResult& r : results) {
    const std::string label =
        (r.mode == "per_kernel" ? "per kernel " : r.mode + " ") + FormatBytes(r.workspace_bytes);
    char predicted[32] = "-";
    if (r.predicted_ms) std::snprintf(predicted, sizeof(predicted), "%.4f", *r.predicted_ms);
    std::printf("%-24s %14.2f %14.2f %14s %8.2fx %4zu/%-4zu %11llu\n", label.c_str(),
                r.baseline.ms_per_step, r.library.timing.ms_per_step, predicted,
                Speedup(r).value_or(0), r.planned_kernels, r.distinct_kernels,
                static_cast<unsigned long long>(r.library.stats.fallback_calls));
  }
  if (!o.per_kernel) return;
  for (const ConfigResult& r : results) {
    std::printf("\n%s %s, per distinct kernel (ms per call):\n", r.mode.c_str(),
                FormatBytes(r.workspace_bytes).c_str());
    std::printf("  %-28s %-10s %10s %10s %10s %10s  %s\n", "kernel", "state", "predicted", "with",
                "without", "undivided", "segments");
    for (const KernelReport& k : r.library.kernels) {
      const std::string key = k.problem + "@" + std::to_string(k.mini_batch);
      auto ms = [](std::optional<double> v) { return v ? *v : 0.0; };
      std::printf("  %-28s %-10s %10.3f %10.3f %10.3f %10.3f  %s\n", k.name.c_str(),
                  std::string(ToString(k.state)).c_str(), k.predicted_ms,
                  ms(Lookup(r.library.timing.kernel_ms, key)),
                  ms(Lookup(r.baseline.kernel_ms, key)), k.undivided_ms, Segments(k).c_str());
    }
  }
}

// Forward over the layers, then backward (data and filter) in reverse: a training step's order.
std::vector<Kernel> TrainingOrder(const std::vector<Kernel>& network) {
  std::vector<Kernel> forward, backward;
  for (const Kernel& k : network) {
    (k.problem.op == ConvOp::kForward ? forward : backward).push_back(k);
  }
  std::vector<Kernel> step = forward;
  for (size_t i = backward.size(); i >= 2; i -= 2) {
    step.push_back(backward[i - 2]);  // bwd_data of the layer
    step.push_back(backward[i - 1]);  // bwd_filter of the layer
  }
  return step;
}

Result<std::unique_ptr<StepEngine>> MakeEngine(const Options& o, const std::vector<Kernel>& step) {
  EngineOptions engine_options;
  engine_options.step = step;
  engine_options.warmup_steps = o.warmup;
  engine_options.timed_steps = o.steps;
  engine_options.find_baseline = o.find_baseline;
  engine_options.per_kernel = o.per_kernel;
  if (o.backend == "cpu") return MakeCpuEngine(engine_options);
  return MakeCudnnEngine(engine_options);  // --backend is cudnn or cpu
}

// Where plans come from: --server, or a planner in this process over the offline timings and
// those measured here.
struct PlanSource {
  std::string server;
  std::string description;
  std::unique_ptr<LocalPlanner> local;
};

Result<PlanSource> StartPlanSource(const Options& o, const std::vector<Kernel>& step) {
  PlanSource source;
  source.server = o.server;
  source.description = o.server.empty() ? "none (fallback only)" : "server " + o.server;
  if (!o.server.empty() || (!o.measure && o.offline_timings.empty())) return source;
  TimingTables tables;
  for (const std::string& path : o.offline_timings) {
    UCUDNN_ASSIGN_OR_RETURN(TimingTables file, ReadTimingCsvFile(path));
    tables.merge(file);
  }
  if (o.measure) {
    uint64_t max_workspace = o.total_budget_mib << 20;
    for (uint64_t l : o.limits_mib) max_workspace = std::max(max_workspace, l << 20);
    Result<TimingTables> measured =
        MeasureTimings(o, UniqueKernels(step), o.batch_policy, max_workspace);
    if (!measured.ok()) return measured.status().WithContext("measuring");
    tables.merge(*measured);
  }
  source.local = std::make_unique<LocalPlanner>(std::move(tables));
  UCUDNN_RETURN_IF_ERROR(source.local->Start());
  source.server = source.local->address();
  source.description = o.measure ? "timings measured here, planned in process"
                                 : "offline timings, planned in process";
  return source;
}

// The workspace configurations to time: each per-kernel limit, then the total budget.
std::vector<std::pair<ClientConfig::WorkspaceMode, uint64_t>> WorkspaceConfigs(const Options& o) {
  std::vector<std::pair<ClientConfig::WorkspaceMode, uint64_t>> configs;
  for (uint64_t mib : o.limits_mib) {
    configs.emplace_back(ClientConfig::WorkspaceMode::kPerKernel, mib << 20);
  }
  if (o.total_budget_mib > 0) {
    configs.emplace_back(o.total_workspace_mode == WorkspaceMode::kTotalSum
                             ? ClientConfig::WorkspaceMode::kTotalSum
                             : ClientConfig::WorkspaceMode::kTotalShared,
                         o.total_budget_mib << 20);
  }
  return configs;
}

ClientConfig LibraryConfig(const Options& o, const std::string& server,
                           ClientConfig::WorkspaceMode mode, uint64_t bytes) {
  ClientConfig config;
  config.server = server;
  config.workspace_mode = mode;
  config.workspace_bytes = bytes;
  config.algorithms = o.algorithms == "legacy"    ? ClientConfig::Algorithms::kLegacy
                      : o.algorithms == "engines" ? ClientConfig::Algorithms::kEngines
                                                  : ClientConfig::Algorithms::kAll;
  config.policy = o.policy == "all"         ? ClientConfig::BatchPolicy::kAll
                  : o.policy == "undivided" ? ClientConfig::BatchPolicy::kUndivided
                                            : ClientConfig::BatchPolicy::kPowerOfTwo;
  config.deadline_ms = 120000;  // local planning of a whole network can take seconds (ILP)
  config.collect_quiet_ms = 1000;
  return config;
}

// One workspace configuration timed without the library and with it, beside the prediction.
Result<ConfigResult> TimeConfig(StepEngine& engine, const Options& o,
                                const std::vector<Kernel>& step, const std::string& server,
                                ClientConfig::WorkspaceMode mode, uint64_t bytes) {
  ConfigResult r;
  r.mode = std::string(ToString(mode));
  r.workspace_bytes = bytes;
  const std::string label = r.mode + " " + FormatBytes(bytes);
  // Without the library, a total budget is one workspace the framework reuses for every call.
  Result<StepTiming> baseline = engine.TimeWithoutLibrary(bytes);
  if (!baseline.ok()) return baseline.status().WithContext(label + " without the library");
  r.baseline = *baseline;
  Result<LibraryRun> library =
      engine.TimeWithLibrary(LibraryConfig(o, server, mode, bytes), o.plan_wait_s * 1000);
  if (!library.ok()) return library.status().WithContext(label + " with the library");
  r.library = std::move(*library);
  // The drop-in handle sees descriptors, not names: label its kernels with the network's.
  std::map<std::string, std::string> names;
  for (const Kernel& k : step) names.emplace(KernelKey(k.problem, k.mini_batch), k.name);
  for (KernelReport& k : r.library.kernels) {
    auto it = names.find(k.problem + "@" + std::to_string(k.mini_batch));
    if (it != names.end()) k.name = it->second;
  }
  Predict(step, &r);
  return r;
}

int Main(int argc, char** argv) {
  LogToStderr("ucudnn-example-train-step");  // stdout is for the table or --json
  spdlog::set_level(spdlog::level::warn);
  std::variant<Options, int> parsed = ParseOptions(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const Options& o = std::get<Options>(parsed);
  Result<std::vector<Kernel>> network = NetworkKernels(o.network, o.batch, o.precision);
  if (!network.ok()) {
    std::fprintf(stderr, "%s\n", network.status().ToString().c_str());
    return 2;
  }
  const std::vector<Kernel> step = TrainingOrder(*network);
  Result<std::unique_ptr<StepEngine>> engine = MakeEngine(o, step);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  Result<PlanSource> plans = StartPlanSource(o, step);
  if (!plans.ok()) {
    std::fprintf(stderr, "%s\n", plans.status().ToString().c_str());
    return 1;
  }
  std::vector<ConfigResult> results;
  for (const auto& [mode, bytes] : WorkspaceConfigs(o)) {
    Result<ConfigResult> result = TimeConfig(**engine, o, step, plans->server, mode, bytes);
    if (!result.ok()) {
      std::fprintf(stderr, "%s\n", result.status().ToString().c_str());
      return 1;
    }
    results.push_back(std::move(*result));
  }
  if (o.json) {
    PrintJson(o, (*engine)->fingerprint(), step.size(), plans->description, results);
  } else {
    PrintTable(o, (*engine)->fingerprint(), step.size(), plans->description, results);
  }
  return 0;
}

}  // namespace
}  // namespace ucudnn::example

int main(int argc, char** argv) { return ucudnn::example::Main(argc, argv); }
