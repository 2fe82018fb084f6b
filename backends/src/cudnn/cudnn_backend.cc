// The cuDNN backend over the legacy convolution API (deprecated in cuDNN 9 but present; cudnn.h
// is a system header here, see cmake/UcudnnDependencies.cmake).
#include "ucudnn/backends/cudnn_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_check.h"
#include "ucudnn/backends/cudnn_engines.h"
#include "ucudnn/core/algorithm_names.h"
#include "ucudnn/core/executor.h"

namespace ucudnn {
namespace {

static_assert(kCudnnForwardAlgoCount == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
static_assert(kCudnnBackwardDataAlgoCount == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
static_assert(kCudnnBackwardFilterAlgoCount == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);

Status CheckAlgorithm(ConvOp op, int algo) {
  const int count = CudnnAlgorithmCount(op);
  if (count == 0) {
    return InvalidArgument("op: unknown value " + std::to_string(static_cast<int>(op)));
  }
  if (algo < 0 || algo >= count) {
    return InvalidArgument("algo: must be in [0, " + std::to_string(count - 1) + "] for " +
                           std::string(ToString(op)) + ", got " + std::to_string(algo));
  }
  return Status::Ok();
}

// The legacy API computes in float or (pseudo-)half; there is no bf16 compute type.
Result<cudnnDataType_t> CudnnComputeType(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DataType::kFloat16:
      return CUDNN_DATA_HALF;
    case DataType::kBFloat16:
      return Unsupported("compute_type: bf16 compute is not available in cuDNN's legacy API");
  }
  return InvalidArgument("compute_type: unknown data type");
}

cudnnTensorFormat_t CudnnFormat(Layout l) {
  return l == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

cudnnMathType_t CudnnMath(MathMode m) {
  switch (m) {
    case MathMode::kDefault:
      return CUDNN_DEFAULT_MATH;
    case MathMode::kTensorOp:
      return CUDNN_TENSOR_OP_MATH;
    case MathMode::kTensorOpAllowConversion:
      return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case MathMode::kFma:
      return CUDNN_FMA_MATH;
  }
  return CUDNN_DEFAULT_MATH;
}

// cuDNN's 4-d and 5-d descriptors take int dimensions and compute int strides.
Status CheckFitsInt(const char* tensor, int64_t elements) {
  if (elements > INT_MAX) {
    return Unsupported(std::string(tensor) + " has " + std::to_string(elements) +
                       " elements, more than cuDNN's descriptors can address (2^31-1)");
  }
  return Status::Ok();
}

// Descriptors depend on the convolution, not on the op: forward, backward-data and
// backward-filter of one shape share them.
using DescriptorKey = std::array<int64_t, 23>;
DescriptorKey KeyOf(const ConvProblem& p, int64_t batch) {
  return {p.d,
          p.t,
          p.pad_d,
          p.stride_d,
          p.dilation_d,
          p.c,
          p.h,
          p.w,
          p.k,
          p.r,
          p.s,
          p.pad_h,
          p.pad_w,
          p.stride_h,
          p.stride_w,
          p.dilation_h,
          p.dilation_w,
          p.groups,
          static_cast<int64_t>(p.data_type),
          static_cast<int64_t>(p.compute_type),
          static_cast<int64_t>(p.layout),
          static_cast<int64_t>(p.math),
          batch};
}

// Bounds the cache; a client with more distinct (shape, batch) pairs than this rebuilds some.
constexpr size_t kMaxCachedDescriptorSets = 1024;

class DeviceBuffer final : public BackendBuffer {
 public:
  DeviceBuffer(void* data, size_t size) : data_(data), size_(size) {}
  ~DeviceBuffer() override {
    if (data_ == nullptr) return;
    Status status = UCUDNN_GPU_STATUS(cudaFree(data_));
    if (!status.ok()) spdlog::error("cudnn backend: {}", status.message());
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

// The keys of the engine caches, one format for the lazy path and Prepare: candidates by problem
// and micro-batch size; graphs by that and beta (0 or 1: the graphs differ in it); plans by their
// graph and the configuration.
std::string SizeKey(const std::string& problem_key, int64_t batch) {
  return problem_key + "|" + std::to_string(batch);
}
std::string GraphKey(const std::string& size_key, float beta) {
  return size_key + (beta == 0.0f ? "|0" : "|1");
}
std::string PlanKey(const std::string& graph_key, std::string_view engine_config) {
  return graph_key + "|" + std::string(engine_config);
}

}  // namespace

CudnnDescriptors::~CudnnDescriptors() {
  // Destroying a descriptor only frees host memory; failures are logged, not fatal.
  Status statuses[] = {
      x != nullptr ? UCUDNN_GPU_STATUS(cudnnDestroyTensorDescriptor(x)) : Status::Ok(),
      y != nullptr ? UCUDNN_GPU_STATUS(cudnnDestroyTensorDescriptor(y)) : Status::Ok(),
      w != nullptr ? UCUDNN_GPU_STATUS(cudnnDestroyFilterDescriptor(w)) : Status::Ok(),
      conv != nullptr ? UCUDNN_GPU_STATUS(cudnnDestroyConvolutionDescriptor(conv)) : Status::Ok()};
  for (const Status& s : statuses) {
    if (!s.ok()) spdlog::warn("cudnn backend: {}", s.message());
  }
}

Result<std::unique_ptr<CudnnDescriptors>> CudnnDescriptors::Build(const ConvProblem& p,
                                                                  int64_t batch) {
  UCUDNN_RETURN_IF_ERROR(Validate(p));
  UCUDNN_RETURN_IF_ERROR(ValidateBatch(batch));
  UCUDNN_ASSIGN_OR_RETURN(const cudnnDataType_t data_type, CudnnDataTypeOf(p.data_type));
  UCUDNN_ASSIGN_OR_RETURN(const cudnnDataType_t compute_type, CudnnComputeType(p.compute_type));
  const int64_t out_h = p.out_h();
  const int64_t out_w = p.out_w();
  UCUDNN_RETURN_IF_ERROR(CheckFitsInt("input tensor", batch * p.input_elements_per_sample()));
  UCUDNN_RETURN_IF_ERROR(CheckFitsInt("output tensor", batch * p.output_elements_per_sample()));
  UCUDNN_RETURN_IF_ERROR(CheckFitsInt("filter", p.filter_elements()));
  const cudnnTensorFormat_t format = CudnnFormat(p.layout);
  const auto i = [](int64_t v) { return static_cast<int>(v); };

  auto d = std::make_unique<CudnnDescriptors>();
  UCUDNN_GPU_CHECK(cudnnCreateTensorDescriptor(&d->x));
  UCUDNN_GPU_CHECK(cudnnCreateTensorDescriptor(&d->y));
  UCUDNN_GPU_CHECK(cudnnCreateFilterDescriptor(&d->w));
  UCUDNN_GPU_CHECK(cudnnCreateConvolutionDescriptor(&d->conv));
  if (p.is_3d()) {
    // 5-d descriptors: NCDHW or NDHWC by `format`, the filter KCTRS or KTRSC.
    const int x_dims[] = {i(batch), i(p.c), i(p.d), i(p.h), i(p.w)};
    const int y_dims[] = {i(batch), i(p.k), i(p.out_d()), i(out_h), i(out_w)};
    const int w_dims[] = {i(p.k), i(p.c / p.groups), i(p.t), i(p.r), i(p.s)};
    const int pads[] = {i(p.pad_d), i(p.pad_h), i(p.pad_w)};
    const int strides[] = {i(p.stride_d), i(p.stride_h), i(p.stride_w)};
    const int dilations[] = {i(p.dilation_d), i(p.dilation_h), i(p.dilation_w)};
    UCUDNN_GPU_CHECK(cudnnSetTensorNdDescriptorEx(d->x, format, data_type, 5, x_dims));
    UCUDNN_GPU_CHECK(cudnnSetTensorNdDescriptorEx(d->y, format, data_type, 5, y_dims));
    UCUDNN_GPU_CHECK(cudnnSetFilterNdDescriptor(d->w, data_type, format, 5, w_dims));
    UCUDNN_GPU_CHECK(cudnnSetConvolutionNdDescriptor(d->conv, 3, pads, strides, dilations,
                                                     CUDNN_CROSS_CORRELATION, compute_type));
  } else {
    UCUDNN_GPU_CHECK(
        cudnnSetTensor4dDescriptor(d->x, format, data_type, i(batch), i(p.c), i(p.h), i(p.w)));
    UCUDNN_GPU_CHECK(
        cudnnSetTensor4dDescriptor(d->y, format, data_type, i(batch), i(p.k), i(out_h), i(out_w)));
    UCUDNN_GPU_CHECK(cudnnSetFilter4dDescriptor(d->w, data_type, format, i(p.k), i(p.c / p.groups),
                                                i(p.r), i(p.s)));
    UCUDNN_GPU_CHECK(cudnnSetConvolution2dDescriptor(
        d->conv, i(p.pad_h), i(p.pad_w), i(p.stride_h), i(p.stride_w), i(p.dilation_h),
        i(p.dilation_w), CUDNN_CROSS_CORRELATION, compute_type));
  }
  UCUDNN_GPU_CHECK(cudnnSetConvolutionGroupCount(d->conv, i(p.groups)));
  UCUDNN_GPU_CHECK(cudnnSetConvolutionMathType(d->conv, CudnnMath(p.math)));

  // Our output-size arithmetic and cuDNN's must agree, or every operand size would be wrong.
  const int dims = p.is_3d() ? 5 : 4;
  int out[5] = {};
  UCUDNN_GPU_CHECK(cudnnGetConvolutionNdForwardOutputDim(d->conv, d->x, d->w, dims, out));
  const std::vector<int64_t> expected =
      p.is_3d() ? std::vector<int64_t>{batch, p.k, p.out_d(), out_h, out_w}
                : std::vector<int64_t>{batch, p.k, out_h, out_w};
  auto shape_text = [](auto begin, auto end) {
    std::string text;
    for (auto it = begin; it != end; ++it) text += (text.empty() ? "" : "x") + std::to_string(*it);
    return text;
  };
  if (!std::equal(expected.begin(), expected.end(), out)) {
    return Internal("cuDNN computes output " + shape_text(out, out + dims) + ", problem says " +
                    shape_text(expected.begin(), expected.end()));
  }
  return d;
}

Status RunCudnnConvolution(cudnnHandle_t handle, ConvOp op, const CudnnDescriptors& d, int algo,
                           const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                           float alpha, float beta) {
  // alpha and beta are float for every data type except double, which the model does not have.
  switch (op) {
    case ConvOp::kForward:
      UCUDNN_GPU_CHECK(cudnnConvolutionForward(handle, &alpha, d.x, operands.x, d.w, operands.w,
                                               d.conv, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                               workspace, workspace_bytes, &beta, d.y, operands.y));
      break;
    case ConvOp::kBackwardData:
      UCUDNN_GPU_CHECK(
          cudnnConvolutionBackwardData(handle, &alpha, d.w, operands.w, d.y, operands.dy, d.conv,
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), workspace,
                                       workspace_bytes, &beta, d.x, operands.dx));
      break;
    case ConvOp::kBackwardFilter:
      UCUDNN_GPU_CHECK(
          cudnnConvolutionBackwardFilter(handle, &alpha, d.x, operands.x, d.y, operands.dy, d.conv,
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                         workspace, workspace_bytes, &beta, d.w, operands.dw));
      break;
  }
  return Status::Ok();
}

class CudnnBackend::DescriptorCache {
 public:
  Result<const CudnnDescriptors*> Get(const ConvProblem& p, int64_t batch) {
    const DescriptorKey key = KeyOf(p, batch);
    auto it = sets_.find(key);
    if (it != sets_.end()) return static_cast<const CudnnDescriptors*>(it->second.get());
    UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<CudnnDescriptors> built,
                            CudnnDescriptors::Build(p, batch));
    if (sets_.size() >= kMaxCachedDescriptorSets) sets_.clear();
    const CudnnDescriptors* raw = built.get();
    sets_.emplace(key, std::move(built));
    return raw;
  }
  size_t size() const { return sets_.size(); }

 private:
  std::map<DescriptorKey, std::unique_ptr<CudnnDescriptors>> sets_;
};

CudnnBackend::CudnnBackend() : descriptors_(std::make_unique<DescriptorCache>()) {}

CudnnBackend::~CudnnBackend() {
  if (owns_handle_) (void)MakeDeviceCurrent();
  descriptors_.reset();
  numerics_scratch_.reset();  // on this device, while it is current
  ClearEngineCaches();        // before the handles they were built on
  for (cudnnHandle_t h : helper_handles_) {
    Status s = UCUDNN_GPU_STATUS(cudnnDestroy(h));
    if (!s.ok()) spdlog::warn("cudnn backend: {}", s.message());
  }
  for (cudaEvent_t e : events_) {
    Status s = UCUDNN_GPU_STATUS(cudaEventDestroy(e));
    if (!s.ok()) spdlog::warn("cudnn backend: {}", s.message());
  }
  if (owns_handle_ && handle_ != nullptr) {
    Status s = UCUDNN_GPU_STATUS(cudnnDestroy(handle_));
    if (!s.ok()) spdlog::warn("cudnn backend: {}", s.message());
  }
  if (own_stream_ != nullptr) {
    Status s = UCUDNN_GPU_STATUS(cudaStreamDestroy(own_stream_));
    if (!s.ok()) spdlog::warn("cudnn backend: {}", s.message());
  }
}

Result<std::unique_ptr<CudnnBackend>> CudnnBackend::Create(int device_index) {
  UCUDNN_RETURN_IF_ERROR(gpu::CheckDeviceIndex(device_index));
  std::unique_ptr<CudnnBackend> backend(new CudnnBackend());
  backend->device_index_ = device_index;
  backend->owns_handle_ = true;
  UCUDNN_GPU_CHECK(cudaSetDevice(device_index));
  UCUDNN_GPU_CHECK(cudaStreamCreateWithFlags(&backend->own_stream_, cudaStreamNonBlocking));
  UCUDNN_GPU_CHECK(cudnnCreate(&backend->handle_));
  UCUDNN_GPU_CHECK(cudnnSetStream(backend->handle_, backend->own_stream_));
  UCUDNN_ASSIGN_OR_RETURN(backend->fingerprint_, GpuFingerprint(device_index));
  spdlog::debug("cudnn backend: GPU {} ({}), cuDNN {}", device_index, backend->fingerprint_.name,
                backend->fingerprint_.cudnn_version);
  return backend;
}

Result<std::unique_ptr<CudnnBackend>> CudnnBackend::Wrap(cudnnHandle_t handle) {
  if (handle == nullptr) return InvalidArgument("handle: must not be null");
  std::unique_ptr<CudnnBackend> backend(new CudnnBackend());
  backend->handle_ = handle;
  backend->owns_handle_ = false;
  UCUDNN_GPU_CHECK(cudaGetDevice(&backend->device_index_));
  UCUDNN_ASSIGN_OR_RETURN(backend->fingerprint_, GpuFingerprint(backend->device_index_));
  return backend;
}

cudaStream_t CudnnBackend::stream() const {
  if (own_stream_ != nullptr) return own_stream_;
  cudaStream_t s = nullptr;
  Status status = UCUDNN_GPU_STATUS(cudnnGetStream(handle_, &s));
  if (!status.ok()) spdlog::warn("cudnn backend: {}", status.message());
  return s;
}

size_t CudnnBackend::cached_descriptor_sets() const { return descriptors_->size(); }

Status CudnnBackend::MakeDeviceCurrent() const {
  if (!owns_handle_) return Status::Ok();  // the caller manages its own device
  int current = -1;
  UCUDNN_GPU_CHECK(cudaGetDevice(&current));
  if (current != device_index_) UCUDNN_GPU_CHECK(cudaSetDevice(device_index_));
  return Status::Ok();
}

Result<const CudnnDescriptors*> CudnnBackend::GetDescriptors(const ConvProblem& problem,
                                                             int64_t batch) {
  return descriptors_->Get(problem, batch);
}

std::vector<AlgorithmInfo> CudnnBackend::Algorithms(ConvOp op) const { return CudnnAlgorithms(op); }

Result<size_t> CudnnBackend::OverwritingWorkspaceSize(const ConvProblem& problem, int64_t batch,
                                                      const Algorithm& algorithm) {
  if (!algorithm.is_engine()) return WorkspaceSize(problem, batch, algorithm);  // the same call
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  UCUDNN_ASSIGN_OR_RETURN(EnginePlan * plan, GetEnginePlan(problem, batch, algorithm, 0.0f));
  return plan->workspace_bytes();
}

Result<size_t> CudnnBackend::WorkspaceSize(const ConvProblem& problem, int64_t batch,
                                           const Algorithm& algorithm) {
  if (algorithm.is_engine()) {
    UCUDNN_ASSIGN_OR_RETURN(size_t bytes, OverwritingWorkspaceSize(problem, batch, algorithm));
    if (problem.op == ConvOp::kBackwardFilter) {
      // Backward-filter's later micro-batches accumulate (beta 1): another plan, whose workspace
      // can be larger (seen on the H100: 565,406 against 553,390 bytes for a 5x5 depthwise
      // kernel). A segment must get what either needs, or its plan fails at run time.
      Result<EnginePlan*> accumulating = GetEnginePlan(problem, batch, algorithm, 1.0f);
      if (accumulating.ok()) bytes = std::max(bytes, (*accumulating)->workspace_bytes());
    }
    return bytes;
  }
  const int algo = algorithm.id;
  UCUDNN_RETURN_IF_ERROR(CheckAlgorithm(problem.op, algo));
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  UCUDNN_ASSIGN_OR_RETURN(const CudnnDescriptors* d, GetDescriptors(problem, batch));
  size_t bytes = 0;
  Status status;
  switch (problem.op) {
    case ConvOp::kForward:
      status = UCUDNN_GPU_STATUS(cudnnGetConvolutionForwardWorkspaceSize(
          handle_, d->x, d->w, d->conv, d->y, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
          &bytes));
      break;
    case ConvOp::kBackwardData:
      status = UCUDNN_GPU_STATUS(cudnnGetConvolutionBackwardDataWorkspaceSize(
          handle_, d->w, d->y, d->conv, d->x, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
          &bytes));
      break;
    case ConvOp::kBackwardFilter:
      status = UCUDNN_GPU_STATUS(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle_, d->x, d->y, d->conv, d->w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
          &bytes));
      break;
  }
  if (!status.ok()) return status;
  return bytes;
}

Status CudnnBackend::Run(const ConvProblem& problem, int64_t batch, const Algorithm& algorithm,
                         const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                         float alpha, float beta) {
  if (algorithm.is_engine()) {
    UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
    UCUDNN_RETURN_IF_ERROR(CheckEngineScalars(alpha, beta));
    UCUDNN_ASSIGN_OR_RETURN(EnginePlan * plan, GetEnginePlan(problem, batch, algorithm, beta));
    return plan->Execute(plan->handle(), operands, workspace, workspace_bytes);
  }
  const int algo = algorithm.id;
  UCUDNN_RETURN_IF_ERROR(CheckAlgorithm(problem.op, algo));
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  UCUDNN_ASSIGN_OR_RETURN(const CudnnDescriptors* d, GetDescriptors(problem, batch));
  if (workspace == nullptr && workspace_bytes > 0) {
    return InvalidArgument("workspace: null with workspace_bytes " +
                           std::to_string(workspace_bytes));
  }
  const auto require = [](const void* p, const char* name) {
    return p != nullptr ? Status::Ok()
                        : InvalidArgument(std::string("operands.") + name + ": must not be null");
  };
  switch (problem.op) {
    case ConvOp::kForward:
      UCUDNN_RETURN_IF_ERROR(require(operands.x, "x"));
      UCUDNN_RETURN_IF_ERROR(require(operands.w, "w"));
      UCUDNN_RETURN_IF_ERROR(require(operands.y, "y"));
      break;
    case ConvOp::kBackwardData:
      UCUDNN_RETURN_IF_ERROR(require(operands.dy, "dy"));
      UCUDNN_RETURN_IF_ERROR(require(operands.w, "w"));
      UCUDNN_RETURN_IF_ERROR(require(operands.dx, "dx"));
      break;
    case ConvOp::kBackwardFilter:
      UCUDNN_RETURN_IF_ERROR(require(operands.x, "x"));
      UCUDNN_RETURN_IF_ERROR(require(operands.dy, "dy"));
      UCUDNN_RETURN_IF_ERROR(require(operands.dw, "dw"));
      break;
  }
  return RunCudnnConvolution(handle_, problem.op, *d, algo, operands, workspace, workspace_bytes,
                             alpha, beta);
}

// ---- Graph-API engine configurations
// -------------------------------------------------------------

// Engine plans are built with alpha 1 and beta 0 or 1 (their graph holds the scalars): what the
// executor uses (backward-filter accumulates with beta 1 after its first micro-batch). Other
// scalars are for the legacy algorithms.
Status CudnnBackend::CheckEngineScalars(float alpha, float beta) {
  if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) {
    return Unsupported("engine configurations run with alpha 1 and beta 0 or 1 only");
  }
  return Status::Ok();
}

Result<const ConvGraph*> CudnnBackend::GetGraph(const ConvProblem& problem, int64_t batch,
                                                float beta) {
  const std::string key = GraphKey(SizeKey(CanonicalKey(problem), batch), beta);
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return static_cast<const ConvGraph*>(it->second.get());
  UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<ConvGraph> graph,
                          ConvGraph::Build(handle_, problem, batch, beta));
  // Plans point into their graphs: both go together.
  if (graphs_.size() >= kMaxCachedGraphs) ClearEngineCaches();
  const ConvGraph* raw = graph.get();
  graphs_.emplace(key, std::move(graph));
  return raw;
}

