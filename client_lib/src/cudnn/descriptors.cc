#include "cudnn/descriptors.h"

#include <string>
#include <utility>

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

struct Tensor4d {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};

// A fully packed 4-D tensor in `layout`. Strides of dimensions of size 1 are free (cuDNN and the
// frameworks put anything there).
bool ReadTensor(cudnnTensorDescriptor_t desc, Layout layout, Tensor4d* t, const char** why) {
  int dims[CUDNN_DIM_MAX] = {};
  int strides[CUDNN_DIM_MAX] = {};
  int rank = 0;
  if (cudnnGetTensorNdDescriptor(desc, CUDNN_DIM_MAX, &t->type, &rank, dims, strides) !=
      CUDNN_STATUS_SUCCESS) {
    *why = "cannot read a tensor descriptor";
    return false;
  }
  if (rank != 4) {
    *why = "tensor is not 4-D";
    return false;
  }
  t->n = dims[0];
  t->c = dims[1];
  t->h = dims[2];
  t->w = dims[3];
  const int64_t c = t->c, h = t->h, w = t->w;
  int64_t expected[4];
  if (layout == Layout::kNCHW) {
    expected[0] = c * h * w, expected[1] = h * w, expected[2] = w, expected[3] = 1;
  } else {
    expected[0] = h * w * c, expected[1] = 1, expected[2] = w * c, expected[3] = c;
  }
  for (int i = 0; i < 4; ++i) {
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
  if (filter_rank != 4) {
    *why = "filter is not 4-D";
    return false;
  }
  Layout layout = Layout::kNCHW;
  if (format == CUDNN_TENSOR_NHWC) {
    layout = Layout::kNHWC;
  } else if (format != CUDNN_TENSOR_NCHW) {
    *why = "filter format is neither NCHW nor NHWC";
    return false;
  }

  int pads[2] = {}, strides[2] = {}, dilations[2] = {};
  int conv_rank = 0;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  if (cudnnGetConvolutionNdDescriptor(conv, 2, &conv_rank, pads, strides, dilations, &mode,
                                      &compute) != CUDNN_STATUS_SUCCESS ||
      conv_rank != 2) {
    *why = "convolution is not 2-D";
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

  Tensor4d in, out;
  if (!ReadTensor(input, layout, &in, why) || !ReadTensor(output, layout, &out, why)) return false;

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
  p.c = in.c;
  p.h = in.h;
  p.w = in.w;
  p.k = filter_dims[0];
  p.r = filter_dims[2];
  p.s = filter_dims[3];
  p.pad_h = pads[0];
  p.pad_w = pads[1];
  p.stride_h = strides[0];
  p.stride_w = strides[1];
  p.dilation_h = dilations[0];
  p.dilation_w = dilations[1];
  p.groups = groups;
  parsed->batch = in.n;
  if (groups < 1 || int64_t{filter_dims[1]} * groups != p.c) {
    *why = "filter channels times groups differ from the input's channels";
    return false;
  }
  if (!Validate(p).ok() || !ValidateBatch(in.n).ok()) {
    *why = "shape outside the problem model's bounds";
    return false;
  }
  if (out.n != in.n || out.c != p.k || out.h != p.out_h() || out.w != p.out_w()) {
    *why = "output tensor shape does not match the convolution";
    return false;
  }
  return true;
}

// ---- Bound plans ------------------------------------------------------------------------------

Status CudnnError(cudnnStatus_t status, const char* call) {
  const std::string message = std::string(call) + ": " + cudnnGetErrorString(status);
  switch (status) {
    case CUDNN_STATUS_NOT_SUPPORTED:
      return Unsupported(message);
    case CUDNN_STATUS_ALLOC_FAILED:
      return ResourceExhausted(message);
    default:
      return Internal(message);
  }
}

namespace {

#define UCUDNN_CLIENT_CUDNN(call)                       \
  do {                                                  \
    const cudnnStatus_t ucudnn_client_status = (call);  \
    if (ucudnn_client_status != CUDNN_STATUS_SUCCESS) { \
      return CudnnError(ucudnn_client_status, #call);   \
    }                                                   \
  } while (false)

Result<cudnnDataType_t> ToCudnn(DataType type, bool compute) {
  switch (type) {
    case DataType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DataType::kFloat16:
      return CUDNN_DATA_HALF;
    case DataType::kBFloat16:
      // The legacy API has no bf16 compute type (the cuDNN backend declines it the same way).
      if (compute) return Unsupported("bf16 compute is not available in cuDNN's legacy API");
      return CUDNN_DATA_BFLOAT16;
  }
  return InvalidArgument("unknown data type");
}

cudnnMathType_t ToCudnn(MathMode math) {
  switch (math) {
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

class BoundCudnnPlan final : public MicroBatchRunner {
 public:
  BoundCudnnPlan(cudnnHandle_t handle, ConvOp op) : handle_(handle), op_(op) {}
  ~BoundCudnnPlan() override {
    // Destroying a descriptor frees host memory only; there is nothing to do about a failure.
    for (const SizeSet& set : sets_) {
      if (set.x != nullptr) (void)cudnnDestroyTensorDescriptor(set.x);
      if (set.y != nullptr) (void)cudnnDestroyTensorDescriptor(set.y);
    }
    if (w_ != nullptr) (void)cudnnDestroyFilterDescriptor(w_);
    if (conv_ != nullptr) (void)cudnnDestroyConvolutionDescriptor(conv_);
  }
  BoundCudnnPlan(const BoundCudnnPlan&) = delete;
  BoundCudnnPlan& operator=(const BoundCudnnPlan&) = delete;

  Status Build(const ConvProblem& p, std::span<const Segment> segments) {
    UCUDNN_ASSIGN_OR_RETURN(const cudnnDataType_t data, ToCudnn(p.data_type, false));
    UCUDNN_ASSIGN_OR_RETURN(const cudnnDataType_t compute, ToCudnn(p.compute_type, true));
    const cudnnTensorFormat_t format =
        p.layout == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    UCUDNN_CLIENT_CUDNN(cudnnCreateFilterDescriptor(&w_));
    UCUDNN_CLIENT_CUDNN(
        cudnnSetFilter4dDescriptor(w_, data, format, i(p.k), i(p.c / p.groups), i(p.r), i(p.s)));
    UCUDNN_CLIENT_CUDNN(cudnnCreateConvolutionDescriptor(&conv_));
    UCUDNN_CLIENT_CUDNN(cudnnSetConvolution2dDescriptor(
        conv_, i(p.pad_h), i(p.pad_w), i(p.stride_h), i(p.stride_w), i(p.dilation_h),
        i(p.dilation_w), CUDNN_CROSS_CORRELATION, compute));
    UCUDNN_CLIENT_CUDNN(cudnnSetConvolutionGroupCount(conv_, i(p.groups)));
    UCUDNN_CLIENT_CUDNN(cudnnSetConvolutionMathType(conv_, ToCudnn(p.math)));
    set_of_segment_.reserve(segments.size());
    for (const Segment& segment : segments) {
      size_t found = sets_.size();
      for (size_t j = 0; j < sets_.size(); ++j) {
        if (sets_[j].batch == segment.micro_batch) found = j;
      }
      if (found == sets_.size()) {
        const int n = i(segment.micro_batch);
        sets_.push_back(SizeSet{segment.micro_batch, nullptr, nullptr});
        SizeSet& set = sets_.back();
        UCUDNN_CLIENT_CUDNN(cudnnCreateTensorDescriptor(&set.x));
        UCUDNN_CLIENT_CUDNN(
            cudnnSetTensor4dDescriptor(set.x, format, data, n, i(p.c), i(p.h), i(p.w)));
        UCUDNN_CLIENT_CUDNN(cudnnCreateTensorDescriptor(&set.y));
        UCUDNN_CLIENT_CUDNN(
            cudnnSetTensor4dDescriptor(set.y, format, data, n, i(p.k), i(p.out_h()), i(p.out_w())));
        // The model's output size and cuDNN's must agree, or the operands' offsets would be wrong.
        int on = 0, ok = 0, oh = 0, ow = 0;
        UCUDNN_CLIENT_CUDNN(
            cudnnGetConvolution2dForwardOutputDim(conv_, set.x, w_, &on, &ok, &oh, &ow));
        if (on != n || ok != p.k || oh != p.out_h() || ow != p.out_w()) {
          return Internal("cuDNN's output shape differs from the problem's for " + CanonicalKey(p));
        }
      }
      set_of_segment_.push_back(found);
    }
    return Status::Ok();
  }

  Status RunMicroBatch(size_t index, const Segment& segment, const ConvOperands& o, void* workspace,
                       size_t workspace_bytes, float alpha, float beta) override {
    if (index >= set_of_segment_.size()) return Internal("segment index past the bound plan");
    const SizeSet& set = sets_[set_of_segment_[index]];
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    switch (op_) {
      case ConvOp::kForward:
        status = cudnnConvolutionForward(handle_, &alpha, set.x, o.x, w_, o.w, conv_,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(segment.algo),
                                         workspace, workspace_bytes, &beta, set.y, o.y);
        break;
      case ConvOp::kBackwardData:
        status =
            cudnnConvolutionBackwardData(handle_, &alpha, w_, o.w, set.y, o.dy, conv_,
                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(segment.algo),
                                         workspace, workspace_bytes, &beta, set.x, o.dx);
        break;
      case ConvOp::kBackwardFilter:
        status = cudnnConvolutionBackwardFilter(
            handle_, &alpha, set.x, o.x, set.y, o.dy, conv_,
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(segment.algo), workspace, workspace_bytes,
            &beta, w_, o.dw);
        break;
    }
    if (status == CUDNN_STATUS_SUCCESS) return Status::Ok();
    return CudnnError(status, "planned micro-batch");
  }

 private:
  struct SizeSet {
    int64_t batch = 0;
    cudnnTensorDescriptor_t x = nullptr;  // input-shaped: x or dx
    cudnnTensorDescriptor_t y = nullptr;  // output-shaped: y or dy
  };
  cudnnHandle_t handle_;
  ConvOp op_;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  std::vector<SizeSet> sets_;
  std::vector<size_t> set_of_segment_;
};

#undef UCUDNN_CLIENT_CUDNN

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
