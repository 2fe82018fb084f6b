// Reading a framework's cuDNN descriptors into the problem model (client/src/cudnn/descriptors.h):
// 4-d descriptors as 2-D problems, 5-d as 3-D ones (NCDHW and NDHWC), a 3-D convolution of depth
// 1 as its 2-D problem, and the shapes the model has no words for refused with a reason.
// Descriptors are host objects: no GPU needed.
#include <cudnn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cudnn/descriptors.h"

namespace ucudnn::client {
namespace {

// A convolution's four descriptors, destroyed at scope end.
class Descriptors {
 public:
  Descriptors() {
    EXPECT_EQ(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateConvolutionDescriptor(&conv), CUDNN_STATUS_SUCCESS);
  }
  ~Descriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  // x of `x_dims` (n, c, spatial...), filter `w_dims`, the convolution per spatial axis, y as
  // cuDNN computes it; all in `format`, fp16 data with fp32 compute.
  void Set(cudnnTensorFormat_t format, const std::vector<int>& x_dims,
           const std::vector<int>& w_dims, const std::vector<int>& pads,
           const std::vector<int>& strides, const std::vector<int>& dilations) {
    const int rank = static_cast<int>(x_dims.size());
    ASSERT_EQ(cudnnSetTensorNdDescriptorEx(x, format, CUDNN_DATA_HALF, rank, x_dims.data()),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetFilterNdDescriptor(w, CUDNN_DATA_HALF, format, rank, w_dims.data()),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetConvolutionNdDescriptor(conv, rank - 2, pads.data(), strides.data(),
                                              dilations.data(), CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH), CUDNN_STATUS_SUCCESS);
    std::vector<int> y_dims(rank);
    ASSERT_EQ(cudnnGetConvolutionNdForwardOutputDim(conv, x, w, rank, y_dims.data()),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetTensorNdDescriptorEx(y, format, CUDNN_DATA_HALF, rank, y_dims.data()),
              CUDNN_STATUS_SUCCESS);
  }

  bool Parse(ParsedConvolution* parsed, const char** why) const {
    return ParseConvolution(ConvOp::kForward, x, w, conv, y, parsed, why);
  }

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

TEST(DescriptorsTest, FourDimensionalDescriptorsAreA2dProblem) {
  Descriptors d;
  d.Set(CUDNN_TENSOR_NHWC, {8, 16, 20, 24}, {32, 16, 3, 5}, {1, 2}, {2, 1}, {1, 1});
  ParsedConvolution parsed;
  const char* why = "";
  ASSERT_TRUE(d.Parse(&parsed, &why)) << why;
  EXPECT_EQ(parsed.batch, 8);
  EXPECT_EQ(CanonicalKey(parsed.problem),
            "v1;op=fwd;c=16;h=20;w=24;k=32;r=3;s=5;pad=1,2;stride=2,1;dil=1,1;g=1;dtype=fp16;"
            "ctype=fp32;layout=nhwc;math=tensor_op");
}

TEST(DescriptorsTest, FiveDimensionalDescriptorsAreA3dProblemInEitherLayout) {
  for (cudnnTensorFormat_t format : {CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NHWC}) {
    Descriptors d;
    d.Set(format, {2, 4, 6, 10, 12}, {8, 4, 3, 3, 1}, {1, 1, 0}, {2, 1, 1}, {1, 2, 1});
    ParsedConvolution parsed;
    const char* why = "";
    ASSERT_TRUE(d.Parse(&parsed, &why)) << why;
    const ConvProblem& p = parsed.problem;
    EXPECT_TRUE(p.is_3d());
    EXPECT_EQ(parsed.batch, 2);
    EXPECT_EQ(CanonicalKey(p),
              "v1;op=fwd;c=4;d=6;h=10;w=12;k=8;t=3;r=3;s=1;pad=1,1,0;stride=2,1,1;dil=1,2,1;g=1;"
              "dtype=fp16;ctype=fp32;layout=" +
                  std::string(format == CUDNN_TENSOR_NHWC ? "ndhwc" : "ncdhw") + ";math=tensor_op");
  }
}

TEST(DescriptorsTest, A3dConvolutionOfDepthOneIsIts2dProblem) {
  Descriptors d;
  // Depth 1, a 1-deep filter, a depth stride of 2 (which changes nothing at depth 1).
  d.Set(CUDNN_TENSOR_NCHW, {4, 3, 1, 9, 9}, {6, 3, 1, 3, 3}, {0, 1, 1}, {2, 1, 1}, {1, 1, 1});
  ParsedConvolution parsed;
  const char* why = "";
  ASSERT_TRUE(d.Parse(&parsed, &why)) << why;
  EXPECT_FALSE(parsed.problem.is_3d());
  EXPECT_EQ(CanonicalKey(parsed.problem),
            "v1;op=fwd;c=3;h=9;w=9;k=6;r=3;s=3;pad=1,1;stride=1,1;dil=1,1;g=1;dtype=fp16;"
            "ctype=fp32;layout=nchw;math=tensor_op");
}

TEST(DescriptorsTest, ShapesTheModelHasNoWordsForAreRefusedWithAReason) {
  Descriptors d;
  d.Set(CUDNN_TENSOR_NCHW, {2, 4, 6, 10, 12}, {8, 4, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1});
  // y of another shape than the convolution's.
  const int wrong[] = {2, 8, 5, 10, 12};
  ASSERT_EQ(cudnnSetTensorNdDescriptorEx(d.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 5, wrong),
            CUDNN_STATUS_SUCCESS);
  ParsedConvolution parsed;
  const char* why = "";
  EXPECT_FALSE(d.Parse(&parsed, &why));
  EXPECT_EQ(std::string(why), "output tensor shape does not match the convolution");
  // A 4-d input with a 5-d filter.
  const int four[] = {2, 4, 10, 12};
  ASSERT_EQ(cudnnSetTensorNdDescriptorEx(d.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 4, four),
            CUDNN_STATUS_SUCCESS);
  EXPECT_FALSE(d.Parse(&parsed, &why));
  EXPECT_EQ(std::string(why), "tensor is not 5-D");
}

}  // namespace
}  // namespace ucudnn::client
