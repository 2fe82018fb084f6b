// Algorithm names without a device: the CPU backend's list is the backend's own, cuDNN's follow
// its enum values (checked against cudnn.h in tests/gpu when cuDNN is built).
#include "ucudnn/core/algorithm_names.h"

#include <gtest/gtest.h>

#include "ucudnn/backends/cpu_backend.h"

namespace ucudnn {
namespace {

TEST(AlgorithmNamesTest, CpuNamesAreTheBackendsOwn) {
  CpuBackend backend;
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    const auto algos = backend.Algorithms(op);
    ASSERT_EQ(algos.size(), static_cast<size_t>(kCpuAlgoCount));
    for (const AlgorithmInfo& a : algos) EXPECT_EQ(AlgorithmName("cpu", op, a.id), a.name);
  }
  EXPECT_EQ(AlgorithmName("cpu", ConvOp::kForward, kCpuAlgoIm2colGemm), "im2col_gemm");
}

TEST(AlgorithmNamesTest, CudnnNamesFollowTheEnumPerOp) {
  EXPECT_EQ(AlgorithmName("cudnn", ConvOp::kForward, 1), "IMPLICIT_PRECOMP_GEMM");
  EXPECT_EQ(AlgorithmName("cudnn", ConvOp::kForward, 7), "WINOGRAD_NONFUSED");
  EXPECT_EQ(AlgorithmName("cudnn", ConvOp::kBackwardData, 1), "ALGO_1");
  EXPECT_EQ(AlgorithmName("cudnn", ConvOp::kBackwardFilter, 6), "FFT_TILING");
  EXPECT_EQ(CudnnAlgorithmCount(ConvOp::kForward), 8);
  EXPECT_EQ(CudnnAlgorithmCount(ConvOp::kBackwardData), 6);
  EXPECT_EQ(CudnnAlgorithmCount(ConvOp::kBackwardFilter), 7);
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    const auto algos = CudnnAlgorithms(op);
    ASSERT_EQ(static_cast<int>(algos.size()), CudnnAlgorithmCount(op));
    for (size_t i = 0; i < algos.size(); ++i) EXPECT_EQ(algos[i].id, static_cast<int>(i));
  }
}

TEST(AlgorithmNamesTest, UnknownBackendOrIdIsEmpty) {
  EXPECT_EQ(AlgorithmName("tpu", ConvOp::kForward, 0), "");
  EXPECT_EQ(AlgorithmName("cpu", ConvOp::kForward, kCpuAlgoCount), "");
  EXPECT_EQ(AlgorithmName("cpu", ConvOp::kForward, -1), "");
  EXPECT_EQ(AlgorithmName("cudnn", ConvOp::kBackwardData, 6), "");
  EXPECT_EQ(AlgorithmName("cudnn", ConvOp::kForward, -1), "");
}

}  // namespace
}  // namespace ucudnn
