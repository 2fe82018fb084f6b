// ucudnn-engine-probe: what cuDNN's graph API offers for real layer shapes on this GPU, beside
// the legacy algorithms, before the planner uses it. For each shape, op, precision and batch:
// the heuristics' engine configurations (modes instant, B, fallback), the time to build each
// execution plan, its workspace and median run time; the legacy algorithms' best; optionally the
// exhaustive engine x knob space (capped) to compare the best found; and the host cost of one
// call for the variant-pack strategies. With --kernel-cache instead: each configuration built on
// the static graph and on a dynamic-shape graph sharing one cuDNN kernel cache across the batches
// (docs/engines.md says why the planner does not use it). JSON lines to --out, a summary table to
// stdout; `ucudnn-engine-probe --help` lists the flags.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/backends/cudnn_engines.h"
#include "ucudnn/core/random_fill.h"
#include "ucudnn/core/text.h"
#include "ucudnn/core/units.h"

namespace ucudnn {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

#define CHECK_OK(expr)                                                                \
  do {                                                                                \
    const Status _s = (expr);                                                         \
    if (!_s.ok()) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, _s.ToString().c_str()); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Shape {
  std::string name;
  int64_t c, h, w, k, r, s, pad, stride;
  int64_t groups = 1;
};

ConvProblem MakeProblem(const Shape& s, ConvOp op, DataType dt, Layout layout, MathMode math) {
  ConvProblem p;
  p.op = op;
  p.c = s.c;
  p.h = s.h;
  p.w = s.w;
  p.k = s.k;
  p.r = s.r;
  p.s = s.s;
  p.pad_h = p.pad_w = s.pad;
  p.stride_h = p.stride_w = s.stride;
  p.groups = s.groups;
  p.data_type = dt;
  p.compute_type = DataType::kFloat32;
  p.layout = layout;
  p.math = math;
  return p;
}

struct Buffers {
  std::unique_ptr<BackendBuffer> in, out, filt, ws;
  ConvOperands o;
};

Buffers MakeBuffers(CudnnBackend& backend, const ConvProblem& p, int64_t batch, size_t ws_bytes) {
  Buffers b;
  const size_t e = ElementSize(p.data_type);
  const size_t in_n = batch * p.input_elements_per_sample();
  const size_t out_n = batch * p.output_elements_per_sample();
  const size_t f_n = p.filter_elements();
  b.in = backend.Allocate(in_n * e).value();
  b.out = backend.Allocate(out_n * e).value();
  b.filt = backend.Allocate(f_n * e).value();
  b.ws = backend.Allocate(ws_bytes).value();
  CHECK_OK(FillRandom(backend, b.in->data(), in_n, p.data_type, 1));
  CHECK_OK(FillRandom(backend, b.out->data(), out_n, p.data_type, 2));
  CHECK_OK(FillRandom(backend, b.filt->data(), f_n, p.data_type, 3));
  switch (p.op) {
    case ConvOp::kForward:
      b.o.x = b.in->data(), b.o.w = b.filt->data(), b.o.y = b.out->data();
      break;
    case ConvOp::kBackwardData:
      b.o.dx = b.in->data(), b.o.w = b.filt->data(), b.o.dy = b.out->data();
      break;
    case ConvOp::kBackwardFilter:
      b.o.x = b.in->data(), b.o.dw = b.filt->data(), b.o.dy = b.out->data();
      break;
  }
  CHECK_OK(backend.Synchronize());
  return b;
}

Status CudaOk(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(error));
}

