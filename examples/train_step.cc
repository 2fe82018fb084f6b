// ucudnn-example-train-step: the convolutions of one training step of a network (forward over
// the layers, then backward-data and backward-filter in reverse), timed without the library and
// with it, for several per-kernel workspace limits and one total budget, beside the plan's
// predicted time.
//
//   ucudnn-example-train-step                                  # ResNet-50, batch 256, cuDNN
//       --offline-timings data/h100/h100-cudnn91400-resnet50-fp32-nchw.csv
//   ucudnn-example-train-step --server planner:7000 --json
//   ucudnn-example-train-step --backend cpu --network alexnet --batch 2 --measure
//
// Plans come from --server (a planner server), or from a planner run inside this process over
// --offline-timings files or over timings it measures itself (--measure). Without any of them
// the library only falls back (the predicted time is then absent).
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "train_step_engine.h"
#include "ucudnn/core/backend_factory.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/logging.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/proto_convert.h"
#include "ucudnn/core/random_fill.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/core/units.h"
#include "ucudnn/planner/planner.h"
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

const char kUsage[] = R"(usage: ucudnn-example-train-step [options]
  --backend cudnn|cpu        convolution backend (default cudnn; cpu runs the library's session)
  --network NAME             alexnet, resnet50, ... (default resnet50)
  --batch N                  mini-batch (default 256)
  --limits-mib A,B,...       per-kernel workspace limits in MiB (default 8,64,256)
  --total-budget-mib N       total workspace budget in MiB, 0 for none (default 1024)
  --total-mode MODE          total (= total_shared, default: kernels run one after another in
                             one workspace) or total_sum (each kernel its own slice; ILP)
  --dtype fp32|fp16|bf16     data type of the network's tensors (default fp32; compute fp32)
  --layout nchw|nhwc         default nchw for fp32, nhwc for fp16 and bf16
  --math MODE                default, tensor_op, tensor_op_allow_conversion, fma (default:
                             default for fp32, tensor_op for fp16 and bf16)
  --policy P                 undivided, power_of_two (default) or all
  --algorithms A             candidates of the plans: all (default), legacy, engines
  --server HOST:PORT         planner server to get plans from
  --offline-timings FILE     timing CSV to plan from in this process (repeatable)
  --measure                  measure every algorithm and micro-batch here, then plan from that
  --measure-runs N           timed runs per measurement (default 3; warm-up: --measure-warmup)
  --steps N                  timed steps per configuration (default 3; warm-up: --warmup, 1)
  --plan-wait-s S            how long to wait for plans before timing (default 60)
  --find-baseline            cuDNN baseline by cudnnFind (measured) instead of the heuristics
  --per-kernel               also time each distinct kernel alone (cuDNN) and list the kernels
  --json                     one JSON object on stdout instead of the table
)";

