// Test helper: writes a local plan cache file (client/src/plan_cache.h) with per-kernel plans
// for the CPU backend of this machine, so that a client (the Python adapter's tests) runs real
// micro-batched plans without a server. Each plan splits the mini-batch into halves (power-of-two
// micro-batches), its segments cycling through ALGOS (default "1,2": the two im2col algorithms),
// with the workspaces the backend reports. SPLIT "whole" writes undivided plans instead (one
// segment of the whole mini-batch, recorded for the undivided policy: the adapter's overhead
// benchmark).
//
//   ucudnn_test_write_plan_cache OUT LIMIT_BYTES KERNELS_FILE [ALGOS [halves|whole [FRAMEWORK]]]
//
// FRAMEWORK: the framework identity the plans were asked with (UCUDNN_FRAMEWORK); a kernel line
// ending in the word "framework" then gets the plan that chose the framework's own convolution
// (one whole-batch segment of algo -2).
//
// KERNELS_FILE: one kernel a line, the fields of ucudnnConvShape_t (ucudnn_shape.h) in its order,
// "op n c h w k r s pad_h pad_w stride_h stride_w dil_h dil_w groups [data_type layout math
// [d t pad_d stride_d dilation_d]]", with op 0 (forward), 1 (backward-data) or 2
// (backward-filter); without the last three, fp32 NCHW, default math; without the depth, 2-D.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "plan_cache.h"
#include "shape_problem.h"
#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/plan.h"

namespace {

using ucudnn::ConvProblem;

// Micro-batch sizes: the largest power of two not above half the batch, repeated, the rest in
// power-of-two pieces (batch 1 stays whole).
std::vector<int64_t> MicroBatches(int64_t batch) {
  int64_t micro = 1;
  while (micro * 2 <= batch / 2) micro *= 2;
  std::vector<int64_t> sizes;
  int64_t left = batch;
  while (left >= micro) {
    sizes.push_back(micro);
    left -= micro;
  }
  for (int64_t piece = micro / 2; left > 0; piece /= 2) {
    if (piece <= left) {
      sizes.push_back(piece);
      left -= piece;
    }
  }
  return sizes;
}

int Fail(const std::string& message) {
  std::cerr << "ucudnn_test_write_plan_cache: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 7) {
    return Fail("usage: OUT LIMIT_BYTES KERNELS_FILE [ALGOS [halves|whole [FRAMEWORK]]]");
  }
  const std::string split = argc >= 6 ? argv[5] : "halves";
  const std::string framework = argc == 7 ? argv[6] : "";
  if (split != "halves" && split != "whole") {
    return Fail("SPLIT: expected 'halves' or 'whole', got '" + split + "'");
  }
  const bool whole = split == "whole";
  std::vector<int> algos;
  std::istringstream algo_list(argc >= 5 ? argv[4] : "1,2");
  for (std::string algo; std::getline(algo_list, algo, ',');) {
    if (algo.empty() || algo.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(algo) >= ucudnn::kCpuAlgoCount) {
      return Fail("ALGOS: expected CPU algorithm ids 0-2 separated by commas, got '" +
                  std::string(argv[4]) + "'");
    }
    algos.push_back(std::stoi(algo));
  }
  if (algos.empty()) return Fail("ALGOS: expected at least one CPU algorithm id");
  const std::string out = argv[1];
  const uint64_t limit = std::stoull(argv[2]);
  std::ifstream lines(argv[3]);
  if (!lines) return Fail(std::string("cannot read ") + argv[3]);