// Median of `runs` runs (after one warm-up), each between a pair of events.
Result<double> TimeEngine(CudnnBackend& backend, EnginePlan& plan, const Buffers& b, int runs) {
  cudnnHandle_t h = backend.handle();
  UCUDNN_RETURN_IF_ERROR(plan.Execute(h, b.o, b.ws->data(), b.ws->size()));
  std::vector<cudaEvent_t> ev(2 * runs, nullptr);
  struct Destroy {
    std::vector<cudaEvent_t>& events;
    ~Destroy() {
      // Nothing to do about a failure to free an event: the run's result is already decided.
      for (cudaEvent_t e : events) {
        if (e != nullptr) (void)cudaEventDestroy(e);
      }
    }
  } destroy{ev};
  for (auto& e : ev) UCUDNN_RETURN_IF_ERROR(CudaOk(cudaEventCreate(&e), "cudaEventCreate"));
  cudaStream_t s = backend.stream();
  for (int i = 0; i < runs; ++i) {
    UCUDNN_RETURN_IF_ERROR(CudaOk(cudaEventRecord(ev[2 * i], s), "cudaEventRecord"));
    UCUDNN_RETURN_IF_ERROR(plan.Execute(h, b.o, b.ws->data(), b.ws->size()));
    UCUDNN_RETURN_IF_ERROR(CudaOk(cudaEventRecord(ev[2 * i + 1], s), "cudaEventRecord"));
  }
  UCUDNN_RETURN_IF_ERROR(CudaOk(cudaEventSynchronize(ev.back()), "cudaEventSynchronize"));
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    float ms = 0;
    UCUDNN_RETURN_IF_ERROR(
        CudaOk(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime"));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  UCUDNN_RETURN_IF_ERROR(backend.Healthy());
  return t[t.size() / 2];
}

// Relative L2 difference of two device tensors of `n` elements of `dt`, read as float.
double RelativeDiff(CudnnBackend& backend, const void* a, const void* b, size_t n, DataType dt) {
  const size_t e = ElementSize(dt);
  std::vector<unsigned char> ha(n * e), hb(n * e);
  CHECK_OK(backend.CopyToHost(ha.data(), a, n * e));
  CHECK_OK(backend.CopyToHost(hb.data(), b, n * e));
  const auto get = [&](const std::vector<unsigned char>& v, size_t i) -> double {
    if (dt == DataType::kFloat32) return reinterpret_cast<const float*>(v.data())[i];
    uint16_t bits = reinterpret_cast<const uint16_t*>(v.data())[i];
    uint32_t f = 0;
    if (dt == DataType::kBFloat16) {
      f = uint32_t{bits} << 16;
    } else {
      const uint32_t sign = (bits >> 15) & 1, exp = (bits >> 10) & 31, man = bits & 1023;
      if (exp == 0) {
        const float v2 = std::ldexp(static_cast<float>(man), -24) * (sign ? -1.f : 1.f);
        return v2;
      }
      f = (sign << 31) | ((exp + 112) << 23) | (man << 13);
    }
    float out;
    std::memcpy(&out, &f, 4);
    return out;
  };
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = get(ha, i), y = get(hb, i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
}

void* OutputOf(const ConvProblem& p, const ConvOperands& o) {
  return p.op == ConvOp::kForward ? o.y : p.op == ConvOp::kBackwardData ? o.dx : o.dw;
}
size_t OutputCount(const ConvProblem& p, int64_t batch) {
  return p.op == ConvOp::kForward        ? batch * p.output_elements_per_sample()
         : p.op == ConvOp::kBackwardData ? batch * p.input_elements_per_sample()
                                         : p.filter_elements();
}

// ---- what is probed ----------------------------------------------------------------------------

const std::vector<Shape> kShapes = {
    {"r50_conv1_7x7s2", 3, 224, 224, 64, 7, 7, 3, 2},
    {"r50_3x3_64_56", 64, 56, 56, 64, 3, 3, 1, 1},
    {"r50_1x1_256to64_56", 256, 56, 56, 64, 1, 1, 0, 1},
    {"r50_3x3_256_14", 256, 14, 14, 256, 3, 3, 1, 1},
    {"r50_1x1s2_512to1024_28", 512, 28, 28, 1024, 1, 1, 0, 2},
    {"r50_3x3_512_7", 512, 7, 7, 512, 3, 3, 1, 1},
};

struct Precision {
  const char* name;
  DataType dt;
  Layout layout;
  MathMode math;
};
const Precision kPrecisions[] = {
    {"fp32_nchw", DataType::kFloat32, Layout::kNCHW, MathMode::kDefault},
    {"fp16_nhwc", DataType::kFloat16, Layout::kNHWC, MathMode::kTensorOp},
    {"bf16_nhwc", DataType::kBFloat16, Layout::kNHWC, MathMode::kTensorOp},
};

const ConvOp kOps[] = {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter};
constexpr size_t kWorkspaceCap = size_t{1} << 30;
constexpr double kNone = 1e30;  // "no time": nothing ran

struct Args {
  std::string out_path = "engine_probe.jsonl";
  bool exhaustive = false;
  bool quick = false;
  std::vector<Shape> shapes;  // --shape; empty: kShapes
  std::vector<std::string> precisions, ops;
  std::vector<int64_t> batches;
  size_t max_per_engine = 24;
  double exhaustive_s = 1e9;  // stop building new configurations after this long per problem
  bool host_overhead = true;
  bool kernel_cache = false;
};

// NAME:C:H:W:K:R:S:PAD:STRIDE[:GROUPS], e.g. dw768_7:768:7:7:768:7:7:3:1:768.
Result<Shape> ParseShape(const std::string& text) {
  std::vector<std::string_view> parts;
  const std::string_view all = text;
  size_t start = 0;
  for (size_t colon; (colon = all.find(':', start)) != std::string_view::npos; start = colon + 1)
    parts.push_back(all.substr(start, colon - start));
  parts.push_back(all.substr(start));
  if (parts.size() != 9 && parts.size() != 10)
    return InvalidArgument("--shape " + text + ": want NAME:C:H:W:K:R:S:PAD:STRIDE[:GROUPS]");
  static constexpr const char* kFields[] = {"c", "h",   "w",      "k",     "r",
                                            "s", "pad", "stride", "groups"};
  std::vector<int64_t> v;
  for (size_t i = 1; i < parts.size(); ++i) {
    const int64_t min = std::string_view(kFields[i - 1]) == "pad" ? 0 : 1;
    Result<int64_t> n = ParseInteger<int64_t>(kFields[i - 1], parts[i], min, int64_t{1} << 20);
    if (!n.ok()) return n.status().WithContext("--shape " + text);
    v.push_back(*n);
  }
  Shape s{std::string(parts[0]), v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  if (v.size() == 9) s.groups = v[8];
  return s;
}

// The parsed flags, or the exit status: 0 after --help, 2 for bad flags (CLI11's message).
std::variant<Args, int> ParseArgs(int argc, char** argv) {
  Args a;
  CLI::App app(
      "ucudnn-engine-probe: what cuDNN's graph API offers for real layer shapes on GPU 0, beside "
      "the legacy algorithms: each heuristic engine configuration's build time, workspace, median "
      "run time and error against the legacy result, and the host cost of one call. JSON lines "
      "to --out, a summary table to stdout.",
      "ucudnn-engine-probe");
  app.add_option("--out", a.out_path, "file of JSON lines to write")->capture_default_str();
  app.add_flag("--exhaustive", a.exhaustive,
               "also time the exhaustive engine x knob space (capped) of the fp32 3x3 layer");
  app.add_flag("--quick", a.quick, "fp32 only, batch 64 only");
  std::vector<std::string> shapes;
  app.add_option("--shape", shapes,
                 "probe this shape instead of ResNet-50's (repeatable): "
                 "NAME:C:H:W:K:R:S:PAD:STRIDE[:GROUPS]; --exhaustive then covers every one");
  app.add_option("--precision", a.precisions, "only these (fp32_nchw, fp16_nhwc, bf16_nhwc)");
  app.add_option("--op", a.ops, "only these (fwd, bwd_data, bwd_filter)");
  app.add_option("--batch", a.batches, "these batches (default 32 and 256)");
  app.add_option("--max-per-engine", a.max_per_engine,
                 "knob combinations per engine in the exhaustive space")
      ->capture_default_str();
  app.add_option("--exhaustive-s", a.exhaustive_s,
                 "seconds the exhaustive space of one problem may take (runtime-compiled engines "
                 "build in up to a second each)");
  bool no_host = false;
  app.add_flag("--no-host-overhead", no_host, "skip the host cost of one call");
  app.add_flag("--kernel-cache", a.kernel_cache,
               "instead of the probes above: every heuristic configuration at each --batch, built "
               "on the static graph and on a dynamic-shape graph with one kernel cache for the "
               "batches (build time, median run time, output against the static plan's)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  a.host_overhead = !no_host;
  for (const std::string& text : shapes) {
    Result<Shape> shape = ParseShape(text);
    if (!shape.ok()) {
      std::fprintf(stderr, "ucudnn-engine-probe: %s\n", shape.status().ToString().c_str());
      return 2;
    }
    a.shapes.push_back(*shape);
  }
  return a;
}

// ---- one problem -------------------------------------------------------------------------------

// What one (shape, precision, op, batch) is probed in.
struct Probe {
  const Shape& shape;
  const Precision& precision;
  ConvProblem problem;
  int64_t batch;
  nlohmann::json Key() const {
    return {{"shape", shape.name},
            {"prec", precision.name},
            {"op", std::string(ToString(problem.op))},
            {"batch", batch}};
  }
};

// The legacy algorithms' best times (all, and within 64 MiB) and the fastest one's output, the
// numerical reference for the engines (null when no algorithm ran).
struct LegacyResult {
  double best = kNone, best_64mib = kNone;
  std::unique_ptr<BackendBuffer> reference;
};

LegacyResult ProbeLegacy(CudnnBackend& backend, const Probe& probe, Buffers& b) {
  const ConvProblem& p = probe.problem;
  LegacyResult legacy;
  int best_algo = -1;
  for (const AlgorithmInfo& a : backend.Algorithms(p.op)) {
    auto ws = backend.WorkspaceSize(p, probe.batch, a.id);
    if (!ws.ok() || *ws > kWorkspaceCap) continue;
    auto t = backend.TimeRuns(p, probe.batch, a.id, b.o, b.ws->data(), *ws, 1, 5);
    if (!t.ok()) continue;
    std::vector<double> v = *t;
    std::sort(v.begin(), v.end());
    const double med = v[v.size() / 2];
    if (med < legacy.best) legacy.best = med, best_algo = a.id;
    if (*ws <= (64u << 20)) legacy.best_64mib = std::min(legacy.best_64mib, med);
  }
  if (best_algo < 0) return legacy;
  const size_t bytes = OutputCount(p, probe.batch) * ElementSize(p.data_type);
  auto ws = backend.WorkspaceSize(p, probe.batch, best_algo).value();
  CHECK_OK(backend.Run(p, probe.batch, best_algo, b.o, b.ws->data(), ws, 1.f, 0.f));
  legacy.reference = backend.Allocate(bytes).value();
  CHECK_OK(backend.CopyWithinDevice(legacy.reference->data(), OutputOf(p, b.o), bytes));
  return legacy;
}

// The heuristics' candidates, each built, timed and compared with the legacy output.
struct EngineResult {
  double build_ms = 0, best = kNone, best_64mib = kNone, best_8mib = kNone;
  std::string best_name;
  int built = 0, failed = 0;
  double worst_err = 0;
};

EngineResult ProbeEngines(CudnnBackend& backend, const Probe& probe, const ConvGraph& graph,
                          const std::vector<EngineCandidate>& candidates, const Buffers& b,
                          BackendBuffer* reference, std::ofstream& out) {
  EngineResult r;
  for (const EngineCandidate& c : candidates) {
    const Clock::time_point start = Clock::now();
    auto plan = EnginePlan::Build(backend.handle(), graph, c.config);
    const double build_ms = MsSince(start);
    r.build_ms += build_ms;
    nlohmann::json j = probe.Key();
    j["config"] = EngineConfigKey(c.config);
    j["sources"] = c.sources;
    j["tensor_core"] = c.tensor_core;
    j["rtc"] = c.runtime_compiled;
    j["build_ms"] = build_ms;
    if (!plan.ok()) {
      ++r.failed;
      j["error"] = plan.status().ToString();
      out << j.dump() << "\n";
      continue;
    }
    ++r.built;
    const size_t workspace = (*plan)->workspace_bytes();
    j["workspace"] = workspace;
    if (workspace > kWorkspaceCap) {
      j["error"] = "workspace over probe cap";
      out << j.dump() << "\n";
      continue;
    }
    Result<double> ms = TimeEngine(backend, **plan, b, 5);
    if (!ms.ok()) {
      j["error"] = ms.status().ToString();
      out << j.dump() << "\n";
      continue;
    }
    j["ms"] = *ms;
    if (reference != nullptr) {
      const ConvProblem& p = probe.problem;
      const double err = RelativeDiff(backend, OutputOf(p, b.o), reference->data(),
                                      OutputCount(p, probe.batch), p.data_type);
      j["rel_err_vs_legacy"] = err;
      r.worst_err = std::max(r.worst_err, err);
    }
    if (*ms < r.best) r.best = *ms, r.best_name = EngineConfigKey(c.config) + "/" + c.sources;
    if (workspace <= (64u << 20)) r.best_64mib = std::min(r.best_64mib, *ms);
    if (workspace <= (8u << 20)) r.best_8mib = std::min(r.best_8mib, *ms);
    out << j.dump() << "\n";
  }
  return r;
}

// The exhaustive engine x knob space (at most `max_per_engine` per engine), to compare its best
// with the heuristics' best: a JSON line per configuration timed, the fastest per engine printed.
void ProbeExhaustive(CudnnBackend& backend, const Probe& probe, const ConvGraph& graph,
                     const Buffers& b, double heuristic_best, size_t max_per_engine,
                     double budget_s, std::ofstream& out) {
  const Clock::time_point start = Clock::now();
  auto all = ExhaustiveCandidates(graph, max_per_engine);
  double best = kNone;
  int built = 0, timed = 0;
  std::string best_name;
  std::map<int64_t, std::pair<double, std::string>> engine_best;
  // Round-robin over the engines, so that a budget cut leaves every engine's first knobs timed.
  std::vector<const EngineCandidate*> order;
  if (all.ok()) {
    std::map<int64_t, std::vector<const EngineCandidate*>> by_engine;
    for (const EngineCandidate& c : *all) by_engine[c.config.engine].push_back(&c);
    for (size_t i = 0; order.size() < all->size(); ++i) {
      for (const auto& [engine, list] : by_engine) {
        if (i < list.size()) order.push_back(list[i]);
      }
    }
  }
  for (const EngineCandidate* candidate : order) {
    const EngineCandidate& c = *candidate;
    if (MsSince(start) > budget_s * 1000) break;
    auto plan = EnginePlan::Build(backend.handle(), graph, c.config);
    if (!plan.ok() || (*plan)->workspace_bytes() > kWorkspaceCap) continue;
    ++built;
    auto t = TimeEngine(backend, **plan, b, 3);
    if (!t.ok()) continue;
    ++timed;
    const std::string name = EngineConfigKey(c.config);
    nlohmann::json j = probe.Key();
    j.update({{"exhaustive_config", name},
              {"rtc", c.runtime_compiled},
              {"tensor_core", c.tensor_core},
              {"workspace", (*plan)->workspace_bytes()},
              {"ms", *t}});
    out << j.dump() << "\n";
    if (*t < best) best = *t, best_name = name;
    auto [it, added] = engine_best.try_emplace(c.config.engine, *t, name);
    if (!added && *t < it->second.first) it->second = {*t, name};
  }
  const size_t configs = all.ok() ? all->size() : 0;
  std::printf(
      "  exhaustive: %zu configs, %d built, %d timed, best %.4f ms (%s), %.1f s (heuristics' best "
      "%.4f)\n",
      configs, built, timed, best, best_name.c_str(), MsSince(start) / 1000, heuristic_best);
  for (const auto& [engine, timing] : engine_best)
    std::printf("    engine %3ld best %.4f ms (%s)\n", static_cast<long>(engine), timing.first,
                timing.second.c_str());
  std::fflush(stdout);
  out << nlohmann::json({{"exhaustive", true},
                         {"shape", probe.shape.name},
                         {"op", std::string(ToString(probe.problem.op))},
                         {"batch", probe.batch},
                         {"configs", configs},
                         {"built", built},
                         {"timed", timed},
                         {"best", best},
                         {"best_config", best_name},
                         {"seconds", MsSince(start) / 1000},
                         {"heuristic_best", heuristic_best}})
             .dump()
      << "\n";
}

void PrintProbeHeader() {
  std::printf("%-24s %-10s %-10s %5s | %4s %7s %8s | %9s %9s %9s | %9s %9s | %s\n", "shape", "prec",
              "op", "batch", "cand", "heur_ms", "build_ms", "eng_best", "eng<=64M", "eng<=8M",
              "leg_best", "leg<=64M", "best engine");
}

// One (shape, precision, op, batch): the heuristics' engines beside the legacy algorithms, a row
// of the table and JSON lines to `out`. Returns the graph for the exhaustive probe (null when
// cuDNN could not build it), and the heuristics' best time.
std::pair<std::unique_ptr<ConvGraph>, double> ProbeOne(CudnnBackend& backend, const Probe& probe,
                                                       Buffers& b, std::ofstream& out) {
  const Clock::time_point start = Clock::now();
  auto graph = ConvGraph::Build(backend.handle(), probe.problem, probe.batch);
  if (!graph.ok()) {
    std::printf("graph %s: %s\n", probe.shape.name.c_str(), graph.status().ToString().c_str());
    return {nullptr, kNone};
  }
  auto candidates = HeuristicCandidates(**graph);
  const double heuristics_ms = MsSince(start);
  if (!candidates.ok()) {
    std::printf("heuristics %s: %s\n", probe.shape.name.c_str(),
                candidates.status().ToString().c_str());
    return {nullptr, kNone};
  }
  const LegacyResult legacy = ProbeLegacy(backend, probe, b);
  const EngineResult e =
      ProbeEngines(backend, probe, **graph, *candidates, b, legacy.reference.get(), out);
  std::printf(
      "%-24s %-10s %-10s %5ld | %4zu %7.1f %8.1f | %9.4f %9.4f %9.4f | %9.4f %9.4f | %s (built "
      "%d, failed %d, worst err %.1e)\n",
      probe.shape.name.c_str(), probe.precision.name,
      std::string(ToString(probe.problem.op)).c_str(), static_cast<long>(probe.batch),
      candidates->size(), heuristics_ms, e.build_ms, e.best, e.best_64mib, e.best_8mib, legacy.best,
      legacy.best_64mib, e.best_name.c_str(), e.built, e.failed, e.worst_err);
  std::fflush(stdout);
  nlohmann::json summary = probe.Key();
  summary.update(nlohmann::json{{"summary", true},
                                {"candidates", candidates->size()},
                                {"heur_ms", heuristics_ms},
                                {"build_ms", e.build_ms},
                                {"engine_best", e.best},
                                {"engine_best_64MiB", e.best_64mib},
                                {"engine_best_8MiB", e.best_8mib},
                                {"legacy_best", legacy.best},
                                {"legacy_best_64MiB", legacy.best_64mib},
                                {"best_config", e.best_name},
                                {"built", e.built},
                                {"failed", e.failed},
                                {"worst_rel_err", e.worst_err}});
  out << summary.dump() << "\n";
  return {std::move(*graph), e.best};
}

// ---- the kernel cache ---------------------------------------------------------------------------

// cuDNN's kernel cache (CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR, cuDNN 9.5 and later), finalized
// for `graph`'s topology (a dynamic-shape graph).
Result<BackendDescriptor> MakeKernelCache(const ConvGraph& graph) {
  if (cudnnGetVersion() < 90500) return Unsupported("kernel caches need cuDNN 9.5 or later");
  UCUDNN_ASSIGN_OR_RETURN(BackendDescriptor cache,
                          BackendDescriptor::Create(CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR));
  cudnnBackendDescriptor_t topology = graph.graph();
  if (const cudnnStatus_t set =
          cudnnBackendSetAttribute(cache.get(), CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &topology);
      set != CUDNN_STATUS_SUCCESS) {
    return Unsupported(std::string("kernel cache's graph: ") + cudnnGetErrorString(set));
  }
  if (const cudnnStatus_t done = cudnnBackendFinalize(cache.get()); done != CUDNN_STATUS_SUCCESS) {
    return Unsupported(std::string("kernel cache: ") + cudnnGetErrorString(done));
  }
  return cache;
}

// One configuration's plan on one graph: build time, median run time (5 runs), or why not.
struct BuiltAndTimed {
  double build_ms = 0, ms = kNone;
  std::string error;
};

BuiltAndTimed BuildAndTime(CudnnBackend& backend, const ConvGraph& graph, const EngineConfig& c,
                           cudnnBackendDescriptor_t cache, const Buffers& b) {
  BuiltAndTimed r;
  const Clock::time_point start = Clock::now();
  auto plan = EnginePlan::Build(backend.handle(), graph, c, cache);
  r.build_ms = MsSince(start);
  if (!plan.ok()) {
    r.error = plan.status().ToString();
    return r;
  }
  if ((*plan)->workspace_bytes() > b.ws->size()) {
    r.error = "workspace over probe cap";
    return r;
  }
  Result<double> ms = TimeEngine(backend, **plan, b, 5);
  if (ms.ok()) {
    r.ms = *ms;
  } else {
    r.error = ms.status().ToString();
  }
  return r;
}

// --kernel-cache: whether a dynamic-shape graph with a kernel cache spares a runtime-compiled
// engine its compilation at every micro-batch size (the worker builds each configuration at up to
// nine sizes), and whether its kernel runs as fast as the static graph's. Every heuristic
// configuration of the static graph at each batch (in the order given: the first fills the
// cache), built both ways; one kernel cache per (shape, precision, op). A JSON line per (batch,
// configuration), a summary line and a row.
void ProbeKernelCache(CudnnBackend& backend, const Shape& shape, const Precision& prec, ConvOp op,
                      const std::vector<int64_t>& batches, std::ofstream& out) {
  const ConvProblem p = MakeProblem(shape, op, prec.dt, prec.layout, prec.math);
  Buffers b =
      MakeBuffers(backend, p, *std::max_element(batches.begin(), batches.end()), kWorkspaceCap);
  BackendDescriptor cache;
  std::string cache_error;
  double static_rtc_build_ms = 0, dynamic_rtc_build_ms = 0, worst_diff = 0;
  std::vector<double> rtc_ratios, other_ratios;
  int dynamic_failures = 0, candidate_lists_differ = 0;
  for (int64_t batch : batches) {
    const Probe probe{shape, prec, p, batch};
    auto fixed = ConvGraph::Build(backend.handle(), p, batch);
    auto dynamic = ConvGraph::Build(backend.handle(), p, batch, 0.0f, /*dynamic_shape=*/true);
    if (!fixed.ok() || !dynamic.ok()) {
      std::printf("graph %s at %ld: %s\n", shape.name.c_str(), static_cast<long>(batch),
                  (!fixed.ok() ? fixed.status() : dynamic.status()).ToString().c_str());
      return;
    }
    if (cache.get() == nullptr && cache_error.empty()) {
      auto made = MakeKernelCache(**dynamic);
      if (made.ok()) {
        cache = std::move(*made);
      } else {
        cache_error = made.status().ToString();
      }
    }
    auto candidates = HeuristicCandidates(**fixed);
    auto dynamic_candidates = HeuristicCandidates(**dynamic);
    if (!candidates.ok()) continue;
    std::set<std::string> fixed_keys, dynamic_keys;
    for (const EngineCandidate& c : *candidates) fixed_keys.insert(EngineConfigKey(c.config));
    if (dynamic_candidates.ok()) {
      for (const EngineCandidate& c : *dynamic_candidates) {
        dynamic_keys.insert(EngineConfigKey(c.config));
      }
    }
    if (fixed_keys != dynamic_keys) ++candidate_lists_differ;
    const size_t bytes = OutputCount(p, batch) * ElementSize(p.data_type);
    auto reference = backend.Allocate(bytes).value();
    for (const EngineCandidate& c : *candidates) {
      const BuiltAndTimed s = BuildAndTime(backend, **fixed, c.config, nullptr, b);
      if (s.error.empty()) {
        CHECK_OK(backend.CopyWithinDevice(reference->data(), OutputOf(p, b.o), bytes));
      }
      const BuiltAndTimed d = BuildAndTime(backend, **dynamic, c.config, cache.get(), b);
      nlohmann::json j = probe.Key();
      j.update({{"kernel_cache", true},
                {"config", EngineConfigKey(c.config)},
                {"rtc", c.runtime_compiled},
                {"in_dynamic_heuristics", dynamic_keys.count(EngineConfigKey(c.config)) > 0},
                {"static_build_ms", s.build_ms},
                {"dynamic_build_ms", d.build_ms}});
      if (s.error.empty()) j["static_ms"] = s.ms;
      if (!s.error.empty()) j["static_error"] = s.error;
      if (d.error.empty()) j["dynamic_ms"] = d.ms;
      if (!d.error.empty()) j["dynamic_error"] = d.error;
      if (s.error.empty() && d.error.empty()) {
        const double diff = RelativeDiff(backend, OutputOf(p, b.o), reference->data(),
                                         bytes / ElementSize(p.data_type), p.data_type);
        j["rel_diff_dynamic_vs_static"] = diff;
        worst_diff = std::max(worst_diff, diff);
        (c.runtime_compiled ? rtc_ratios : other_ratios).push_back(d.ms / s.ms);
      } else if (s.error.empty()) {
        ++dynamic_failures;
      }
      if (c.runtime_compiled) {
        static_rtc_build_ms += s.build_ms;
        dynamic_rtc_build_ms += d.build_ms;
      }
      out << j.dump() << "\n";
    }
  }
  const auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const auto largest = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  std::printf(
      "%-18s %-9s %-10s | rtc build s static %6.1f dynamic %6.1f | run dynamic/static rtc median "
      "%.3f max %.3f (%zu), other median %.3f max %.3f (%zu) | dynamic failed %d, lists differ "
      "%d, worst diff %.1e%s%s\n",
      shape.name.c_str(), prec.name, std::string(ToString(op)).c_str(), static_rtc_build_ms / 1000,
      dynamic_rtc_build_ms / 1000, median(rtc_ratios), largest(rtc_ratios), rtc_ratios.size(),
      median(other_ratios), largest(other_ratios), other_ratios.size(), dynamic_failures,
      candidate_lists_differ, worst_diff,
      cache_error.empty() ? "" : " | no cache: ", cache_error.c_str());
  std::fflush(stdout);
  out << nlohmann::json({{"kernel_cache_summary", true},
                         {"shape", shape.name},
                         {"prec", prec.name},
                         {"op", std::string(ToString(op))},
                         {"batches", batches},
                         {"static_rtc_build_ms", static_rtc_build_ms},
                         {"dynamic_rtc_build_ms", dynamic_rtc_build_ms},
                         {"rtc_run_ratio_median", median(rtc_ratios)},
                         {"rtc_run_ratio_max", largest(rtc_ratios)},
                         {"rtc_runs_compared", rtc_ratios.size()},
                         {"other_run_ratio_median", median(other_ratios)},
                         {"other_run_ratio_max", largest(other_ratios)},
                         {"other_runs_compared", other_ratios.size()},
                         {"dynamic_failures", dynamic_failures},
                         {"candidate_lists_differ", candidate_lists_differ},
                         {"worst_rel_diff", worst_diff},
                         {"cache_error", cache_error}})
             .dump()
      << "\n";
}

// ---- host cost of one call ---------------------------------------------------------------------

constexpr int kHostCalls = 2000;

// Microseconds per call of `call`, over kHostCalls calls, timed on the host (the device work
// they queue is waited for after the clock stops).
template <typename Call>
double HostUsPerCall(CudnnBackend& backend, Call&& call) {
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < kHostCalls; ++i) call();
  const double us = MsSince(start) * 1000 / kHostCalls;
  CHECK_OK(backend.Synchronize());
  return us;
}

void CheckCudnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: %s\n", what, cudnnGetErrorString(status));
    std::exit(1);
  }
}

// A variant pack of x, y and w over `b`, with the statuses of filling it, of filling it again
// once finalized (does cuDNN allow reuse?) and of executing the plan with it.
struct ReusedPack {
  BackendDescriptor pack;
  void* pointers[3];
  void* workspace;
  int64_t uids[3] = {'x', 'y', 'w'};
  cudnnStatus_t Fill() {
    const cudnnStatus_t statuses[] = {
        cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                 3, uids),
        cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                 CUDNN_TYPE_VOID_PTR, 3, pointers),
        cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                 1, &workspace),
        cudnnBackendFinalize(pack.get())};
    for (cudnnStatus_t s : statuses) {
      if (s != CUDNN_STATUS_SUCCESS) return s;
    }
    return CUDNN_STATUS_SUCCESS;
  }
};

