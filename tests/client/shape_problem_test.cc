// The shape-level C API's problem description read into the problem model (pure).
#include "shape_problem.h"

#include <gtest/gtest.h>

namespace ucudnn::client {
namespace {

ucudnnConvShape_t Resnet3x3() {
  ucudnnConvShape_t s{};
  s.op = UCUDNN_CONVOLUTION_BACKWARD_DATA;
  s.n = 32;
  s.c = 64;
  s.h = 56;
  s.w = 56;
  s.k = 128;
  s.r = 3;
  s.s = 3;
  s.pad_h = s.pad_w = 1;
  s.stride_h = s.stride_w = 2;
  s.dilation_h = s.dilation_w = 1;
  s.groups = 2;
  s.data_type = UCUDNN_SHAPE_HALF;
  s.layout = UCUDNN_SHAPE_NHWC;
  s.math = UCUDNN_SHAPE_MATH_TENSOR_OP;
  return s;
}

TEST(ShapeProblemTest, EveryFieldIsRead) {
  Result<ShapeKernel> kernel = ToShapeKernel(Resnet3x3());
  ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
  EXPECT_EQ(kernel->batch, 32);
  const ConvProblem& p = kernel->problem;
  EXPECT_EQ(CanonicalKey(p),
            "v1;op=bwd_data;c=64;h=56;w=56;k=128;r=3;s=3;pad=1,1;stride=2,2;dil=1,1;g=2;"
            "dtype=fp16;ctype=fp32;layout=nhwc;math=tensor_op");
}

TEST(ShapeProblemTest, BadFieldsAreNamed) {
  struct Case {
    void (*mutate)(ucudnnConvShape_t&);
    const char* message;
  };
  const Case cases[] = {
      {[](ucudnnConvShape_t& s) { s.op = static_cast<ucudnnConvolutionOp_t>(7); }, "shape.op:"},
      {[](ucudnnConvShape_t& s) { s.data_type = static_cast<ucudnnShapeDataType_t>(9); },
       "shape.data_type:"},
      {[](ucudnnConvShape_t& s) { s.layout = static_cast<ucudnnShapeLayout_t>(2); },
       "shape.layout:"},
      {[](ucudnnConvShape_t& s) { s.math = static_cast<ucudnnShapeMath_t>(4); }, "shape.math:"},
      {[](ucudnnConvShape_t& s) { s.c = 0; }, "shape.c:"},
      {[](ucudnnConvShape_t& s) { s.groups = 3; }, "shape.groups:"},
      {[](ucudnnConvShape_t& s) { s.n = 0; }, "shape.n:"},
  };
  for (const Case& c : cases) {
    ucudnnConvShape_t shape = Resnet3x3();
    c.mutate(shape);
    Result<ShapeKernel> kernel = ToShapeKernel(shape);
    ASSERT_FALSE(kernel.ok()) << c.message;
    EXPECT_EQ(kernel.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(kernel.status().message().rfind(c.message, 0), 0u) << kernel.status().message();
  }
}

}  // namespace
}  // namespace ucudnn::client
