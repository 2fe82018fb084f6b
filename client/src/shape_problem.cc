#include "shape_problem.h"

#include <string>

namespace ucudnn::client {

Result<ShapeKernel> ToShapeKernel(const ucudnnConvShape_t& shape) {
  ShapeKernel kernel;
  ConvProblem& p = kernel.problem;
  switch (shape.op) {
    case UCUDNN_CONVOLUTION_FORWARD:
      p.op = ConvOp::kForward;
      break;
    case UCUDNN_CONVOLUTION_BACKWARD_DATA:
      p.op = ConvOp::kBackwardData;
      break;
    case UCUDNN_CONVOLUTION_BACKWARD_FILTER:
      p.op = ConvOp::kBackwardFilter;
      break;
    default:
      return InvalidArgument(
          "shape.op: must be 0 (forward), 1 (backward-data) or 2 "
          "(backward-filter), got " +
          std::to_string(static_cast<int>(shape.op)));
  }
  switch (shape.data_type) {
    case UCUDNN_SHAPE_FLOAT:
      p.data_type = DataType::kFloat32;
      break;
    case UCUDNN_SHAPE_HALF:
      p.data_type = DataType::kFloat16;
      break;
    case UCUDNN_SHAPE_BFLOAT16:
      p.data_type = DataType::kBFloat16;
      break;
    default:
      return InvalidArgument("shape.data_type: must be 0 (float), 1 (half) or 2 (bfloat16), got " +
                             std::to_string(static_cast<int>(shape.data_type)));
  }
  // Accumulation in fp32 for every data type: what frameworks ask cuDNN for.
  p.compute_type = DataType::kFloat32;
  switch (shape.layout) {
    case UCUDNN_SHAPE_NCHW:
      p.layout = Layout::kNCHW;
      break;
    case UCUDNN_SHAPE_NHWC:
      p.layout = Layout::kNHWC;
      break;
    default:
      return InvalidArgument("shape.layout: must be 0 (NCHW) or 1 (NHWC), got " +
                             std::to_string(static_cast<int>(shape.layout)));
  }
  const int math = static_cast<int>(shape.math);
  if (math < static_cast<int>(MathMode::kDefault) || math > static_cast<int>(MathMode::kFma)) {
    return InvalidArgument("shape.math: must be in [0, 3], got " + std::to_string(math));
  }
  p.math = static_cast<MathMode>(math);
  p.c = shape.c;
  p.h = shape.h;
  p.w = shape.w;
  p.k = shape.k;
  p.r = shape.r;
  p.s = shape.s;
  p.pad_h = shape.pad_h;
  p.pad_w = shape.pad_w;
  p.stride_h = shape.stride_h;
  p.stride_w = shape.stride_w;
  p.dilation_h = shape.dilation_h;
  p.dilation_w = shape.dilation_w;
  p.groups = shape.groups;
  // 0 is "not set": a 2-D caller's zeroed depth fields.
  auto or_one = [](int64_t v) { return v == 0 ? int64_t{1} : v; };
  p.d = or_one(shape.d);
  p.t = or_one(shape.t);
  p.pad_d = shape.pad_d;
  p.stride_d = or_one(shape.stride_d);
  p.dilation_d = or_one(shape.dilation_d);
  NormalizeDepth(p);
  if (Status valid = Validate(p); !valid.ok()) {
    return InvalidArgument("shape." + valid.message());
  }
  if (Status valid = ValidateBatch(shape.n); !valid.ok()) {
    return InvalidArgument("shape.n: " + valid.message());
  }
  kernel.batch = shape.n;
  return kernel;
}

}  // namespace ucudnn::client