  ucudnn::CpuBackend backend;
  ucudnn::client::PlanCache cache;
  std::string line;
  int written = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    constexpr std::string_view kFrameworkWord = "framework";
    const bool runs_framework =
        line.size() > kFrameworkWord.size() &&
        std::string_view(line).substr(line.size() - kFrameworkWord.size()) == kFrameworkWord;
    if (runs_framework && framework.empty()) {
      return Fail("'" + line + "': a framework plan needs FRAMEWORK");
    }
    std::istringstream fields(runs_framework ? line.substr(0, line.size() - kFrameworkWord.size())
                                             : line);
    ucudnnConvShape_t shape{};
    int op = 0;
    int data_type = UCUDNN_SHAPE_FLOAT;
    int layout = UCUDNN_SHAPE_NCHW;
    int math = UCUDNN_SHAPE_MATH_DEFAULT;
    if (!(fields >> op >> shape.n >> shape.c >> shape.h >> shape.w >> shape.k >> shape.r >>
          shape.s >> shape.pad_h >> shape.pad_w >> shape.stride_h >> shape.stride_w >>
          shape.dilation_h >> shape.dilation_w >> shape.groups)) {
      return Fail("bad kernel line: '" + line + "'");
    }
    if (fields >> data_type && !(fields >> layout >> math)) {
      return Fail("bad kernel line: '" + line + "' (data_type needs layout and math after it)");
    }
    if (fields >> shape.d &&
        !(fields >> shape.t >> shape.pad_d >> shape.stride_d >> shape.dilation_d)) {
      return Fail("bad kernel line: '" + line + "' (d needs t pad_d stride_d dilation_d after it)");
    }
    shape.op = static_cast<ucudnnConvolutionOp_t>(op);
    shape.data_type = static_cast<ucudnnShapeDataType_t>(data_type);
    shape.layout = static_cast<ucudnnShapeLayout_t>(layout);
    shape.math = static_cast<ucudnnShapeMath_t>(math);
    const ucudnn::Result<ucudnn::client::ShapeKernel> kernel = ucudnn::client::ToShapeKernel(shape);
    if (!kernel.ok()) return Fail("'" + line + "': " + kernel.status().message());
    const ConvProblem& p = kernel->problem;
    const int64_t batch = kernel->batch;
    ucudnn::KernelPlan plan;
    plan.kernel = ucudnn::Kernel{p, batch, ""};
    plan.status = ucudnn::KernelPlanStatus::kPlanned;
    int index = 0;
    if (runs_framework) {
      plan.config.segments.push_back(
          ucudnn::Segment{batch, ucudnn::kFrameworkAlgo, 1.0, 0, framework});
      plan.config.time_ms = 1.0;
    }
    for (const int64_t micro : runs_framework ? std::vector<int64_t>{}
                               : whole        ? std::vector<int64_t>{batch}
                                              : MicroBatches(batch)) {
      const int algo = algos[index++ % algos.size()];
      ucudnn::Result<size_t> bytes = backend.WorkspaceSize(p, micro, algo);
      if (!bytes.ok()) return Fail("'" + line + "': " + bytes.status().ToString());
      plan.config.segments.push_back(ucudnn::Segment{micro, algo, 1.0, *bytes, {}});
      plan.config.workspace_bytes = std::max<uint64_t>(plan.config.workspace_bytes, *bytes);
      plan.config.time_ms += 1.0;
    }
    if (plan.config.workspace_bytes > limit) return Fail("'" + line + "': over the limit");
    ucudnn::client::CacheRecord record;
    record.device = backend.fingerprint();
    record.plan.workspace_mode = ucudnn::WorkspaceMode::kPerKernel;
    record.plan.policy = whole ? ucudnn::BatchPolicy::kUndivided : ucudnn::BatchPolicy::kPowerOfTwo;
    record.plan.workspace_budget_bytes = limit;
    record.plan.total_time_ms = plan.config.time_ms;
    record.plan.complete = true;
    record.plan.framework = framework;
    record.plan.kernels.push_back(plan);
    cache.Put(std::move(record));
    ++written;
  }
  if (ucudnn::Status saved = cache.Save(out); !saved.ok()) return Fail(saved.ToString());
  std::printf("%d kernel plans written to %s\n", written, out.c_str());
  return 0;
}
