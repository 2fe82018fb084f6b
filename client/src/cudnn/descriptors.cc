#include "cudnn/descriptors.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/backends/cudnn_engines.h"

namespace ucudnn::client {
namespace {

bool ToDataType(cudnnDataType_t type, DataType* out) {
  switch (type) {
    case CUDNN_DATA_FLOAT:
      *out = DataType::kFloat32;
      return true;
    case CUDNN_DATA_HALF:
      *out = DataType::kFloat16;
      return true;
    case CUDNN_DATA_BFLOAT16:
      *out = DataType::kBFloat16;
      return true;
    default:
      return false;
  }
}

bool ToMathMode(cudnnMathType_t math, MathMode* out) {
  switch (math) {
    case CUDNN_DEFAULT_MATH:
      *out = MathMode::kDefault;
      return true;
    case CUDNN_TENSOR_OP_MATH:
      *out = MathMode::kTensorOp;
      return true;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      *out = MathMode::kTensorOpAllowConversion;
      return true;
    case CUDNN_FMA_MATH:
      *out = MathMode::kFma;
      return true;
    default:
      return false;
  }
}

// A tensor of a 2-D (4-d) or 3-D (5-d) convolution: {n, c, (d,) h, w}.
struct TensorNd {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int rank = 0;
  int dims[5] = {};
  int n() const { return dims[0]; }
  int c() const { return dims[1]; }
};

// A fully packed 4-d or 5-d tensor of rank `rank` in `layout` (NCHW/NCDHW or NHWC/NDHWC). Strides
// of dimensions of size 1 are free (cuDNN and the frameworks put anything there).
bool ReadTensor(cudnnTensorDescriptor_t desc, Layout layout, int rank, TensorNd* t,
                const char** why) {
  int strides[CUDNN_DIM_MAX] = {};
  int dims[CUDNN_DIM_MAX] = {};
  if (cudnnGetTensorNdDescriptor(desc, CUDNN_DIM_MAX, &t->type, &t->rank, dims, strides) !=
      CUDNN_STATUS_SUCCESS) {
    *why = "cannot read a tensor descriptor";
    return false;
  }
  if (t->rank != rank) {
    *why = rank == 4 ? "tensor is not 4-D" : "tensor is not 5-D";
    return false;
  }
  std::copy(dims, dims + rank, t->dims);
  // The packed strides: innermost last in NC(D)HW, the channels innermost in N(D)HWC.
  int64_t expected[5] = {};
  int64_t stride = 1;
  if (layout == Layout::kNCHW) {
    for (int i = rank - 1; i >= 0; --i) {
      expected[i] = stride;
      stride *= dims[i];
    }
  } else {
    expected[1] = 1;
    stride = dims[1];
    for (int i = rank - 1; i >= 2; --i) {
      expected[i] = stride;
      stride *= dims[i];
    }
    expected[0] = stride;
  }
  for (int i = 0; i < rank; ++i) {
    if (dims[i] > 1 && strides[i] != expected[i]) {
      *why = "tensor is not packed in the filter's layout";
      return false;
    }
  }
  return true;
}

}  // namespace

bool ParseConvolution(ConvOp op, cudnnTensorDescriptor_t input, cudnnFilterDescriptor_t filter,
                      cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t output,
                      ParsedConvolution* parsed, const char** why) {
  cudnnDataType_t filter_type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int filter_rank = 0;
  int filter_dims[CUDNN_DIM_MAX] = {};
  if (cudnnGetFilterNdDescriptor(filter, CUDNN_DIM_MAX, &filter_type, &format, &filter_rank,
                                 filter_dims) != CUDNN_STATUS_SUCCESS) {
    *why = "cannot read the filter descriptor";
    return false;
  }
  if (filter_rank != 4 && filter_rank != 5) {
    *why = "filter is neither 4-D nor 5-D";
    return false;
  }
  const int spatial = filter_rank - 2;
  Layout layout = Layout::kNCHW;
  if (format == CUDNN_TENSOR_NHWC) {
    layout = Layout::kNHWC;
  } else if (format != CUDNN_TENSOR_NCHW) {
    *why = "filter format is neither NCHW nor NHWC";
    return false;
  }

  int pads[3] = {}, strides[3] = {}, dilations[3] = {};
  int conv_rank = 0;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  if (cudnnGetConvolutionNdDescriptor(conv, 3, &conv_rank, pads, strides, dilations, &mode,
                                      &compute) != CUDNN_STATUS_SUCCESS ||
      conv_rank != spatial) {
    *why = "convolution's rank is not the filter's (2-D or 3-D)";
    return false;
  }
  if (mode != CUDNN_CROSS_CORRELATION) {
    *why = "CUDNN_CONVOLUTION mode (only cross-correlation is planned)";
    return false;
  }
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  if (cudnnGetConvolutionGroupCount(conv, &groups) != CUDNN_STATUS_SUCCESS ||
      cudnnGetConvolutionMathType(conv, &math) != CUDNN_STATUS_SUCCESS) {
    *why = "cannot read the convolution's groups or math type";
    return false;
  }

  TensorNd in, out;
  if (!ReadTensor(input, layout, filter_rank, &in, why) ||
      !ReadTensor(output, layout, filter_rank, &out, why)) {
    return false;
  }
  ConvProblem& p = parsed->problem;
  p = ConvProblem{};
  p.op = op;
  if (!ToDataType(in.type, &p.data_type) || in.type != out.type || in.type != filter_type) {
    *why = "data types differ or are not fp32, fp16 or bf16";
    return false;
  }
  if (!ToDataType(compute, &p.compute_type)) {
    *why = "compute type is not fp32, fp16 or bf16";
    return false;
  }
  if (!ToMathMode(math, &p.math)) {
    *why = "math type is not one cuDNN 9 documents";
    return false;
  }
  p.layout = layout;
  p.c = in.c();
  p.k = filter_dims[0];
  p.groups = groups;
  // The spatial axes: (d,) h, w.
  const int h = spatial == 3 ? 1 : 0;  // the height's index among the spatial axes
  if (spatial == 3) {
    p.d = in.dims[2];
    p.t = filter_dims[2];
  }
  p.h = in.dims[2 + h];
  p.w = in.dims[3 + h];
  p.r = filter_dims[2 + h];
  p.s = filter_dims[3 + h];
  const std::vector<int64_t> pad(pads, pads + spatial), stride(strides, strides + spatial),
      dilation(dilations, dilations + spatial);
  SetPerAxis(p, pad, stride, dilation);
  NormalizeDepth(p);
  parsed->batch = in.n();
  if (groups < 1 || int64_t{filter_dims[1]} * groups != p.c) {
    *why = "filter channels times groups differ from the input's channels";
    return false;
  }
  if (!Validate(p).ok() || !ValidateBatch(in.n()).ok()) {
    *why = "shape outside the problem model's bounds";
    return false;
  }
  const bool out_ok = out.n() == in.n() && out.c() == p.k &&
                      (spatial == 2 || out.dims[2] == p.out_d()) && out.dims[2 + h] == p.out_h() &&
                      out.dims[3 + h] == p.out_w();
  if (!out_ok) {
    *why = "output tensor shape does not match the convolution";
    return false;
  }
  return true;
}

// ---- Bound plans ------------------------------------------------------------------------------

namespace {

// A plan's segments over what each needs, built once: a descriptor set per distinct micro-batch
// size for legacy algorithms, an execution plan per (size, engine configuration) for the graph
// API's, twice (beta 0 and beta 1: the graph holds the scalars). The hot path then issues the call
// with no lookup and no plan building.
class BoundCudnnPlan final : public MicroBatchRunner {
 public:
  BoundCudnnPlan(cudnnHandle_t handle, ConvOp op) : handle_(handle), op_(op) {}

