// ucudnn-engine-probe: what cuDNN's graph API offers for real layer shapes on this GPU, beside
// the legacy algorithms, before the planner uses it. For each shape, op, precision and batch:
// the heuristics' engine configurations (modes instant, B, fallback), the time to build each
// execution plan, its workspace and median run time; the legacy algorithms' best; optionally the
// exhaustive engine x knob space (capped) to compare the best found; and the host cost of one
// call for the variant-pack strategies. JSON lines to --out, a summary table to stdout.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ucudnn/core/cudnn_backend.h"
#include "ucudnn/core/cudnn_engines.h"
#include "ucudnn/core/random_fill.h"
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
  const char* name;
  int64_t c, h, w, k, r, s, pad, stride;
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

// Median of `runs` runs (after one warm-up), each between a pair of events.
Result<double> TimeEngine(CudnnBackend& backend, EnginePlan& plan, const Buffers& b, int runs) {
  cudnnHandle_t h = backend.handle();
  UCUDNN_RETURN_IF_ERROR(plan.Execute(h, b.o, b.ws->data(), b.ws->size()));
  std::vector<cudaEvent_t> ev(2 * runs);
  for (auto& e : ev) cudaEventCreate(&e);
  cudaStream_t s = backend.stream();
  for (int i = 0; i < runs; ++i) {
    cudaEventRecord(ev[2 * i], s);
    UCUDNN_RETURN_IF_ERROR(plan.Execute(h, b.o, b.ws->data(), b.ws->size()));
    cudaEventRecord(ev[2 * i + 1], s);
  }
  if (cudaEventSynchronize(ev.back()) != cudaSuccess) return Internal("event sync failed");
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
    t.push_back(ms);
  }
  for (auto& e : ev) cudaEventDestroy(e);
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