Result<EnginePlan*> CudnnBackend::GetEnginePlan(const ConvProblem& problem, int64_t batch,
                                                const Algorithm& algorithm, float beta) {
  std::string key =
      PlanKey(GraphKey(SizeKey(CanonicalKey(problem), batch), beta), algorithm.engine_config);
  auto it = engine_plans_.find(key);
  if (it != engine_plans_.end()) return it->second.get();
  if (auto failed = engine_plan_failures_.find(key); failed != engine_plan_failures_.end()) {
    return failed->second;
  }
  UCUDNN_ASSIGN_OR_RETURN(EngineConfig config, ParseEngineConfigKey(algorithm.engine_config));
  config.cudnn_version = static_cast<int32_t>(fingerprint_.cudnn_version);
  std::shared_ptr<EnginePlan> plan;
  if (owns_handle_) {
    UCUDNN_ASSIGN_OR_RETURN(const ConvGraph* graph, GetGraph(problem, batch, beta));
    UCUDNN_ASSIGN_OR_RETURN(
        plan, StoredEnginePlan(graph->handle(), *graph, problem, batch, beta, config));
  } else {
    // A caller's handle (the client library): its bound plans run the same execution plans.
    UCUDNN_ASSIGN_OR_RETURN(plan, SharedEnginePlan(handle_, problem, batch, beta, config));
  }
  if (engine_plans_.size() >= kMaxCachedEnginePlans) {
    // Only the plans: the graphs (and the plan about to be cached) stay valid.
    engine_plans_.clear();
    engine_plan_failures_.clear();
  }
  EnginePlan* raw = plan.get();
  engine_plans_.emplace(std::move(key), std::move(plan));
  return raw;
}