// Host microseconds per call of one engine plan: a plan's Execute as the backend calls it (a
// variant pack made per call), refilling one finalized variant pack, executing with a finalized
// pack alone (the floor), and the legacy call. -1 where the pack cannot be reused.
void ProbeHostOverhead(CudnnBackend& backend, std::ofstream& out) {
  const Shape tiny = {"tiny_1x1_64_7", 64, 7, 7, 64, 1, 1, 0, 1};
  const ConvProblem p =
      MakeProblem(tiny, ConvOp::kForward, DataType::kFloat32, Layout::kNCHW, MathMode::kDefault);
  Buffers b = MakeBuffers(backend, p, 1, 64u << 20);
  auto graph = ConvGraph::Build(backend.handle(), p, 1).value();
  const std::vector<EngineCandidate> candidates = HeuristicCandidates(*graph).value();
  for (const EngineCandidate& c : candidates) {
    auto built = EnginePlan::Build(backend.handle(), *graph, c.config);
    if (!built.ok()) continue;
    EnginePlan& plan = **built;
    const auto execute = [&] {
      CHECK_OK(plan.Execute(backend.handle(), b.o, b.ws->data(), b.ws->size()));
    };
    execute();
    CHECK_OK(backend.Synchronize());
    const double per_create = HostUsPerCall(backend, execute);

    ReusedPack vp{BackendDescriptor::Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR).value(),
                  {const_cast<void*>(b.o.x), b.o.y, const_cast<void*>(b.o.w)},
                  b.ws->data()};
    const cudnnStatus_t first = vp.Fill();
    const cudnnStatus_t again = vp.Fill();  // on a finalized descriptor
    const cudnnStatus_t exec = cudnnBackendExecute(backend.handle(), plan.plan(), vp.pack.get());
    const bool reusable = first == CUDNN_STATUS_SUCCESS && again == CUDNN_STATUS_SUCCESS &&
                          exec == CUDNN_STATUS_SUCCESS;
    CHECK_OK(backend.Synchronize());
    const auto execute_pack = [&] {
      CheckCudnn(cudnnBackendExecute(backend.handle(), plan.plan(), vp.pack.get()),
                 "cudnnBackendExecute");
    };
    const double per_reuse = reusable ? HostUsPerCall(backend,
                                                      [&] {
                                                        CheckCudnn(vp.Fill(), "variant pack");
                                                        execute_pack();
                                                      })
                                      : -1;
    const double per_exec =
        exec == CUDNN_STATUS_SUCCESS ? HostUsPerCall(backend, execute_pack) : -1;
    const double per_legacy = HostUsPerCall(backend, [&] {
      CHECK_OK(backend.Run(p, 1, 1, b.o, b.ws->data(), b.ws->size(), 1.f, 0.f));
    });
    std::printf(
        "host us/call %s: create-per-call %.2f, refill-finalized %.2f (status first %d again %d "
        "exec %d), execute-only %.2f, legacy %.2f\n",
        EngineConfigKey(c.config).c_str(), per_create, per_reuse, first, again, exec, per_exec,
        per_legacy);
    out << nlohmann::json({{"host_overhead", true},
                           {"config", EngineConfigKey(c.config)},
                           {"create_per_call_us", per_create},
                           {"refill_us", per_reuse},
                           {"refill_status", {first, again, exec}},
                           {"execute_only_us", per_exec},
                           {"legacy_us", per_legacy}})
               .dump()
        << "\n";
    return;
  }
}