  Status Build(const ConvProblem& p, std::span<const Segment> segments) {
    problem_ = p;
    runs_.reserve(segments.size());
    for (size_t i = 0; i < segments.size(); ++i) {
      const Segment& segment = segments[i];
      SegmentRun run;
      if (IsFramework(segment)) {
        // Never bound: the session hands a framework plan to the caller's own convolution.
        return Unsupported("the framework's own convolution is not run by ucudnn");
      }
      if (AlgorithmOf(segment).is_engine()) {
        // A configuration this cuDNN cannot build fails the bind: the session then never uses
        // the plan's engine segments on the hot path (the call falls back).
        // Both scalars a call may bring: beta 0 (overwrite, what frameworks pass) and beta 1
        // (accumulate: backward-filter's later micro-batches, built now; callers that add into
        // the output of another op, built at their first such call). Other scalars run through
        // the legacy path of the fallback.
        UCUDNN_ASSIGN_OR_RETURN(run.overwrite, BuildEngine(p, segment, 0.0f));
        if (op_ == ConvOp::kBackwardFilter) {
          UCUDNN_ASSIGN_OR_RETURN(run.accumulate, BuildEngine(p, segment, 1.0f));
        }
        runs_.push_back(std::move(run));
        continue;
      }
      size_t found = sets_.size();
      for (size_t j = 0; j < sets_.size(); ++j) {
        if (sets_[j].batch == segment.micro_batch) found = j;
      }
      if (found == sets_.size()) {
        UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<CudnnDescriptors> built,
                                CudnnDescriptors::Build(p, segment.micro_batch));
        sets_.push_back({segment.micro_batch, std::move(built)});
      }
      run.descriptor_set = found;
      runs_.push_back(std::move(run));
    }
    return Status::Ok();
  }