void CudnnBackend::ClearEngineCaches() {
  engine_plans_.clear();
  engine_plan_failures_.clear();
  engine_candidates_.clear();
  graphs_.clear();
}

Result<const std::vector<EngineCandidate>*> CudnnBackend::GetEngineCandidates(
    const ConvProblem& problem, int64_t batch) {
  const std::string key = SizeKey(CanonicalKey(problem), batch);
  auto it = engine_candidates_.find(key);
  if (it != engine_candidates_.end()) return &it->second;
  UCUDNN_ASSIGN_OR_RETURN(const ConvGraph* graph, GetGraph(problem, batch, 0.0f));
  UCUDNN_ASSIGN_OR_RETURN(std::vector<EngineCandidate> candidates, HeuristicCandidates(*graph));
  return &engine_candidates_.insert_or_assign(key, std::move(candidates)).first->second;
}

Status CudnnBackend::EnsureHelperHandles(size_t count) {
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  while (helper_handles_.size() < count) {
    cudnnHandle_t h = nullptr;
    UCUDNN_GPU_CHECK(cudnnCreate(&h));
    const Status bound = UCUDNN_GPU_STATUS(cudnnSetStream(h, stream()));
    if (!bound.ok()) {
      (void)cudnnDestroy(h);
      return bound;
    }
    helper_handles_.push_back(h);
  }
  return Status::Ok();
}