int Main(int argc, char** argv) {
  std::variant<Args, int> parsed = ParseArgs(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const Args& args = std::get<Args>(parsed);
  std::ofstream out(args.out_path);
  if (!out) {
    std::fprintf(stderr, "ucudnn-engine-probe: cannot write %s\n", args.out_path.c_str());
    return 1;
  }
  auto backend = CudnnBackend::Create(0).value();
  std::printf("cuDNN runtime %zu, GPU %s\n", cudnnGetVersion(),
              backend->fingerprint().name.c_str());
  std::vector<int64_t> batches =
      args.quick ? std::vector<int64_t>{64} : std::vector<int64_t>{32, 256};
  if (!args.batches.empty()) batches = args.batches;
  const bool own_shapes = !args.shapes.empty();
  const std::vector<Shape>& shapes = own_shapes ? args.shapes : kShapes;
  const auto chosen = [](const std::vector<std::string>& only, const std::string& name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  if (args.kernel_cache) {
    for (const Precision& prec : kPrecisions) {
      if (!chosen(args.precisions, prec.name)) continue;
      for (const Shape& shape : shapes) {
        for (ConvOp op : kOps) {
          if (chosen(args.ops, std::string(ToString(op)))) {
            ProbeKernelCache(*backend, shape, prec, op, batches, out);
          }
        }
      }
    }
    return 0;
  }
  PrintProbeHeader();
  for (const Precision& prec : kPrecisions) {
    if (!chosen(args.precisions, prec.name)) continue;
    for (const Shape& shape : shapes) {
      for (ConvOp op : kOps) {
        if (!chosen(args.ops, std::string(ToString(op)))) continue;
        for (int64_t batch : batches) {
          const Probe probe{shape, prec, MakeProblem(shape, op, prec.dt, prec.layout, prec.math),
                            batch};
          Buffers b = MakeBuffers(*backend, probe.problem, batch, kWorkspaceCap);
          auto [graph, best] = ProbeOne(*backend, probe, b, out);
          // The exhaustive space: every shape given on the command line, else the first
          // precision's 3x3 layer at the first batch only.
          const bool exhaustive =
              own_shapes || (prec.dt == DataType::kFloat32 && batch == batches.front() &&
                             shape.name == "r50_3x3_256_14");
          if (graph != nullptr && args.exhaustive && exhaustive) {
            ProbeExhaustive(*backend, probe, *graph, b, best, args.max_per_engine,
                            args.exhaustive_s, out);
          }
        }
      }
    }
    if (args.quick) break;
  }
  if (args.host_overhead) ProbeHostOverhead(*backend, out);
  return 0;
}
}  // namespace
}  // namespace ucudnn

int main(int argc, char** argv) { return ucudnn::Main(argc, argv); }