Result<Options> ParseOptions(int argc, char** argv) {
  Options o;
  auto need = [&](int& i) -> Result<std::string> {
    if (i + 1 >= argc) return InvalidArgument(std::string(argv[i]) + ": needs a value");
    return std::string(argv[++i]);
  };
  auto to_int = [](const std::string& flag, const std::string& s) -> Result<int64_t> {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < 0) {
      return InvalidArgument(flag + ": expected a non-negative integer, got '" + s + "'");
    }
    return static_cast<int64_t>(v);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flag == "--json") {
      o.json = true;
    } else if (flag == "--measure") {
      o.measure = true;
    } else if (flag == "--find-baseline") {
      o.find_baseline = true;
    } else if (flag == "--per-kernel") {
      o.per_kernel = true;
    } else if (flag == "--backend") {
      UCUDNN_ASSIGN_OR_RETURN(o.backend, need(i));
    } else if (flag == "--network") {
      UCUDNN_ASSIGN_OR_RETURN(o.network, need(i));
    } else if (flag == "--server") {
      UCUDNN_ASSIGN_OR_RETURN(o.server, need(i));
    } else if (flag == "--policy") {
      UCUDNN_ASSIGN_OR_RETURN(o.policy, need(i));
    } else if (flag == "--algorithms") {
      UCUDNN_ASSIGN_OR_RETURN(o.algorithms, need(i));
      UCUDNN_RETURN_IF_ERROR(ParseAlgorithmSpace(o.algorithms).status());
    } else if (flag == "--total-mode") {
      UCUDNN_ASSIGN_OR_RETURN(o.total_mode, need(i));
    } else if (flag == "--dtype") {
      UCUDNN_ASSIGN_OR_RETURN(o.dtype, need(i));
    } else if (flag == "--layout") {
      UCUDNN_ASSIGN_OR_RETURN(o.layout, need(i));
    } else if (flag == "--math") {
      UCUDNN_ASSIGN_OR_RETURN(o.math, need(i));
    } else if (flag == "--offline-timings") {
      UCUDNN_ASSIGN_OR_RETURN(std::string path, need(i));
      o.offline_timings.push_back(path);
    } else if (flag == "--limits-mib") {
      UCUDNN_ASSIGN_OR_RETURN(std::string list, need(i));
      o.limits_mib.clear();
      std::stringstream in(list);
      std::string item;
      while (std::getline(in, item, ',')) {
        UCUDNN_ASSIGN_OR_RETURN(int64_t v, to_int(flag, item));
        o.limits_mib.push_back(static_cast<uint64_t>(v));
      }
    } else {
      UCUDNN_ASSIGN_OR_RETURN(std::string value, need(i));
      UCUDNN_ASSIGN_OR_RETURN(int64_t v, to_int(flag, value));
      if (flag == "--batch") {
        o.batch = v;
      } else if (flag == "--total-budget-mib") {
        o.total_budget_mib = static_cast<uint64_t>(v);
      } else if (flag == "--measure-runs") {
        o.measure_runs = static_cast<int>(std::max<int64_t>(1, v));
      } else if (flag == "--measure-warmup") {
        o.measure_warmup = static_cast<int>(v);
      } else if (flag == "--steps") {
        o.steps = static_cast<int>(std::max<int64_t>(1, v));
      } else if (flag == "--warmup") {
        o.warmup = static_cast<int>(v);
      } else if (flag == "--plan-wait-s") {
        o.plan_wait_s = v;
      } else {
        return InvalidArgument("unknown option " + flag + "\n" + kUsage);
      }
    }
  }
  UCUDNN_ASSIGN_OR_RETURN(o.total_workspace_mode,
                          ParseWorkspaceModeChoice("--total-mode", o.total_mode));
  if (o.total_workspace_mode == WorkspaceMode::kPerKernel) {
    return InvalidArgument("--total-mode: expected total, total_shared or total_sum");
  }
  UCUDNN_ASSIGN_OR_RETURN(o.precision, ParseNetworkPrecision(o.dtype, o.layout, o.math));
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