namespace {

// Runtime-compiled engines take 0.4-1.1 s each to build and were never the fastest for dense
// convolutions on the H100 (docs/engines.md, engine probe): left out there to keep a cold
// benchmark short. For grouped and depthwise convolutions they are cuDNN's fast kernels (7x7
// depthwise fp16 NHWC: 0.2 ms against 4.7 ms for the best precompiled engine), so measured.
bool Measured(const EngineCandidate& c, const ConvProblem& problem) {
  return !c.runtime_compiled || problem.groups > 1;
}

// What one helper thread of Prepare() builds for one micro-batch size.
struct PreparedSize {
  int64_t batch = 0;
  Status status;  // of the graph or the heuristics; the size is then left to the lazy path
  std::unique_ptr<ConvGraph> graph;
  std::vector<EngineCandidate> candidates;
  std::vector<std::pair<std::string, Result<std::unique_ptr<EnginePlan>>>> plans;  // by config key
};

void PrepareSize(cudnnHandle_t handle, const ConvProblem& problem, int32_t cudnn_version,
                 PreparedSize& out) {
  Result<std::unique_ptr<ConvGraph>> graph = ConvGraph::Build(handle, problem, out.batch, 0.0f);
  if (!graph.ok()) {
    out.status = graph.status();
    return;
  }
  out.graph = std::move(*graph);
  Result<std::vector<EngineCandidate>> candidates = HeuristicCandidates(*out.graph);
  if (!candidates.ok()) {
    out.status = candidates.status();
    return;
  }
  out.candidates = std::move(*candidates);
  for (const EngineCandidate& c : out.candidates) {
    // A runtime-compiled plan is built when its workspace is first asked (the benchmark asks
    // only of candidates no smaller size ruled out): on an H200 such plans did not build faster
    // on the helper threads (a depthwise backward-filter problem's 8 sizes: 5.2 s spread over 8
    // threads against 4.6 s one after the other for as many), and over 40% of them were for
    // configurations the probes then skipped. Other processes do compile side by side: the
    // worker's compile helpers build them (QueueCompiles, plan_compiler.h).
    if (!Measured(c, problem) || c.runtime_compiled) continue;
    EngineConfig config = c.config;
    config.cudnn_version = cudnn_version;
    out.plans.emplace_back(EngineConfigKey(c.config),
                           StoredEnginePlan(handle, *out.graph, problem, out.batch, 0.0f, config));
  }
}

}  // namespace

void CudnnBackend::Prepare(const ConvProblem& problem, const std::vector<int64_t>& batches,
                           int threads) {
  PrepareOnThreads(problem, batches, threads);
  QueueCompiles(problem, batches);
}