int Main(int argc, char** argv) {
  std::string out_path = "engine_probe.jsonl";
  bool exhaustive = false;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    if (a == "--exhaustive") exhaustive = true;
    if (a == "--quick") quick = true;
  }
  std::ofstream out(out_path);
  auto backend = CudnnBackend::Create(0).value();
  std::printf("cuDNN runtime %zu, GPU %s\n", cudnnGetVersion(),
              backend->fingerprint().name.c_str());
  const std::vector<Shape> shapes = {
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
  const std::vector<Precision> precisions = {
      {"fp32_nchw", DataType::kFloat32, Layout::kNCHW, MathMode::kDefault},
      {"fp16_nhwc", DataType::kFloat16, Layout::kNHWC, MathMode::kTensorOp},
      {"bf16_nhwc", DataType::kBFloat16, Layout::kNHWC, MathMode::kTensorOp},
  };
  const std::vector<int64_t> batches =
      quick ? std::vector<int64_t>{64} : std::vector<int64_t>{32, 256};
  const ConvOp ops[] = {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter};
  const size_t kWs = size_t{1} << 30;
  std::printf("%-24s %-10s %-10s %5s | %4s %7s %8s | %9s %9s %9s | %9s %9s | %s\n", "shape", "prec",
              "op", "batch", "cand", "heur_ms", "build_ms", "eng_best", "eng<=64M", "eng<=8M",
              "leg_best", "leg<=64M", "best engine");
  for (const Precision& prec : precisions) {
    for (const Shape& shape : shapes) {
      for (ConvOp op : ops) {
        for (int64_t batch : batches) {
          const ConvProblem p = MakeProblem(shape, op, prec.dt, prec.layout, prec.math);
          Buffers b = MakeBuffers(*backend, p, batch, kWs);
          Clock::time_point t0 = Clock::now();
          auto graph = ConvGraph::Build(backend->handle(), p, batch);
          if (!graph.ok()) {
            std::printf("graph %s: %s\n", shape.name, graph.status().ToString().c_str());
            continue;
          }
          auto cands = HeuristicCandidates(**graph);
          const double heur_ms = MsSince(t0);
          if (!cands.ok()) {
            std::printf("heuristics %s: %s\n", shape.name, cands.status().ToString().c_str());
            continue;
          }
          double build_total = 0, best = 1e30, best64 = 1e30, best8 = 1e30;
          std::string best_name;
          std::vector<unsigned char> ref;
          // Legacy reference result and times.
          double leg = 1e30, leg64 = 1e30;
          int leg_algo = -1;
          for (const AlgorithmInfo& a : backend->Algorithms(op)) {
            auto ws = backend->WorkspaceSize(p, batch, a.id);
            if (!ws.ok() || *ws > kWs) continue;
            auto t = backend->TimeRuns(p, batch, a.id, b.o, b.ws->data(), *ws, 1, 5);
            if (!t.ok()) continue;
            std::vector<double> v = *t;
            std::sort(v.begin(), v.end());
            const double med = v[v.size() / 2];
            if (med < leg) leg = med, leg_algo = a.id;
            if (*ws <= (64u << 20)) leg64 = std::min(leg64, med);
          }
          // Legacy output as the numerical reference for the engines.
          std::unique_ptr<BackendBuffer> refbuf;
          const size_t oc = OutputCount(p, batch);
          if (leg_algo >= 0) {
            auto ws = backend->WorkspaceSize(p, batch, leg_algo).value();
            CHECK_OK(backend->Run(p, batch, leg_algo, b.o, b.ws->data(), ws, 1.f, 0.f));
            refbuf = backend->Allocate(oc * ElementSize(p.data_type)).value();
            cudaMemcpy(refbuf->data(), OutputOf(p, b.o), oc * ElementSize(p.data_type),
                       cudaMemcpyDeviceToDevice);
          }
          int built = 0, failed = 0;
          double worst_err = 0;
          for (const EngineCandidate& c : *cands) {
            Clock::time_point tb = Clock::now();
            auto plan = EnginePlan::Build(backend->handle(), **graph, c.config);
            const double bms = MsSince(tb);
            build_total += bms;
            nlohmann::json j = {{"shape", shape.name},
                                {"prec", prec.name},
                                {"op", std::string(ToString(op))},
                                {"batch", batch},
                                {"config", EngineConfigKey(c.config)},
                                {"sources", c.sources},
                                {"tensor_core", c.tensor_core},
                                {"rtc", c.runtime_compiled},
                                {"build_ms", bms}};
            if (!plan.ok()) {
              ++failed;
              j["error"] = plan.status().ToString();
              out << j.dump() << "\n";
              continue;
            }
            ++built;
            j["workspace"] = (*plan)->workspace_bytes();
            if ((*plan)->workspace_bytes() > kWs) {
              j["error"] = "workspace over probe cap";
              out << j.dump() << "\n";
              continue;
            }
            auto t = TimeEngine(*backend, **plan, b, 5);
            if (!t.ok()) {
              j["error"] = t.status().ToString();
              out << j.dump() << "\n";
              continue;
            }
            j["ms"] = *t;
            if (refbuf) {
              const double err =
                  RelativeDiff(*backend, OutputOf(p, b.o), refbuf->data(), oc, p.data_type);
              j["rel_err_vs_legacy"] = err;
              worst_err = std::max(worst_err, err);
            }
            if (*t < best) best = *t, best_name = EngineConfigKey(c.config) + "/" + c.sources;
            if ((*plan)->workspace_bytes() <= (64u << 20)) best64 = std::min(best64, *t);
            if ((*plan)->workspace_bytes() <= (8u << 20)) best8 = std::min(best8, *t);
            out << j.dump() << "\n";
          }
          std::printf(
              "%-24s %-10s %-10s %5ld | %4zu %7.1f %8.1f | %9.4f %9.4f %9.4f | %9.4f %9.4f | %s "
              "(built %d, failed %d, worst err %.1e)\n",
              shape.name, prec.name, std::string(ToString(op)).c_str(), static_cast<long>(batch),
              cands->size(), heur_ms, build_total, best, best64, best8, leg, leg64,
              best_name.c_str(), built, failed, worst_err);
          std::fflush(stdout);
          out << nlohmann::json({{"summary", true},
                                 {"shape", shape.name},
                                 {"prec", prec.name},
                                 {"op", std::string(ToString(op))},
                                 {"batch", batch},
                                 {"candidates", cands->size()},
                                 {"heur_ms", heur_ms},
                                 {"build_ms", build_total},
                                 {"engine_best", best},
                                 {"engine_best_64MiB", best64},
                                 {"engine_best_8MiB", best8},
                                 {"legacy_best", leg},
                                 {"legacy_best_64MiB", leg64},
                                 {"best_config", best_name},
                                 {"built", built},
                                 {"failed", failed},
                                 {"worst_rel_err", worst_err}})
                     .dump()
              << "\n";
          // The exhaustive space for the first precision's 3x3 layer, batch 32 only.
          if (exhaustive && prec.dt == DataType::kFloat32 && batch == batches.front() &&
              std::string(shape.name) == "r50_3x3_256_14") {
            Clock::time_point te = Clock::now();
            auto all = ExhaustiveCandidates(**graph, 24);
            double ebest = 1e30;
            int eb = 0, et = 0;
            std::string ename;
            if (all.ok()) {
              for (const EngineCandidate& c : *all) {
                auto plan = EnginePlan::Build(backend->handle(), **graph, c.config);
                if (!plan.ok() || (*plan)->workspace_bytes() > kWs) continue;
                ++eb;
                auto t = TimeEngine(*backend, **plan, b, 3);
                if (!t.ok()) continue;
                ++et;
                if (*t < ebest) ebest = *t, ename = EngineConfigKey(c.config);
              }
            }
            std::printf(
                "  exhaustive: %zu configs, %d built, %d timed, best %.4f ms (%s), %.1f s "
                "(heuristics' best %.4f)\n",
                all.ok() ? all->size() : 0, eb, et, ebest, ename.c_str(), MsSince(te) / 1000, best);
            out << nlohmann::json({{"exhaustive", true},
                                   {"shape", shape.name},
                                   {"op", std::string(ToString(op))},
                                   {"batch", batch},
                                   {"configs", all.ok() ? all->size() : 0},
                                   {"built", eb},
                                   {"timed", et},
                                   {"best", ebest},
                                   {"best_config", ename},
                                   {"seconds", MsSince(te) / 1000},
                                   {"heuristic_best", best}})
                       .dump()
                << "\n";
          }
        }
      }
    }
    if (quick) break;
  }
  // Host cost of one call: tiny problem, each call timed on the host over 2000 calls.
  {
    const Shape tiny = {"tiny_1x1_64_7", 64, 7, 7, 64, 1, 1, 0, 1};
    const ConvProblem p =
        MakeProblem(tiny, ConvOp::kForward, DataType::kFloat32, Layout::kNCHW, MathMode::kDefault);
    Buffers b = MakeBuffers(*backend, p, 1, 64u << 20);
    auto graph = ConvGraph::Build(backend->handle(), p, 1).value();
    auto cands = HeuristicCandidates(*graph).value();
    for (const EngineCandidate& c : cands) {
      auto plan = EnginePlan::Build(backend->handle(), *graph, c.config);
      if (!plan.ok()) continue;
      const int n = 2000;
      CHECK_OK((*plan)->Execute(backend->handle(), b.o, b.ws->data(), b.ws->size()));
      CHECK_OK(backend->Synchronize());
      Clock::time_point t = Clock::now();
      for (int i = 0; i < n; ++i) {
        CHECK_OK((*plan)->Execute(backend->handle(), b.o, b.ws->data(), b.ws->size()));
      }
      const double per_create = MsSince(t) * 1000 / n;
      CHECK_OK(backend->Synchronize());
      // Reuse: one variant pack, attributes set again after finalize.
      BackendDescriptor vp =
          BackendDescriptor::Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR).value();
      void* ptrs[3] = {const_cast<void*>(b.o.x), b.o.y, const_cast<void*>(b.o.w)};
      int64_t uids[3] = {'x', 'y', 'w'};
      void* ws = b.ws->data();
      auto fill = [&]() {
        cudnnStatus_t s1 = cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                                    CUDNN_TYPE_INT64, 3, uids);
        cudnnStatus_t s2 = cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                                    CUDNN_TYPE_VOID_PTR, 3, ptrs);
        cudnnStatus_t s3 = cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                                    CUDNN_TYPE_VOID_PTR, 1, &ws);
        cudnnStatus_t s4 = cudnnBackendFinalize(vp.get());
        return std::max({(int)s1, (int)s2, (int)s3, (int)s4});
      };
      int first = fill();
      int again = fill();  // on a finalized descriptor
      int exec = (int)cudnnBackendExecute(backend->handle(), (*plan)->plan(), vp.get());
      double per_reuse = -1;
      if (first == 0 && again == 0 && exec == 0) {
        t = Clock::now();
        for (int i = 0; i < n; ++i) {
          fill();
          cudnnBackendExecute(backend->handle(), (*plan)->plan(), vp.get());
        }
        per_reuse = MsSince(t) * 1000 / n;
      }
      CHECK_OK(backend->Synchronize());
      // Plain execute with a finalized pack (no refill): the floor.
      t = Clock::now();
      for (int i = 0; i < n; ++i) cudnnBackendExecute(backend->handle(), (*plan)->plan(), vp.get());
      const double per_exec = MsSince(t) * 1000 / n;
      CHECK_OK(backend->Synchronize());
      // Legacy call for comparison.
      t = Clock::now();
      for (int i = 0; i < n; ++i) {
        CHECK_OK(backend->Run(p, 1, 1, b.o, b.ws->data(), b.ws->size(), 1.f, 0.f));
      }
      const double per_legacy = MsSince(t) * 1000 / n;
      CHECK_OK(backend->Synchronize());
      std::printf(
          "host us/call %s: create-per-call %.2f, refill-finalized %.2f (status first %d "
          "again %d exec %d), execute-only %.2f, legacy %.2f\n",
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
      break;
    }
  }
  return 0;
}

}  // namespace
}  // namespace ucudnn

int main(int argc, char** argv) { return ucudnn::Main(argc, argv); }
