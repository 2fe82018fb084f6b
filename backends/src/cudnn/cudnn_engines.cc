// cuDNN's graph API for one convolution (see cudnn_engines.h). Every call's status is checked;
// a configuration cuDNN declines (3xxx) becomes kUnsupported with cuDNN's own words.
#include "ucudnn/backends/cudnn_engines.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "cuda_check.h"
#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/core/compiled_plans.h"

namespace ucudnn {
namespace {

// The graph's tensors, named as PyTorch names them: the input-shaped tensor (x or dx), the
// output-shaped one (y or dy) and the filter (w or dw).
constexpr int64_t kInputUid = 'x';
constexpr int64_t kOutputUid = 'y';
constexpr int64_t kFilterUid = 'w';

// The handle attributes of the operation graph and the execution plan are deprecated in cuDNN
// 9.x in favour of device-property descriptors, but they are what every 9.x release accepts;
// the deprecation is silenced for these two uses only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

Status Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void* values) {
  UCUDNN_GPU_CHECK(cudnnBackendSetAttribute(d, name, type, count, values));
  return Status::Ok();
}

Status SetInt64s(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                 const std::vector<int64_t>& values) {
  return Set(d, name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

Status SetDescriptor(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                     const BackendDescriptor& value) {
  cudnnBackendDescriptor_t raw = value.get();
  return Set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

Status Finalize(cudnnBackendDescriptor_t d) {
  UCUDNN_GPU_CHECK(cudnnBackendFinalize(d));
  return Status::Ok();
}

// Dimensions are always given in NC(D)HW order, {n, c, spatial...}; the strides say where each
// element lives: dense in that order, or with the channels innermost (NHWC, NDHWC).
std::vector<int64_t> Strides(Layout layout, const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size());
  int64_t stride = 1;
  if (layout == Layout::kNHWC) {
    strides[1] = 1;
    stride = dims[1];
    for (size_t i = dims.size() - 1; i >= 2; --i) {
      strides[i] = stride;
      stride *= dims[i];
    }
    strides[0] = stride;
    return strides;
  }
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return strides;
}

// The dimensions of an operand: {n, c, (d,) h, w} of the problem's rank.
std::vector<int64_t> Dims(const ConvProblem& p, int64_t n, int64_t c, int64_t d, int64_t h,
                          int64_t w) {
  if (p.is_3d()) return {n, c, d, h, w};
  return {n, c, h, w};
}

Result<BackendDescriptor> Tensor(int64_t uid, cudnnDataType_t type,
                                 const std::vector<int64_t>& dims, Layout layout,
                                 int64_t alignment) {
  UCUDNN_ASSIGN_OR_RETURN(BackendDescriptor d,
                          BackendDescriptor::Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  UCUDNN_RETURN_IF_ERROR(Set(d.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  UCUDNN_RETURN_IF_ERROR(SetInt64s(d.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, dims));
  UCUDNN_RETURN_IF_ERROR(SetInt64s(d.get(), CUDNN_ATTR_TENSOR_STRIDES, Strides(layout, dims)));
  UCUDNN_RETURN_IF_ERROR(Set(d.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  UCUDNN_RETURN_IF_ERROR(
      Set(d.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment));
  UCUDNN_RETURN_IF_ERROR(Finalize(d.get()));
  return d;
}

cudnnBackendDescriptorType_t OperationType(ConvOp op) {
  switch (op) {
    case ConvOp::kForward:
      return CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
    case ConvOp::kBackwardData:
      return CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
    case ConvOp::kBackwardFilter:
      return CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
  }
  return CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
}

// The attribute names of the op's three tensors, its convolution, alpha and beta.
struct OpAttributes {
  cudnnBackendAttributeName_t input, output, filter, conv, alpha, beta;
};
OpAttributes AttributesOf(ConvOp op) {
  switch (op) {
    case ConvOp::kForward:
      return {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvOp::kBackwardData:
      return {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvOp::kBackwardFilter:
      return {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  return AttributesOf(ConvOp::kForward);
}

int64_t LowestSetBit(int64_t v) { return v & -v; }

template <typename T>
Result<std::vector<T>> GetArray(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                cudnnBackendAttributeType_t type, int64_t capacity) {
  std::vector<T> values(static_cast<size_t>(capacity));
  int64_t count = 0;
  UCUDNN_GPU_CHECK(cudnnBackendGetAttribute(d, name, type, capacity, &count, values.data()));
  values.resize(static_cast<size_t>(std::clamp<int64_t>(count, 0, capacity)));
  return values;
}

Result<int64_t> GetInt64(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name) {
  int64_t value = 0, count = 0;
  UCUDNN_GPU_CHECK(cudnnBackendGetAttribute(d, name, CUDNN_TYPE_INT64, 1, &count, &value));
  return value;
}

// Descriptors cuDNN fills in: created here, passed to a get of an array of descriptors.
Result<std::vector<BackendDescriptor>> CreateMany(cudnnBackendDescriptorType_t type, size_t count) {
  std::vector<BackendDescriptor> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    UCUDNN_ASSIGN_OR_RETURN(BackendDescriptor d, BackendDescriptor::Create(type));
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<BackendDescriptor>> GetDescriptors(cudnnBackendDescriptor_t d,
                                                      cudnnBackendAttributeName_t name,
                                                      cudnnBackendDescriptorType_t type,
                                                      int64_t capacity) {
  UCUDNN_ASSIGN_OR_RETURN(std::vector<BackendDescriptor> out,
                          CreateMany(type, static_cast<size_t>(capacity)));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const BackendDescriptor& b : out) raw.push_back(b.get());
  int64_t count = 0;
  UCUDNN_GPU_CHECK(cudnnBackendGetAttribute(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, capacity,
                                            &count, raw.data()));
  out.resize(static_cast<size_t>(std::clamp<int64_t>(count, 0, capacity)));
  return out;
}

// What an engine descriptor (finalized, from a configuration or built by index) says of itself.
Status DescribeEngine(cudnnBackendDescriptor_t engine, EngineCandidate& candidate) {
  UCUDNN_ASSIGN_OR_RETURN(const int64_t index, GetInt64(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX));
  candidate.config.engine = static_cast<int32_t>(index);
  UCUDNN_ASSIGN_OR_RETURN(const std::vector<cudnnBackendNumericalNote_t> notes,
                          GetArray<cudnnBackendNumericalNote_t>(
                              engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                              CUDNN_NUMERICAL_NOTE_TYPE_COUNT));
  for (cudnnBackendNumericalNote_t note : notes) {
    candidate.tensor_core |= note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    candidate.down_converts |= note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
    candidate.nondeterministic |= note == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
  }
  UCUDNN_ASSIGN_OR_RETURN(const std::vector<cudnnBackendBehaviorNote_t> behaviors,
                          GetArray<cudnnBackendBehaviorNote_t>(
                              engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                              CUDNN_BEHAVIOR_NOTE_TYPE_COUNT));
  for (cudnnBackendBehaviorNote_t b : behaviors) {
    candidate.runtime_compiled |= b == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  }
  return Status::Ok();
}

// The identity and notes of one engine configuration descriptor proposed by the heuristics.
Result<EngineCandidate> Describe(cudnnBackendDescriptor_t config) {
  EngineCandidate candidate;
  UCUDNN_ASSIGN_OR_RETURN(
      std::vector<BackendDescriptor> engines,
      GetDescriptors(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR, 1));
  if (engines.empty()) return Internal("engine configuration without an engine");
  UCUDNN_RETURN_IF_ERROR(DescribeEngine(engines[0].get(), candidate));
  UCUDNN_ASSIGN_OR_RETURN(
      std::vector<BackendDescriptor> knobs,
      GetDescriptors(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                     CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS));
  for (const BackendDescriptor& knob : knobs) {
    cudnnBackendKnobType_t type{};
    int64_t count = 0, value = 0;
    UCUDNN_GPU_CHECK(cudnnBackendGetAttribute(knob.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                              CUDNN_TYPE_KNOB_TYPE, 1, &count, &type));
    UCUDNN_GPU_CHECK(cudnnBackendGetAttribute(knob.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                              CUDNN_TYPE_INT64, 1, &count, &value));
    candidate.config.knobs.push_back({static_cast<int32_t>(type), value});
  }
  UCUDNN_RETURN_IF_ERROR(Canonicalize(candidate.config));
  candidate.config.cudnn_version = static_cast<int32_t>(cudnnGetVersion());
  return candidate;
}

Result<BackendDescriptor> EngineByIndex(const ConvGraph& graph, int64_t index) {
  UCUDNN_ASSIGN_OR_RETURN(BackendDescriptor engine,
                          BackendDescriptor::Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  cudnnBackendDescriptor_t g = graph.graph();
  UCUDNN_RETURN_IF_ERROR(
      Set(engine.get(), CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
  UCUDNN_RETURN_IF_ERROR(
      Set(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index));
  UCUDNN_RETURN_IF_ERROR(Finalize(engine.get()));
  return engine;
}

}  // namespace

Result<cudnnDataType_t> CudnnDataTypeOf(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DataType::kFloat16:
      return CUDNN_DATA_HALF;
    case DataType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
  }
  return InvalidArgument("data type: unknown value " + std::to_string(static_cast<int>(t)));
}

// ---- BackendDescriptor
// ---------------------------------------------------------------------------

Result<BackendDescriptor> BackendDescriptor::Create(cudnnBackendDescriptorType_t type) {
  BackendDescriptor d;
  UCUDNN_GPU_CHECK(cudnnBackendCreateDescriptor(type, &d.desc_));
  return d;
}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    this->~BackendDescriptor();
    desc_ = other.desc_;
    other.desc_ = nullptr;
  }
  return *this;
}

BackendDescriptor::~BackendDescriptor() {
  if (desc_ == nullptr) return;
  const Status s = UCUDNN_GPU_STATUS(cudnnBackendDestroyDescriptor(desc_));
  if (!s.ok()) spdlog::warn("cudnn graph: {}", s.message());
  desc_ = nullptr;
}

// ---- ConvGraph
// -----------------------------------------------------------------------------------

int64_t SampleAlignment(const ConvProblem& p) {
  const int64_t elem = static_cast<int64_t>(ElementSize(p.data_type));
  const int64_t in = LowestSetBit(p.input_elements_per_sample() * elem);
  const int64_t out = LowestSetBit(p.output_elements_per_sample() * elem);
  return std::min<int64_t>({16, in, out});
}

Result<std::unique_ptr<ConvGraph>> ConvGraph::Build(cudnnHandle_t handle, const ConvProblem& p,
                                                    int64_t batch, float beta, bool dynamic_shape) {
  UCUDNN_RETURN_IF_ERROR(Validate(p));
  UCUDNN_RETURN_IF_ERROR(ValidateBatch(batch));
  if (handle == nullptr) return InvalidArgument("handle: must not be null");
  std::unique_ptr<ConvGraph> g(new ConvGraph());
  g->handle_ = handle;
  g->problem_ = p;
  g->batch_ = batch;
  g->beta_ = beta;
  g->dynamic_shape_ = dynamic_shape;
  g->alignment_ = SampleAlignment(p);
  UCUDNN_ASSIGN_OR_RETURN(const cudnnDataType_t data_type, CudnnDataTypeOf(p.data_type));
  UCUDNN_ASSIGN_OR_RETURN(const cudnnDataType_t compute_type, CudnnDataTypeOf(p.compute_type));
  UCUDNN_ASSIGN_OR_RETURN(g->x_, Tensor(kInputUid, data_type, Dims(p, batch, p.c, p.d, p.h, p.w),
                                        p.layout, g->alignment_));
  UCUDNN_ASSIGN_OR_RETURN(
      g->y_, Tensor(kOutputUid, data_type, Dims(p, batch, p.k, p.out_d(), p.out_h(), p.out_w()),
                    p.layout, g->alignment_));
  // The filter as PyTorch lays it out for each layout: K x C/g x (T x) R x S, channels innermost
  // in NHWC and NDHWC.
  UCUDNN_ASSIGN_OR_RETURN(g->w_, Tensor(kFilterUid, data_type,
                                        Dims(p, p.k, p.c / p.groups, p.t, p.r, p.s), p.layout, 16));

  UCUDNN_ASSIGN_OR_RETURN(g->conv_,
                          BackendDescriptor::Create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = p.is_3d() ? 3 : 2;
  // Per spatial dimension, depth first in 3-D.
  auto per_axis = [&p](int64_t depth, int64_t height, int64_t width) {
    return p.is_3d() ? std::vector<int64_t>{depth, height, width}
                     : std::vector<int64_t>{height, width};
  };
  cudnnBackendDescriptor_t c = g->conv_.get();
  UCUDNN_RETURN_IF_ERROR(
      Set(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute_type));
  UCUDNN_RETURN_IF_ERROR(
      Set(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  UCUDNN_RETURN_IF_ERROR(
      Set(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial));
  UCUDNN_RETURN_IF_ERROR(SetInt64s(c, CUDNN_ATTR_CONVOLUTION_DILATIONS,
                                   per_axis(p.dilation_d, p.dilation_h, p.dilation_w)));
  UCUDNN_RETURN_IF_ERROR(SetInt64s(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                                   per_axis(p.stride_d, p.stride_h, p.stride_w)));
  UCUDNN_RETURN_IF_ERROR(
      SetInt64s(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, per_axis(p.pad_d, p.pad_h, p.pad_w)));
  UCUDNN_RETURN_IF_ERROR(
      SetInt64s(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, per_axis(p.pad_d, p.pad_h, p.pad_w)));
  UCUDNN_RETURN_IF_ERROR(Finalize(c));

  const OpAttributes a = AttributesOf(p.op);
  UCUDNN_ASSIGN_OR_RETURN(g->op_, BackendDescriptor::Create(OperationType(p.op)));
  cudnnBackendDescriptor_t op = g->op_.get();
  const float alpha = 1.0f;
  UCUDNN_RETURN_IF_ERROR(SetDescriptor(op, a.input, g->x_));
  UCUDNN_RETURN_IF_ERROR(SetDescriptor(op, a.output, g->y_));
  UCUDNN_RETURN_IF_ERROR(SetDescriptor(op, a.filter, g->w_));
  UCUDNN_RETURN_IF_ERROR(SetDescriptor(op, a.conv, g->conv_));
  UCUDNN_RETURN_IF_ERROR(Set(op, a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
  UCUDNN_RETURN_IF_ERROR(Set(op, a.beta, CUDNN_TYPE_FLOAT, 1, &beta));
  UCUDNN_RETURN_IF_ERROR(Finalize(op));

  UCUDNN_ASSIGN_OR_RETURN(g->graph_,
                          BackendDescriptor::Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  UCUDNN_RETURN_IF_ERROR(SetDescriptor(g->graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, g->op_));
  UCUDNN_RETURN_IF_ERROR(Set(g->graph_.get(), kGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle));
  if (dynamic_shape) {
    if (cudnnGetVersion() < 90400) {
      return Unsupported("dynamic-shape graphs need cuDNN 9.4 or later");
    }
    const bool enabled = true;
    UCUDNN_RETURN_IF_ERROR(Set(g->graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED,
                               CUDNN_TYPE_BOOLEAN, 1, &enabled));
  }
  UCUDNN_RETURN_IF_ERROR(Finalize(g->graph_.get()));
  return g;
}

// ---- Candidates
// ----------------------------------------------------------------------------------

bool AdmittedByMath(const EngineCandidate& candidate, const ConvProblem& problem) {
  if (candidate.down_converts && problem.math != MathMode::kTensorOpAllowConversion) return false;
  if (candidate.tensor_core && problem.math == MathMode::kFma) return false;
  return true;
}

Result<std::vector<EngineCandidate>> HeuristicCandidates(const ConvGraph& graph) {
  struct Source {
    cudnnBackendHeurMode_t mode;
    char tag;
  };
  // Mode B proposed exactly mode INSTANT's configurations for every ResNet-50 shape, op and
  // precision on the H100 (docs/engines.md), at extra query time: left out.
  constexpr std::array<Source, 2> kSources = {
      {{CUDNN_HEUR_MODE_INSTANT, 'i'}, {CUDNN_HEUR_MODE_FALLBACK, 'f'}}};
  std::vector<EngineCandidate> out;
  Status first_failure;
  for (const Source& source : kSources) {
    Result<BackendDescriptor> heur = BackendDescriptor::Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    if (!heur.ok()) return heur.status();
    cudnnBackendDescriptor_t h = heur->get();
    cudnnBackendDescriptor_t g = graph.graph();
    Status status =
        Set(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
    if (status.ok())
      status = Set(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &source.mode);
    if (status.ok()) status = Finalize(h);
    int64_t count = 0;
    if (status.ok()) {
      status = UCUDNN_GPU_STATUS(cudnnBackendGetAttribute(
          h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    }
    Result<std::vector<BackendDescriptor>> configs =
        status.ok() ? GetDescriptors(h, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, count)
                    : Result<std::vector<BackendDescriptor>>(status);
    if (!configs.ok()) {
      // One mode failing (mode B is not available for every graph) leaves the others.
      spdlog::debug("cudnn graph: heuristic mode {} gave no results: {}", source.tag,
                    configs.status().ToString());
      if (first_failure.ok()) first_failure = configs.status();
      continue;
    }
    for (const BackendDescriptor& config : *configs) {
      Result<EngineCandidate> candidate = Describe(config.get());
      if (!candidate.ok()) {
        spdlog::debug("cudnn graph: skipping a configuration: {}", candidate.status().ToString());
        continue;
      }
      auto same = std::find_if(out.begin(), out.end(), [&](const EngineCandidate& c) {
        return c.config == candidate->config;
      });
      if (same != out.end()) {
        if (same->sources.find(source.tag) == std::string::npos) same->sources += source.tag;
        continue;
      }
      candidate->sources = std::string(1, source.tag);
      out.push_back(std::move(*candidate));
    }
  }
  if (out.empty() && !first_failure.ok()) return first_failure;
  std::vector<EngineCandidate> admitted;
  for (EngineCandidate& c : out) {
    if (AdmittedByMath(c, graph.problem())) admitted.push_back(std::move(c));
  }
  return admitted;
}

Result<std::vector<EngineCandidate>> ExhaustiveCandidates(const ConvGraph& graph,
                                                          size_t max_per_engine) {
  UCUDNN_ASSIGN_OR_RETURN(const int64_t engines,
                          GetInt64(graph.graph(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT));
  std::vector<EngineCandidate> out;
  for (int64_t index = 0; index < engines; ++index) {
    Result<BackendDescriptor> engine = EngineByIndex(graph, index);
    if (!engine.ok()) continue;  // not applicable to this graph
    EngineCandidate base;
    if (!DescribeEngine(engine->get(), base).ok()) continue;
    base.config.cudnn_version = static_cast<int32_t>(cudnnGetVersion());
    base.sources = "x";
    if (!AdmittedByMath(base, graph.problem())) continue;
    UCUDNN_ASSIGN_OR_RETURN(
        std::vector<BackendDescriptor> infos,
        GetDescriptors(engine->get(), CUDNN_ATTR_ENGINE_KNOB_INFO,
                       CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS));
    struct Range {
      int32_t type;
      int64_t lo, hi, stride;
    };
    std::vector<Range> ranges;
    for (const BackendDescriptor& info : infos) {
      cudnnBackendKnobType_t type{};
      int64_t count = 0;
      if (!UCUDNN_GPU_STATUS(cudnnBackendGetAttribute(info.get(), CUDNN_ATTR_KNOB_INFO_TYPE,
                                                      CUDNN_TYPE_KNOB_TYPE, 1, &count, &type))
               .ok()) {
        continue;
      }
      Result<int64_t> lo = GetInt64(info.get(), CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE);
      Result<int64_t> hi = GetInt64(info.get(), CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE);
      Result<int64_t> stride = GetInt64(info.get(), CUDNN_ATTR_KNOB_INFO_STRIDE);
      if (!lo.ok() || !hi.ok() || !stride.ok() || *stride <= 0 || *hi < *lo) continue;
      ranges.push_back({static_cast<int32_t>(type), *lo, *hi, *stride});
    }
    // Odometer over the knob ranges, lowest values first, at most max_per_engine combinations.
    std::vector<int64_t> value(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) value[i] = ranges[i].lo;
    for (size_t made = 0; made < max_per_engine; ++made) {
      EngineCandidate c = base;
      for (size_t i = 0; i < ranges.size(); ++i)
        c.config.knobs.push_back({ranges[i].type, value[i]});
      if (Canonicalize(c.config).ok()) out.push_back(std::move(c));
      size_t i = 0;
      for (; i < ranges.size(); ++i) {
        value[i] += ranges[i].stride;
        if (value[i] <= ranges[i].hi) break;
        value[i] = ranges[i].lo;
      }
      if (i == ranges.size()) break;
    }
  }
  return out;
}

// ---- EnginePlan
// ----------------------------------------------------------------------------------

Result<std::unique_ptr<EnginePlan>> EnginePlan::Build(cudnnHandle_t handle, const ConvGraph& graph,
                                                      const EngineConfig& config,
                                                      cudnnBackendDescriptor_t kernel_cache) {
  if (handle == nullptr) return InvalidArgument("handle: must not be null");
  UCUDNN_RETURN_IF_ERROR(CheckEngineConfigVersion(config, static_cast<int32_t>(cudnnGetVersion())));
  std::unique_ptr<EnginePlan> plan(new EnginePlan());
  plan->handle_ = handle;
  plan->op_ = graph.problem().op;
  plan->alignment_ = graph.alignment();
  UCUDNN_ASSIGN_OR_RETURN(plan->engine_, EngineByIndex(graph, config.engine));
  EngineCandidate notes;
  UCUDNN_RETURN_IF_ERROR(DescribeEngine(plan->engine_.get(), notes));
  plan->runtime_compiled_ = notes.runtime_compiled;
  std::vector<cudnnBackendDescriptor_t> raw_knobs;
  for (const EngineKnob& knob : config.knobs) {
    UCUDNN_ASSIGN_OR_RETURN(BackendDescriptor choice,
                            BackendDescriptor::Create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    const auto type = static_cast<cudnnBackendKnobType_t>(knob.type);
    UCUDNN_RETURN_IF_ERROR(
        Set(choice.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type));
    UCUDNN_RETURN_IF_ERROR(
        Set(choice.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &knob.value));
    UCUDNN_RETURN_IF_ERROR(Finalize(choice.get()));
    raw_knobs.push_back(choice.get());
    plan->knob_choices_.push_back(std::move(choice));
  }
  UCUDNN_ASSIGN_OR_RETURN(plan->config_,
                          BackendDescriptor::Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  UCUDNN_RETURN_IF_ERROR(
      SetDescriptor(plan->config_.get(), CUDNN_ATTR_ENGINECFG_ENGINE, plan->engine_));
  if (!raw_knobs.empty()) {
    UCUDNN_RETURN_IF_ERROR(Set(plan->config_.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               static_cast<int64_t>(raw_knobs.size()), raw_knobs.data()));
  }
  UCUDNN_RETURN_IF_ERROR(Finalize(plan->config_.get()));
  UCUDNN_ASSIGN_OR_RETURN(plan->plan_,
                          BackendDescriptor::Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
  UCUDNN_RETURN_IF_ERROR(Set(plan->plan_.get(), kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle));
  UCUDNN_RETURN_IF_ERROR(
      SetDescriptor(plan->plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, plan->config_));
  if (kernel_cache != nullptr && plan->runtime_compiled_) {
    UCUDNN_RETURN_IF_ERROR(Set(plan->plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &kernel_cache));
  }
  UCUDNN_RETURN_IF_ERROR(Finalize(plan->plan_.get()));
  UCUDNN_RETURN_IF_ERROR(plan->ReadWorkspace());
  return plan;
}

Result<std::unique_ptr<EnginePlan>> EnginePlan::Load(cudnnHandle_t handle, const ConvGraph& graph,
                                                     std::string_view serialized) {
  if (handle == nullptr) return InvalidArgument("handle: must not be null");
  if (serialized.empty()) return InvalidArgument("serialized plan: empty");
  std::unique_ptr<EnginePlan> plan(new EnginePlan());
  plan->handle_ = handle;
  plan->op_ = graph.problem().op;
  plan->alignment_ = graph.alignment();
  plan->runtime_compiled_ = true;  // only those are serialized (LoadOrBuildPlan)
  UCUDNN_ASSIGN_OR_RETURN(plan->plan_,
                          BackendDescriptor::Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
  UCUDNN_RETURN_IF_ERROR(Set(plan->plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                             CUDNN_TYPE_CHAR, static_cast<int64_t>(serialized.size()),
                             serialized.data()));
  UCUDNN_RETURN_IF_ERROR(Set(plan->plan_.get(), kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle));
  UCUDNN_RETURN_IF_ERROR(Finalize(plan->plan_.get()));
  UCUDNN_RETURN_IF_ERROR(plan->ReadWorkspace());
  return plan;
}

Status EnginePlan::ReadWorkspace() {
  UCUDNN_ASSIGN_OR_RETURN(const int64_t ws,
                          GetInt64(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE));
  if (ws < 0) return Internal("execution plan reports a negative workspace");
  workspace_bytes_ = static_cast<size_t>(ws);
  return Status::Ok();
}

Result<std::string> EnginePlan::Serialize() const {
  int64_t count = 0;
  UCUDNN_GPU_CHECK(cudnnBackendGetAttribute(plan_.get(),
                                            CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                            CUDNN_TYPE_CHAR, 0, &count, nullptr));
  if (count <= 0) return Unsupported("cuDNN serialized the plan as nothing");
  std::string text(static_cast<size_t>(count), '\0');
  UCUDNN_GPU_CHECK(cudnnBackendGetAttribute(plan_.get(),
                                            CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                            CUDNN_TYPE_CHAR, count, &count, text.data()));
  text.resize(
      static_cast<size_t>(std::clamp<int64_t>(count, 0, static_cast<int64_t>(text.size()))));
  while (!text.empty() && text.back() == '\0') text.pop_back();  // a C string's terminator
  if (text.empty()) return Unsupported("cuDNN serialized the plan as nothing");
  return text;
}

Status EnginePlan::Execute(cudnnHandle_t handle, const ConvOperands& o, void* workspace,
                           size_t workspace_bytes) {
  void* input = nullptr;
  void* output = nullptr;
  void* filter = nullptr;
  switch (op_) {
    case ConvOp::kForward:
      input = const_cast<void*>(o.x);
      filter = const_cast<void*>(o.w);
      output = o.y;
      break;
    case ConvOp::kBackwardData:
      input = o.dx;
      filter = const_cast<void*>(o.w);
      output = const_cast<void*>(o.dy);
      break;
    case ConvOp::kBackwardFilter:
      input = const_cast<void*>(o.x);
      filter = o.dw;
      output = const_cast<void*>(o.dy);
      break;
  }
  if (input == nullptr || output == nullptr || filter == nullptr) {
    return InvalidArgument("engine plan: an operand of the op is null");
  }
  const auto aligned = [](const void* p, int64_t a) {
    return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(a) == 0;
  };
  if (!aligned(input, alignment_) || !aligned(output, alignment_) || !aligned(filter, 16)) {
    return Unsupported("engine plan: operands less aligned than the plan declared (" +
                       std::to_string(alignment_) + " bytes)");
  }
  if (workspace_bytes < workspace_bytes_ || (workspace_bytes_ > 0 && workspace == nullptr)) {
    return InvalidArgument("engine plan: needs " + std::to_string(workspace_bytes_) +
                           " bytes of workspace, given " + std::to_string(workspace_bytes));
  }
  void* pointers[3] = {input, output, filter};
  const int64_t uids[3] = {kInputUid, kOutputUid, kFilterUid};
  UCUDNN_ASSIGN_OR_RETURN(BackendDescriptor pack,
                          BackendDescriptor::Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  cudnnBackendDescriptor_t vp = pack.get();
  UCUDNN_RETURN_IF_ERROR(Set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
  UCUDNN_RETURN_IF_ERROR(
      Set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers));
  UCUDNN_RETURN_IF_ERROR(
      Set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
  UCUDNN_RETURN_IF_ERROR(Finalize(vp));
  UCUDNN_GPU_CHECK(cudnnBackendExecute(handle, plan_.get(), vp));
  return Status::Ok();
}

// ---- Shared plans
// -------------------------------------------------------------------------------

namespace {

struct SharedPlan {
  std::unique_ptr<ConvGraph> graph;  // the plan's descriptors refer to it
  std::unique_ptr<EnginePlan> plan;
};

// Enough for every plan of a large network on a few handles (ResNet-50: 161 kernels).
constexpr size_t kMaxSharedPlans = 2048;

struct SharedPlans {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<SharedPlan>> by_key;
  std::deque<std::string> order;                   // insertion order, for eviction
  std::shared_ptr<const CompiledPlanStore> store;  // null: none
  std::shared_ptr<PlanCompiler> compiler;          // null: none
  std::map<int, std::string> device_keys;          // fingerprint keys by device index
  CompiledPlanCounts counts;
};

SharedPlans& Shared() {
  static SharedPlans* plans = new SharedPlans();  // never destroyed: used until exit
  return *plans;
}

std::string HandlePrefix(cudnnHandle_t handle) {
  return std::to_string(reinterpret_cast<uintptr_t>(handle)) + "|";
}

// The key of a plan in the compiled-plan store: the current device's fingerprint (a handle runs
// on the device current at its creation, which is current at its calls) and the plan's identity.
Result<std::string> CompiledPlanKey(SharedPlans& shared, const std::string& plan_key) {
  int device = 0;
  UCUDNN_GPU_CHECK(cudaGetDevice(&device));
  {
    std::lock_guard lock(shared.mutex);
    if (auto it = shared.device_keys.find(device); it != shared.device_keys.end()) {
      return it->second + "|" + plan_key;
    }
  }
  UCUDNN_ASSIGN_OR_RETURN(const DeviceFingerprint fingerprint, GpuFingerprint(device));
  std::lock_guard lock(shared.mutex);
  const std::string& key = shared.device_keys.try_emplace(device, fingerprint.Key()).first->second;
  return key + "|" + plan_key;
}

// The plan from the store, or null when it has none or cuDNN does not take what it has (then it
// is built and replaced).
std::unique_ptr<EnginePlan> LoadCompiledPlan(SharedPlans& shared, const CompiledPlanStore& store,
                                             const std::string& key, cudnnHandle_t handle,
                                             const ConvGraph& graph) {
  Result<std::string> serialized = store.Load(key);
  if (!serialized.ok()) {
    if (serialized.status().code() != StatusCode::kNotFound) {
      spdlog::warn("compiled plan not used, built again: {}", serialized.status().message());
    }
    return nullptr;
  }
  Result<std::unique_ptr<EnginePlan>> loaded = EnginePlan::Load(handle, graph, *serialized);
  if (!loaded.ok()) {
    spdlog::warn("compiled plan {} not taken by cuDNN, built again: {}", store.PathOf(key),
                 loaded.status().message());
    return nullptr;
  }
  std::lock_guard lock(shared.mutex);
  ++shared.counts.loaded;
  return std::move(*loaded);
}

void SaveCompiledPlan(SharedPlans& shared, const CompiledPlanStore& store, const std::string& key,
                      const EnginePlan& plan) {
  Result<std::string> serialized = plan.Serialize();
  Status saved = serialized.ok() ? store.Save(key, *serialized) : serialized.status();
  std::lock_guard lock(shared.mutex);
  if (saved.ok()) {
    ++shared.counts.saved;
  } else if (++shared.counts.save_failures == 1) {
    // Once: an unwritable directory fails every save alike.
    spdlog::warn("compiled plan not saved (later jobs will compile it again): {}", saved.message());
  } else {
    spdlog::debug("compiled plan not saved: {}", saved.message());
  }
}

// The plan of `graph` for `config`: loaded from the process's compiled-plan store when it holds
// the plan of `plan_key` for this device, else built, and saved there when runtime-compiled.
Result<std::unique_ptr<EnginePlan>> LoadOrBuildPlan(SharedPlans& shared, cudnnHandle_t handle,
                                                    const ConvGraph& graph,
                                                    const EngineConfig& config,
                                                    const std::string& plan_key) {
  std::shared_ptr<const CompiledPlanStore> store;
  std::shared_ptr<PlanCompiler> compiler;
  {
    std::lock_guard lock(shared.mutex);
    store = shared.store;
    compiler = shared.compiler;
  }
  // Where a cold benchmark's plan time goes, at debug level (--log-level debug): each plan loaded
  // from the store, and each runtime-compiled one built here, with its milliseconds.
  const auto since_ms = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  auto start = std::chrono::steady_clock::now();
  std::string compiled_key;
  if (store != nullptr) {
    Result<std::string> key = CompiledPlanKey(shared, plan_key);
    if (key.ok()) {
      compiled_key = std::move(*key);
      std::unique_ptr<EnginePlan> loaded =
          LoadCompiledPlan(shared, *store, compiled_key, handle, graph);
      double waited_ms = 0;
      // Another process may be building it: wait for that rather than compile it twice.
      if (loaded == nullptr && compiler != nullptr) {
        const auto wait_start = std::chrono::steady_clock::now();
        const bool queued =
            compiler->Await({CanonicalKey(graph.problem()), graph.batch(),
                             graph.beta() == 0.0f ? 0 : 1, EngineConfigKey(config)});
        waited_ms = since_ms(wait_start);
        if (queued) loaded = LoadCompiledPlan(shared, *store, compiled_key, handle, graph);
      }
      if (loaded != nullptr) {
        spdlog::debug(
            "plan {}: loaded from the store in {:.1f} ms ({:.1f} ms of it waiting for a "
            "compile helper)",
            plan_key, since_ms(start), waited_ms);
        return loaded;
      }
    } else {
      spdlog::debug("no compiled-plan key: {}", key.status().message());
    }
  }
  start = std::chrono::steady_clock::now();
  UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<EnginePlan> built,
                          EnginePlan::Build(handle, graph, config));
  if (built->runtime_compiled()) {
    spdlog::debug("plan {}: compiled here in {:.1f} ms", plan_key, since_ms(start));
    if (!compiled_key.empty()) SaveCompiledPlan(shared, *store, compiled_key, *built);
  }
  return built;
}

// A plan's identity, apart from the handle and the device: the key of the shared plans and of
// the compiled-plan store.
std::string PlanIdentity(const ConvProblem& problem, int64_t batch, float beta,
                         const EngineConfig& config) {
  return CanonicalKey(problem) + "|" + std::to_string(batch) + "|" + (beta == 0.0f ? "0" : "1") +
         "|" + EngineConfigKey(config) + "|" + std::to_string(config.cudnn_version);
}

// The plan of `key`, built (or loaded from the compiled-plan store) for the shared plans.
Result<std::shared_ptr<SharedPlan>> BuildSharedPlan(SharedPlans& shared, cudnnHandle_t handle,
                                                    const ConvProblem& problem, int64_t batch,
                                                    float beta, const EngineConfig& config,
                                                    const std::string& plan_key) {
  auto built = std::make_shared<SharedPlan>();
  UCUDNN_ASSIGN_OR_RETURN(built->graph, ConvGraph::Build(handle, problem, batch, beta));
  UCUDNN_ASSIGN_OR_RETURN(built->plan,
                          LoadOrBuildPlan(shared, handle, *built->graph, config, plan_key));
  return built;
}

}  // namespace

Result<std::shared_ptr<EnginePlan>> SharedEnginePlan(cudnnHandle_t handle,
                                                     const ConvProblem& problem, int64_t batch,
                                                     float beta, const EngineConfig& config) {
  const std::string plan_key = PlanIdentity(problem, batch, beta, config);
  const std::string key = HandlePrefix(handle) + plan_key;
  SharedPlans& shared = Shared();
  {
    std::lock_guard lock(shared.mutex);
    if (auto it = shared.by_key.find(key); it != shared.by_key.end()) {
      return std::shared_ptr<EnginePlan>(it->second, it->second->plan.get());
    }
  }
  // Built outside the lock: building takes up to a second, and other plans need not wait.
  UCUDNN_ASSIGN_OR_RETURN(std::shared_ptr<SharedPlan> built,
                          BuildSharedPlan(shared, handle, problem, batch, beta, config, plan_key));
  std::lock_guard lock(shared.mutex);
  auto [it, added] = shared.by_key.try_emplace(key, built);  // another thread's build wins
  if (added) {
    shared.order.push_back(key);
    while (shared.order.size() > kMaxSharedPlans) {
      shared.by_key.erase(shared.order.front());
      shared.order.pop_front();
    }
  }
  return std::shared_ptr<EnginePlan>(it->second, it->second->plan.get());
}

Result<std::unique_ptr<EnginePlan>> StoredEnginePlan(cudnnHandle_t handle, const ConvGraph& graph,
                                                     const ConvProblem& problem, int64_t batch,
                                                     float beta, const EngineConfig& config) {
  return LoadOrBuildPlan(Shared(), handle, graph, config,
                         PlanIdentity(problem, batch, beta, config));
}

void SetCompiledPlanDirectory(const std::string& directory) {
  SharedPlans& shared = Shared();
  std::lock_guard lock(shared.mutex);
  if (directory.empty()) {
    shared.store.reset();
  } else if (shared.store == nullptr || shared.store->directory() != directory) {
    shared.store = std::make_shared<const CompiledPlanStore>(directory);
  }
}

void SetPlanCompiler(std::shared_ptr<PlanCompiler> compiler) {
  SharedPlans& shared = Shared();
  std::lock_guard lock(shared.mutex);
  shared.compiler = std::move(compiler);
}

std::shared_ptr<PlanCompiler> GetPlanCompiler() {
  SharedPlans& shared = Shared();
  std::lock_guard lock(shared.mutex);
  return shared.compiler;
}

CompiledPlanCounts GetCompiledPlanCounts() {
  SharedPlans& shared = Shared();
  std::lock_guard lock(shared.mutex);
  return shared.counts;
}

void ForgetSharedEnginePlans(cudnnHandle_t handle) {
  const std::string prefix = HandlePrefix(handle);
  SharedPlans& shared = Shared();
  std::lock_guard lock(shared.mutex);
  std::erase_if(shared.order, [&](const std::string& key) { return key.starts_with(prefix); });
  std::erase_if(shared.by_key, [&](const auto& entry) { return entry.first.starts_with(prefix); });
}

}  // namespace ucudnn