namespace {

// The betas a problem's plans are built with: a backward filter's later micro-batches accumulate
// (beta 1), with another plan than the overwriting one.
std::vector<int> PlanBetas(const ConvProblem& problem) {
  if (problem.op == ConvOp::kBackwardFilter) return {0, 1};
  return {0};
}

}  // namespace

std::shared_ptr<PlanCompiler> CudnnBackend::PlanCompilerOfPrepare() const {
  if (!engines_enabled_ || !owns_handle_) return nullptr;
  return GetPlanCompiler();
}

void CudnnBackend::QueueCompiles(const ConvProblem& problem, const std::vector<int64_t>& batches) {
  std::shared_ptr<PlanCompiler> compiler = PlanCompilerOfPrepare();
  if (compiler == nullptr) return;
  const std::string problem_key = CanonicalKey(problem);
  // Backward-filter's accumulating plans, whose workspace is settled after the timed runs (of the
  // configurations a plan could use, not known yet): last, and a guess. Compiled here, they were
  // most of a depthwise problem's time (MobileNetV3-L: 52 of 65 s).
  std::vector<PlanCompiler::Task> tasks, accumulating;
  for (int64_t batch : batches) {
    if (!ValidateBatch(batch).ok()) continue;
    Result<const std::vector<EngineCandidate>*> candidates = GetEngineCandidates(problem, batch);
    if (!candidates.ok()) continue;  // the lazy path reports it
    for (const EngineCandidate& c : **candidates) {
      if (!c.runtime_compiled || !Measured(c, problem)) continue;
      for (int beta : PlanBetas(problem)) {
        (beta == 0 ? tasks : accumulating)
            .push_back({problem_key, batch, beta, EngineConfigKey(c.config)});
      }
    }
  }
  tasks.insert(tasks.end(), accumulating.begin(), accumulating.end());
  if (!tasks.empty()) compiler->Queue(tasks);
}

void CudnnBackend::WillNotRun(const ConvProblem& problem, int64_t batch,
                              const std::vector<Algorithm>& algos) {
  std::shared_ptr<PlanCompiler> compiler = PlanCompilerOfPrepare();
  if (compiler == nullptr) return;
  const std::string problem_key = CanonicalKey(problem);
  std::vector<PlanCompiler::Task> tasks;
  for (const Algorithm& algo : algos) {
    if (!algo.is_engine()) continue;
    for (int beta : PlanBetas(problem)) {
      tasks.push_back({problem_key, batch, beta, std::string(algo.engine_config)});
    }
  }
  if (!tasks.empty()) compiler->Drop(tasks);
}

void CudnnBackend::PrepareOnThreads(const ConvProblem& problem, const std::vector<int64_t>& batches,
                                    int threads) {
  if (!engines_enabled_ || !owns_handle_ || threads < 2) return;
  const std::string problem_key = CanonicalKey(problem);
  std::vector<PreparedSize> sizes;
  for (int64_t batch : batches) {
    if (engine_candidates_.count(SizeKey(problem_key, batch)) > 0) continue;
    if (!ValidateBatch(batch).ok()) continue;  // the lazy path reports it
    sizes.emplace_back().batch = batch;
  }
  if (sizes.size() < 2) return;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min({sizes.size(), static_cast<size_t>(threads), cores});
  if (workers < 2) return;
  if (const Status s = EnsureHelperHandles(workers); !s.ok()) {
    spdlog::warn("cudnn backend: no helper handles ({}); preparing one size at a time",
                 s.ToString());
    return;
  }
  const auto cudnn_version = static_cast<int32_t>(fingerprint_.cudnn_version);
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&, handle = helper_handles_[w]] {
      const Status current = UCUDNN_GPU_STATUS(cudaSetDevice(device_index_));
      for (size_t i; (i = next.fetch_add(1)) < sizes.size();) {
        if (!current.ok()) {
          sizes[i].status = current;
          continue;
        }
        PrepareSize(handle, problem, cudnn_version, sizes[i]);
      }
    });
  }
  for (std::thread& t : pool) t.join();

  size_t new_plans = 0;
  for (const PreparedSize& p : sizes) new_plans += p.plans.size();
  if (graphs_.size() + sizes.size() > kMaxCachedGraphs ||
      engine_plans_.size() + engine_plan_failures_.size() + new_plans > kMaxCachedEnginePlans) {
    ClearEngineCaches();
  }
  for (PreparedSize& p : sizes) {
    if (!p.status.ok()) {
      spdlog::debug("cudnn backend: preparing {} at {}: {} (left to the lazy path)", problem_key,
                    p.batch, p.status.ToString());
      continue;
    }
    const std::string size_key = SizeKey(problem_key, p.batch);
    const std::string graph_key = GraphKey(size_key, 0.0f);  // PrepareSize builds beta = 0 graphs
    graphs_.insert_or_assign(graph_key, std::move(p.graph));
    for (auto& [config_key, plan] : p.plans) {
      std::string key = PlanKey(graph_key, config_key);
      if (plan.ok()) {
        engine_plans_.insert_or_assign(std::move(key), std::move(*plan));
      } else {
        engine_plan_failures_.insert_or_assign(std::move(key), plan.status());
      }
    }
    engine_candidates_.insert_or_assign(size_key, std::move(p.candidates));
  }
}

Result<std::function<Status()>> CudnnBackend::ResolveTimedRuns(const ConvProblem& problem,
                                                               int64_t batch, const Algorithm& algo,
                                                               const ConvOperands& operands,
                                                               void* workspace,
                                                               size_t workspace_bytes) {
  std::function<Status(const ConvOperands&)> run;
  if (!algo.is_engine()) {
    const int id = algo.id;
    run = [this, &problem, batch, id, workspace, workspace_bytes](const ConvOperands& o) {
      return Run(problem, batch, id, o, workspace, workspace_bytes, 1.0f, 0.0f);
    };
  } else {
    // The plan is looked up once, so that a timed run costs what a bound plan's call costs.
    UCUDNN_ASSIGN_OR_RETURN(EnginePlan * plan, GetEnginePlan(problem, batch, algo, 0.0f));
    run = [plan, workspace, workspace_bytes](const ConvOperands& o) {
      return plan->Execute(plan->handle(), o, workspace, workspace_bytes);
    };
  }
  // Successive runs, successive slices, as a segment's micro-batches take them.
  return std::function<Status()>(
      [run = std::move(run), &problem, operands, batch, next = int64_t{0}]() mutable {
        return run(TimedRunOperands(problem, operands, batch, next++));
      });
}

std::vector<Timing> CudnnBackend::Candidates(const ConvProblem& problem, int64_t batch) {
  std::vector<Timing> out = ConvBackend::Candidates(problem, batch);
  if (!engines_enabled_) return out;
  Status status = MakeDeviceCurrent();
  Result<const std::vector<EngineCandidate>*> engines =
      status.ok() ? GetEngineCandidates(problem, batch)
                  : Result<const std::vector<EngineCandidate>*>(status);
  if (!engines.ok()) {
    spdlog::warn("cudnn backend: no engine configurations for {} at {}: {}", CanonicalKey(problem),
                 batch, engines.status().ToString());
    return out;
  }
  for (const EngineCandidate& c : **engines) {
    if (!Measured(c, problem)) continue;
    Timing t;
    t.algo = kEngineAlgo;
    t.engine_config = EngineConfigKey(c.config);
    out.push_back(std::move(t));
  }
  return out;
}