  Status RunMicroBatch(size_t index, const Segment& segment, const ConvOperands& o, void* workspace,
                       size_t workspace_bytes, float alpha, float beta) override {
    if (index >= runs_.size()) return Internal("segment index past the bound plan");
    SegmentRun& run = runs_[index];
    if (run.overwrite != nullptr) {
      if (beta == 1.0f && run.accumulate == nullptr) {
        UCUDNN_ASSIGN_OR_RETURN(run.accumulate, BuildEngine(problem_, segment, 1.0f));
      }
      EnginePlan* plan = beta == 0.0f   ? run.overwrite.get()
                         : beta == 1.0f ? run.accumulate.get()
                                        : nullptr;
      if (plan == nullptr || alpha != 1.0f) {
        return Unsupported("engine segment called with alpha " + std::to_string(alpha) +
                           " and beta " + std::to_string(beta) +
                           " (its plans were built for alpha 1, beta 0 or 1)");
      }
      return plan->Execute(handle_, o, workspace, workspace_bytes);
    }
    return RunCudnnConvolution(handle_, op_, *sets_[run.descriptor_set].descriptors, segment.algo,
                               o, workspace, workspace_bytes, alpha, beta);
  }

 private:
  struct SizeSet {
    int64_t batch = 0;
    std::unique_ptr<CudnnDescriptors> descriptors;
  };
  struct SegmentRun {
    size_t descriptor_set = 0;               // legacy
    std::shared_ptr<EnginePlan> overwrite;   // engine, beta 0
    std::shared_ptr<EnginePlan> accumulate;  // engine, beta 1
  };

  // The process's shared plan (SharedEnginePlan): the backend's checked first run and workspace
  // query built it already, and segments of one size share it.
  Result<std::shared_ptr<EnginePlan>> BuildEngine(const ConvProblem& p, const Segment& segment,
                                                  float beta) {
    UCUDNN_ASSIGN_OR_RETURN(EngineConfig config, ParseEngineConfigKey(segment.engine_config));
    // Plans come for this job's own fingerprint, whose cuDNN version is the one loaded.
    config.cudnn_version = static_cast<int32_t>(cudnnGetVersion());
    return SharedEnginePlan(handle_, p, segment.micro_batch, beta, config);
  }

  cudnnHandle_t handle_;
  ConvOp op_;
  ConvProblem problem_;  // for plans built at a later call
  std::vector<SizeSet> sets_;
  std::vector<SegmentRun> runs_;
};

}  // namespace

Result<std::unique_ptr<MicroBatchRunner>> CudnnPlanBinder::Bind(const ConvProblem& problem,
                                                                std::span<const Segment> segments) {
  UCUDNN_RETURN_IF_ERROR(Validate(problem));
  for (const Segment& segment : segments) {
    UCUDNN_RETURN_IF_ERROR(ValidateBatch(segment.micro_batch));
  }
  auto plan = std::make_unique<BoundCudnnPlan>(handle_, problem.op);
  UCUDNN_RETURN_IF_ERROR(plan->Build(problem, segments));
  return std::unique_ptr<MicroBatchRunner>(std::move(plan));
}

}  // namespace ucudnn::client