std::string JsonNumber(std::optional<double> v) {
  if (!v) return "null";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.4f", *v);
  return buffer;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

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

std::string KernelJson(const KernelReport& k, const ConfigResult& r) {
  const std::string key = k.problem + "@" + std::to_string(k.mini_batch);
  return "{\"name\": " + JsonString(k.name) +
         ", \"state\": " + JsonString(std::string(ToString(k.state))) +
         ", \"segments\": " + JsonString(Segments(k)) +
         ", \"workspace_bytes\": " + std::to_string(k.plan_workspace_bytes) +
         ", \"predicted_ms\": " + JsonNumber(k.predicted_ms) +
         ", \"predicted_undivided_ms\": " + JsonNumber(k.undivided_ms) +
         ", \"with_library_ms\": " + JsonNumber(Lookup(r.library.timing.kernel_ms, key)) +
         ", \"without_library_ms\": " + JsonNumber(Lookup(r.baseline.kernel_ms, key)) + "}";
}

void PrintJson(const Options& o, const DeviceFingerprint& device, size_t step_kernels,
               const std::string& plans_from, const std::vector<ConfigResult>& results) {
  std::string out = "{\n";
  out += "  \"network\": " + JsonString(o.network) + ",\n";
  out += "  \"mini_batch\": " + std::to_string(o.batch) + ",\n";
  out += "  \"dtype\": " + JsonString(std::string(ToString(o.precision.data_type))) + ",\n";
  out += "  \"layout\": " + JsonString(std::string(ToString(o.precision.layout))) + ",\n";
  out += "  \"math\": " + JsonString(std::string(ToString(o.precision.math))) + ",\n";
  out += "  \"backend\": " + JsonString(o.backend) + ",\n";
  out += "  \"device\": " + JsonString(device.name) + ",\n";
  out += "  \"cudnn_version\": " + std::to_string(device.cudnn_version) + ",\n";
  out += "  \"policy\": " + JsonString(o.policy) + ",\n";
  out += "  \"algorithms\": " + JsonString(o.algorithms) + ",\n";
  out += "  \"plans_from\": " + JsonString(plans_from) + ",\n";
  out += "  \"kernels_per_step\": " + std::to_string(step_kernels) + ",\n";
  out += "  \"baseline\": " +
         JsonString(o.backend == "cpu" ? "workspace_rule"
                    : o.find_baseline  ? "cudnn_find"
                                       : "heuristic") +
         ",\n";
  out += "  \"results\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const ConfigResult& r = results[i];
    out += "    {\"workspace_mode\": " + JsonString(r.mode) +
           ", \"workspace_bytes\": " + std::to_string(r.workspace_bytes) +
           ", \"without_library_ms\": " + JsonNumber(r.baseline.ms_per_step) +
           ", \"with_library_ms\": " + JsonNumber(r.library.timing.ms_per_step) +
           ", \"predicted_ms\": " + JsonNumber(r.predicted_ms) +
           ", \"predicted_undivided_ms\": " + JsonNumber(r.predicted_undivided_ms) +
           ", \"speedup\": " +
           JsonNumber(
               r.library.timing.ms_per_step > 0
                   ? std::optional<double>(r.baseline.ms_per_step / r.library.timing.ms_per_step)
                   : std::nullopt) +
           ", \"planned_kernels\": " + std::to_string(r.planned_kernels) +
           ", \"distinct_kernels\": " + std::to_string(r.distinct_kernels) +
           ", \"planned_calls\": " + std::to_string(r.library.stats.planned_calls) +
           ", \"fallback_calls\": " + std::to_string(r.library.stats.fallback_calls);
    if (o.per_kernel) {
      out += ", \"kernels\": [";
      for (size_t j = 0; j < r.library.kernels.size(); ++j) {
        const KernelReport& k = r.library.kernels[j];
        out += std::string(j > 0 ? ", " : "") + "\n      " + KernelJson(k, r);
      }
      out += "]";
    }
    out += std::string("}") + (i + 1 < results.size() ? ",\n" : "\n");
  }
  out += "  ]\n}\n";
  std::fputs(out.c_str(), stdout);
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
    const double speedup = r.library.timing.ms_per_step > 0
                               ? r.baseline.ms_per_step / r.library.timing.ms_per_step
                               : 0;
    std::printf("%-24s %14.2f %14.2f %14s %8.2fx %4zu/%-4zu %11llu\n", label.c_str(),
                r.baseline.ms_per_step, r.library.timing.ms_per_step,
                r.predicted_ms ? JsonNumber(r.predicted_ms).c_str() : "-", speedup,
                r.planned_kernels, r.distinct_kernels,
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

int Main(int argc, char** argv) {
  LogToStderr("ucudnn-example-train-step");  // stdout is for the table or --json
  spdlog::set_level(spdlog::level::warn);
  Result<Options> parsed = ParseOptions(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().message().c_str());
    return 2;
  }
  const Options& o = *parsed;
  Result<BatchPolicy> policy = ParseBatchPolicy(o.policy);
  if (!policy.ok()) {
    std::fprintf(stderr, "--policy: %s\n", policy.status().message().c_str());
    return 2;
  }
  Result<std::vector<Kernel>> network = NetworkKernels(o.network, o.batch, o.precision);
  if (!network.ok()) {
    std::fprintf(stderr, "%s\n", network.status().ToString().c_str());
    return 2;
  }
  const std::vector<Kernel> step = TrainingOrder(*network);

  EngineOptions engine_options;
  engine_options.step = step;
  engine_options.warmup_steps = o.warmup;
  engine_options.timed_steps = o.steps;
  engine_options.find_baseline = o.find_baseline;
  engine_options.per_kernel = o.per_kernel;
  Result<std::unique_ptr<StepEngine>> engine =
      o.backend == "cpu" ? MakeCpuEngine(engine_options)
      : o.backend == "cudnn"
          ? MakeCudnnEngine(engine_options)
          : Result<std::unique_ptr<StepEngine>>(InvalidArgument("--backend: cudnn or cpu"));
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }

  // Where plans come from.
  std::string server = o.server;
  std::string plans_from = server.empty() ? "none (fallback only)" : "server " + server;
  std::unique_ptr<LocalPlanner> local;
  if (server.empty() && (o.measure || !o.offline_timings.empty())) {
    TimingTables tables;
    for (const std::string& path : o.offline_timings) {
      Result<TimingTables> file = ReadTimingCsvFile(path);
      if (!file.ok()) {
        std::fprintf(stderr, "%s\n", file.status().ToString().c_str());
        return 1;
      }
      tables.merge(*file);
    }
    if (o.measure) {
      uint64_t max_workspace = o.total_budget_mib << 20;
      for (uint64_t l : o.limits_mib) max_workspace = std::max(max_workspace, l << 20);
      Result<TimingTables> measured =
          MeasureTimings(o, UniqueKernels(step), *policy, max_workspace);
      if (!measured.ok()) {
        std::fprintf(stderr, "measuring: %s\n", measured.status().ToString().c_str());
        return 1;
      }
      tables.merge(*measured);
    }
    local = std::make_unique<LocalPlanner>(std::move(tables));
    if (Status started = local->Start(); !started.ok()) {
      std::fprintf(stderr, "%s\n", started.ToString().c_str());
      return 1;
    }
    server = local->address();
    plans_from = o.measure ? "timings measured here, planned in process"
                           : "offline timings, planned in process";
  }

  std::vector<std::pair<ClientConfig::WorkspaceMode, uint64_t>> configs;
  for (uint64_t mib : o.limits_mib)
    configs.emplace_back(ClientConfig::WorkspaceMode::kPerKernel, mib << 20);
  if (o.total_budget_mib > 0) {
    configs.emplace_back(o.total_workspace_mode == WorkspaceMode::kTotalSum
                             ? ClientConfig::WorkspaceMode::kTotalSum
                             : ClientConfig::WorkspaceMode::kTotalShared,
                         o.total_budget_mib << 20);
  }

  std::map<std::string, std::string> names;
  for (const Kernel& k : step) names.emplace(KernelKey(k.problem, k.mini_batch), k.name);

  std::vector<ConfigResult> results;
  for (const auto& [mode, bytes] : configs) {
    ConfigResult r;
    r.mode = std::string(ToString(mode));
    r.workspace_bytes = bytes;
    // Without the library, a total budget is one workspace the framework reuses for every call.
    Result<StepTiming> baseline = (*engine)->TimeWithoutLibrary(bytes);
    if (!baseline.ok()) {
      std::fprintf(stderr, "%s %s without the library: %s\n", r.mode.c_str(),
                   FormatBytes(bytes).c_str(), baseline.status().ToString().c_str());
      return 1;
    }
    r.baseline = *baseline;
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
    Result<LibraryRun> library = (*engine)->TimeWithLibrary(config, o.plan_wait_s * 1000);
    if (!library.ok()) {
      std::fprintf(stderr, "%s %s with the library: %s\n", r.mode.c_str(),
                   FormatBytes(bytes).c_str(), library.status().ToString().c_str());
      return 1;
    }
    r.library = std::move(*library);
    // The drop-in handle sees descriptors, not names: label its kernels with the network's.
    for (KernelReport& k : r.library.kernels) {
      auto it = names.find(k.problem + "@" + std::to_string(k.mini_batch));
      if (it != names.end()) k.name = it->second;
    }
    Predict(step, &r);
    results.push_back(std::move(r));
  }

  if (o.json) {
    PrintJson(o, (*engine)->fingerprint(), step.size(), plans_from, results);
  } else {
    PrintTable(o, (*engine)->fingerprint(), step.size(), plans_from, results);
  }
  return 0;
}

}  // namespace
}  // namespace ucudnn::example

int main(int argc, char** argv) { return ucudnn::example::Main(argc, argv); }