bool CudnnBackend::BuildsCodePerSize(const ConvProblem& problem, int64_t batch,
                                     const Algorithm& algo) {
  if (!algo.is_engine()) return false;
  if (!MakeDeviceCurrent().ok()) return true;
  Result<const std::vector<EngineCandidate>*> engines = GetEngineCandidates(problem, batch);
  if (!engines.ok()) return true;
  for (const EngineCandidate& c : **engines) {
    if (EngineConfigKey(c.config) == algo.engine_config) return c.runtime_compiled;
  }
  return true;
}

Status CudnnBackend::Healthy() {
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  // The runtime's per-thread error state keeps a sticky error; an ordinary one left there (e.g.
  // by a call inside cuDNN that failed and was handled) says nothing about the device and is
  // cleared by this read.
  const Status last = UCUDNN_GPU_STATUS(cudaGetLastError());
  if (last.code() == StatusCode::kDeviceLost) return last;
  if (!last.ok()) spdlog::debug("cudnn backend: health check cleared {}", last.message());
  // A kernel fault is reported by the next synchronising call. Our own device: wait for all of
  // it. A caller's handle: only its stream, so the caller's other streams are not stalled (a
  // sticky error shows on any call, so the stream's wait reports it too).
  if (owns_handle_) UCUDNN_GPU_CHECK(cudaDeviceSynchronize());
  if (!owns_handle_) UCUDNN_GPU_CHECK(cudaStreamSynchronize(stream()));
  return Status::Ok();
}

Status CudnnBackend::Synchronize() {
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  UCUDNN_GPU_CHECK(cudaStreamSynchronize(stream()));
  return Status::Ok();
}

Result<std::unique_ptr<BackendBuffer>> CudnnBackend::Allocate(size_t bytes) {
  if (bytes == 0) return std::unique_ptr<BackendBuffer>(new DeviceBuffer(nullptr, 0));
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  void* data = nullptr;
  Status status = UCUDNN_GPU_STATUS(cudaMalloc(&data, bytes));
  if (!status.ok()) return status.WithContext("allocating " + std::to_string(bytes) + " bytes");
  return std::unique_ptr<BackendBuffer>(new DeviceBuffer(data, bytes));
}

Status CudnnBackend::CopyToDevice(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (device_dst == nullptr || host_src == nullptr) {
    return InvalidArgument("CopyToDevice: null pointer with " + std::to_string(bytes) + " bytes");
  }
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  const cudaStream_t s = stream();
  UCUDNN_GPU_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, s));
  UCUDNN_GPU_CHECK(cudaStreamSynchronize(s));
  return Status::Ok();
}

Status CudnnBackend::CopyWithinDevice(void* device_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (device_dst == nullptr || device_src == nullptr) {
    return InvalidArgument("CopyWithinDevice: null pointer with " + std::to_string(bytes) +
                           " bytes");
  }
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  const cudaStream_t s = stream();
  UCUDNN_GPU_CHECK(cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, s));
  UCUDNN_GPU_CHECK(cudaStreamSynchronize(s));
  return Status::Ok();
}

Status CudnnBackend::FillBytes(void* device_dst, unsigned char value, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (device_dst == nullptr) {
    return InvalidArgument("FillBytes: null pointer with " + std::to_string(bytes) + " bytes");
  }
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  const cudaStream_t s = stream();
  UCUDNN_GPU_CHECK(cudaMemsetAsync(device_dst, value, bytes, s));
  UCUDNN_GPU_CHECK(cudaStreamSynchronize(s));
  return Status::Ok();
}

Status CudnnBackend::CopyToHost(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (host_dst == nullptr || device_src == nullptr) {
    return InvalidArgument("CopyToHost: null pointer with " + std::to_string(bytes) + " bytes");
  }
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  const cudaStream_t s = stream();
  UCUDNN_GPU_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, s));
  UCUDNN_GPU_CHECK(cudaStreamSynchronize(s));
  return Status::Ok();
}

namespace {

// The result checks' vectors in chunks that a 1-D cuDNN tensor (int dimensions) and two fp32
// scratch buffers of 256 MiB each hold.
constexpr size_t kNumericsChunk = size_t{1} << 26;

struct TensorDescriptor {
  cudnnTensorDescriptor_t d = nullptr;
  ~TensorDescriptor() {
    if (d != nullptr) cudnnDestroyTensorDescriptor(d);
  }
};

// A packed 1 x 1 x 1 x `count` tensor of `type` (count <= kNumericsChunk).
Status VectorDescriptor(TensorDescriptor& t, cudnnDataType_t type, size_t count) {
  UCUDNN_GPU_CHECK(cudnnCreateTensorDescriptor(&t.d));
  UCUDNN_GPU_CHECK(
      cudnnSetTensor4dDescriptor(t.d, CUDNN_TENSOR_NCHW, type, 1, 1, 1, static_cast<int>(count)));
  return Status::Ok();
}

const void* Offset(const void* base, size_t elements, DataType type) {
  return static_cast<const char*>(base) + elements * ElementSize(type);
}

}  // namespace

Status CudnnBackend::WidenToFloat(void* dst, const void* src, DataType type, size_t count) {
  if (count == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) return InvalidArgument("WidenToFloat: null pointer");
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  UCUDNN_ASSIGN_OR_RETURN(const cudnnDataType_t src_type, CudnnDataTypeOf(type));
  const float one = 1.0f, zero = 0.0f;
  for (size_t first = 0; first < count; first += kNumericsChunk) {
    const size_t n = std::min(kNumericsChunk, count - first);
    TensorDescriptor from, to;
    UCUDNN_RETURN_IF_ERROR(VectorDescriptor(from, src_type, n));
    UCUDNN_RETURN_IF_ERROR(VectorDescriptor(to, CUDNN_DATA_FLOAT, n));
    UCUDNN_GPU_CHECK(cudnnTransformTensor(handle_, &one, from.d, Offset(src, first, type), &zero,
                                          to.d, static_cast<float*>(dst) + first));
  }
  UCUDNN_GPU_CHECK(cudaStreamSynchronize(stream()));
  return Status::Ok();
}

Result<std::pair<double, double>> CudnnBackend::DifferenceNorms(const void* got, DataType type,
                                                                const void* want, size_t count) {
  if (count == 0) return std::pair<double, double>{0.0, 0.0};
  if (got == nullptr || want == nullptr) return InvalidArgument("DifferenceNorms: null pointer");
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  UCUDNN_ASSIGN_OR_RETURN(const cudnnDataType_t got_type, CudnnDataTypeOf(type));
  const size_t chunk = std::min(kNumericsChunk, count);
  struct Descriptors {
    cudnnOpTensorDescriptor_t op = nullptr;
    cudnnReduceTensorDescriptor_t reduce = nullptr;
    ~Descriptors() {
      if (op != nullptr) cudnnDestroyOpTensorDescriptor(op);
      if (reduce != nullptr) cudnnDestroyReduceTensorDescriptor(reduce);
    }
  } d;
  UCUDNN_GPU_CHECK(cudnnCreateOpTensorDescriptor(&d.op));
  UCUDNN_GPU_CHECK(
      cudnnSetOpTensorDescriptor(d.op, CUDNN_OP_TENSOR_ADD, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN));
  UCUDNN_GPU_CHECK(cudnnCreateReduceTensorDescriptor(&d.reduce));
  UCUDNN_GPU_CHECK(cudnnSetReduceTensorDescriptor(
      d.reduce, CUDNN_REDUCE_TENSOR_NORM2, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN,
      CUDNN_REDUCE_TENSOR_NO_INDICES, CUDNN_32BIT_INDICES));
  TensorDescriptor scalar;
  UCUDNN_RETURN_IF_ERROR(VectorDescriptor(scalar, CUDNN_DATA_FLOAT, 1));
  // Scratch: [widened chunk | difference chunk | two norms | reduction workspace], 256-aligned.
  const size_t vector_bytes = (chunk * sizeof(float) + 255) / 256 * 256;
  double difference_squares = 0, want_squares = 0;
  const float one = 1.0f, minus_one = -1.0f, zero = 0.0f;
  for (size_t first = 0; first < count; first += chunk) {
    const size_t n = std::min(chunk, count - first);
    TensorDescriptor got_d, vector;
    UCUDNN_RETURN_IF_ERROR(VectorDescriptor(got_d, got_type, n));
    UCUDNN_RETURN_IF_ERROR(VectorDescriptor(vector, CUDNN_DATA_FLOAT, n));
    size_t workspace_bytes = 0;
    UCUDNN_GPU_CHECK(
        cudnnGetReductionWorkspaceSize(handle_, d.reduce, vector.d, scalar.d, &workspace_bytes));
    const size_t needed = 2 * vector_bytes + 256 + workspace_bytes;
    if (numerics_scratch_ == nullptr || numerics_scratch_->size() < needed) {
      numerics_scratch_.reset();
      UCUDNN_ASSIGN_OR_RETURN(numerics_scratch_, Allocate(needed));
    }
    char* scratch = static_cast<char*>(numerics_scratch_->data());
    void* widened = scratch;
    void* difference = scratch + vector_bytes;
    float* norm = reinterpret_cast<float*>(scratch + 2 * vector_bytes);
    void* ws = workspace_bytes > 0 ? scratch + 2 * vector_bytes + 256 : nullptr;
    const float* want_chunk = static_cast<const float*>(want) + first;
    UCUDNN_GPU_CHECK(cudnnTransformTensor(handle_, &one, got_d.d, Offset(got, first, type), &zero,
                                          vector.d, widened));
    UCUDNN_GPU_CHECK(cudnnOpTensor(handle_, d.op, &one, vector.d, widened, &minus_one, vector.d,
                                   want_chunk, &zero, vector.d, difference));
    UCUDNN_GPU_CHECK(cudnnReduceTensor(handle_, d.reduce, nullptr, 0, ws, workspace_bytes, &one,
                                       vector.d, difference, &zero, scalar.d, norm));
    UCUDNN_GPU_CHECK(cudnnReduceTensor(handle_, d.reduce, nullptr, 0, ws, workspace_bytes, &one,
                                       vector.d, want_chunk, &zero, scalar.d, norm + 1));
    float host[2] = {0, 0};
    UCUDNN_RETURN_IF_ERROR(CopyToHost(host, norm, sizeof(host)));
    difference_squares += static_cast<double>(host[0]) * host[0];
    want_squares += static_cast<double>(host[1]) * host[1];
  }
  return std::pair<double, double>{difference_squares, want_squares};
}

Status CudnnBackend::EnsureEvents(size_t count) {
  while (events_.size() < count) {
    cudaEvent_t e = nullptr;
    UCUDNN_GPU_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return Status::Ok();
}

std::vector<Algorithm> CudnnBackend::ReferenceAlgorithms(ConvOp op) const {
  if (op == ConvOp::kBackwardData) {
    return {Algorithm(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1),
            Algorithm(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0)};
  }
  return ConvBackend::ReferenceAlgorithms(op);
}

Result<std::vector<double>> CudnnBackend::TimeRuns(const ConvProblem& problem, int64_t batch,
                                                   const Algorithm& algo,
                                                   const ConvOperands& operands, void* workspace,
                                                   size_t workspace_bytes, int warmup, int runs) {
  // Runs are issued back to back and waited for once, so the GPU is not left idle between them
  // while the host returns from a wait; each run is still bracketed by its own pair of events.
  return std::move(
      TimeRunBatch(problem, batch, operands, {{algo, workspace, workspace_bytes, warmup, runs, 1}})
          .front());
}

std::vector<Result<std::vector<double>>> CudnnBackend::TimeRunBatch(
    const ConvProblem& problem, int64_t batch, const ConvOperands& operands,
    const std::vector<TimedRunRequest>& requests, bool device_time_only) {
  if (device_time_only) {
    return ConvBackend::TimeRunBatch(problem, batch, operands, requests, device_time_only);
  }
  std::vector<Result<std::vector<double>>> out;
  out.reserve(requests.size());
  size_t pairs = 0;
  for (const TimedRunRequest& r : requests) pairs += static_cast<size_t>(std::max(r.samples, 0));
  Status setup = MakeDeviceCurrent();
  if (setup.ok()) setup = EnsureEvents(2 * pairs);
  if (!setup.ok()) {
    out.assign(requests.size(), setup);
    return out;
  }
  // Each request's runs as TimeRunGroups() queues them (warm-ups, then an event pair around each
  // group), the requests one after another on the stream, and one wait for all of them.
  const cudaStream_t s = stream();
  std::vector<size_t> first_event(requests.size(), 0);
  std::vector<bool> queued(requests.size(), false);
  size_t next_event = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const TimedRunRequest& r = requests[i];
    first_event[i] = next_event;
    const auto queue = [&]() -> Status {
      if (r.warmup < 0)
        return InvalidArgument("warmup: must be >= 0, got " + std::to_string(r.warmup));
      if (r.samples < 1 || r.group < 1) {
        return InvalidArgument("TimeRunBatch: samples and group must be >= 1");
      }
      UCUDNN_ASSIGN_OR_RETURN(
          std::function<Status()> run_once,
          ResolveTimedRuns(problem, batch, r.algo, operands, r.workspace, r.workspace_bytes));
      for (int w = 0; w < r.warmup; ++w) UCUDNN_RETURN_IF_ERROR(run_once());
      for (int k = 0; k < r.samples; ++k) {
        UCUDNN_GPU_CHECK(cudaEventRecord(events_[first_event[i] + 2 * k], s));
        for (int g = 0; g < r.group; ++g) UCUDNN_RETURN_IF_ERROR(run_once());
        UCUDNN_GPU_CHECK(cudaEventRecord(events_[first_event[i] + 2 * k + 1], s));
      }
      return Status::Ok();
    };
    next_event += 2 * static_cast<size_t>(std::max(r.samples, 0));
    const Status status = queue();
    // A failed request gets its error (the caller asks Healthy() whether the device survived it);
    // the ones queued before and after it keep their runs.
    out.push_back(status.ok() ? Result<std::vector<double>>(std::vector<double>{}) : status);
    queued[i] = status.ok();
  }
  const Status waited = UCUDNN_GPU_STATUS(cudaStreamSynchronize(s));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!queued[i]) continue;
    if (!waited.ok()) {
      out[i] = waited;
      continue;
    }
    std::vector<double>& times = *out[i];
    for (int k = 0; k < requests[i].samples; ++k) {
      float ms = 0;
      const Status read = UCUDNN_GPU_STATUS(cudaEventElapsedTime(
          &ms, events_[first_event[i] + 2 * k], events_[first_event[i] + 2 * k + 1]));
      if (!read.ok()) {
        out[i] = read;
        break;
      }
      times.push_back(static_cast<double>(ms) / requests[i].group);
    }
  }
  return out;
}

namespace {

// At most this many runs queue behind one gate. CUDA's launch queue is deep but finite: a host
// thread that fills it blocks in the next launch until the device drains the queue, which the
// closed gate prevents until its timeout. 64 runs of a few kernels each stay far below it.
constexpr int kMaxGatedRuns = 64;
// How long a gate holds its stream at most. Queuing kMaxGatedRuns short runs takes the host a
// millisecond or two; the timeout only bounds a host thread that was descheduled or blocked.
constexpr std::chrono::milliseconds kGateTimeout{100};

// Holds the work queued on a stream after Close() until Open() (or kGateTimeout), so that the
// runs queued meanwhile execute back to back on the device, however slowly the host issued them.
// The hold is a host function on the stream (cudaLaunchHostFunc) waiting on a condition variable:
// no CUDA call inside it, as the runtime requires. Its state is shared with the host function,
// which may run after the gate object is gone (an early return after a failed run).
class StreamGate {
 public:
  StreamGate() : state_(std::make_shared<State>()) {}
  ~StreamGate() { Open(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  Status Close(cudaStream_t stream) {
    // Hold() owns and deletes this reference once it ran.
    auto* held = new std::shared_ptr<State>(state_);
    const Status launched = UCUDNN_GPU_STATUS(cudaLaunchHostFunc(stream, &StreamGate::Hold, held));
    if (!launched.ok()) delete held;
    return launched;
  }
  void Open() {
    {
      std::lock_guard lock(state_->mu);
      state_->open = true;
    }
    state_->cv.notify_all();
  }
  // After the work behind the gate finished: whether the hold ended by its timeout rather than
  // Open(), i.e. the device may have waited for the host within the timed runs.
  bool timed_out() const {
    std::lock_guard lock(state_->mu);
    return state_->timed_out;
  }

 private:
  struct State {
    mutable std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    bool timed_out = false;
  };

  static void CUDART_CB Hold(void* data) {
    const std::unique_ptr<std::shared_ptr<State>> held(static_cast<std::shared_ptr<State>*>(data));
    State& state = **held;
    std::unique_lock lock(state.mu);
    if (!state.cv.wait_for(lock, kGateTimeout, [&state] { return state.open; })) {
      state.timed_out = true;
    }
  }

  std::shared_ptr<State> state_;
};

}  // namespace

Result<std::vector<double>> CudnnBackend::TimeRunGroups(const ConvProblem& problem, int64_t batch,
                                                        const Algorithm& algo,
                                                        const ConvOperands& operands,
                                                        void* workspace, size_t workspace_bytes,
                                                        int warmup, int samples, int group,
                                                        bool device_time_only) {
  // One run per event pair (group 1: runs long enough for this are issued faster than the device
  // executes them, so the queue never runs dry and no gate is needed), or groups as the host
  // issues them: TimeRunBatch, which checks the arguments.
  if (group == 1 || !device_time_only) {
    return std::move(TimeRunBatch(problem, batch, operands,
                                  {{algo, workspace, workspace_bytes, warmup, samples, group}})
                         .front());
  }
  if (group < 1) return InvalidArgument("group: must be >= 1, got " + std::to_string(group));
  if (warmup < 0) return InvalidArgument("warmup: must be >= 0, got " + std::to_string(warmup));
  if (samples < 1) return InvalidArgument("samples: must be >= 1, got " + std::to_string(samples));
  UCUDNN_RETURN_IF_ERROR(MakeDeviceCurrent());
  UCUDNN_ASSIGN_OR_RETURN(
      std::function<Status()> run_once,
      ResolveTimedRuns(problem, batch, algo, operands, workspace, workspace_bytes));
  for (int i = 0; i < warmup; ++i) {
    UCUDNN_RETURN_IF_ERROR(run_once());
  }
  UCUDNN_RETURN_IF_ERROR(EnsureEvents(2 * static_cast<size_t>(samples)));
  // Each sample is one event pair around `group` runs issued back to back, as a segment's
  // micro-batches are in a training step, queued behind a closed gate, a whole number of groups
  // per gate, and the gate opens once they are all queued: the device then runs them back to
  // back, so the events see device time only, not the host's time to issue each call (which
  // exceeds the run itself for the shortest kernels).
  const cudaStream_t s = stream();
  const int samples_per_gate = std::max(1, kMaxGatedRuns / group);
  std::vector<std::unique_ptr<StreamGate>> gates;
  for (int first = 0; first < samples; first += samples_per_gate) {
    auto gate = std::make_unique<StreamGate>();
    UCUDNN_RETURN_IF_ERROR(gate->Close(s));
    const int last = std::min(samples, first + samples_per_gate);
    for (int i = first; i < last; ++i) {
      UCUDNN_GPU_CHECK(cudaEventRecord(events_[2 * i], s));
      for (int g = 0; g < group; ++g) {
        UCUDNN_RETURN_IF_ERROR(run_once());
      }
      UCUDNN_GPU_CHECK(cudaEventRecord(events_[2 * i + 1], s));
    }
    gate->Open();
    gates.push_back(std::move(gate));
  }
  UCUDNN_GPU_CHECK(cudaEventSynchronize(events_[2 * samples - 1]));
  const auto timed_out =
      std::count_if(gates.begin(), gates.end(), [](const auto& gate) { return gate->timed_out(); });
  if (timed_out > 0) {
    spdlog::debug(
        "cudnn backend: {} of {} stream gates timed out before the host queued their runs; "
        "those samples may include host time",
        timed_out, gates.size());
  }
  std::vector<double> times;
  times.reserve(samples);
  for (int i = 0; i < samples; ++i) {
    float ms = 0;
    UCUDNN_GPU_CHECK(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
    times.push_back(static_cast<double>(ms) / group);
  }
  return times;
}

}  // namespace ucudnn
