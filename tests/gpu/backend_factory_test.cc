// The backend factory and the GPU fingerprint, through the generic interface.
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"

namespace ucudnn::gputest {
namespace {

TEST(BackendFactoryTest, CpuBackendIsAlwaysThere) {
  Result<std::unique_ptr<ConvBackend>> cpu = MakeBackend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ((*cpu)->fingerprint().backend, "cpu");
}

TEST(BackendFactoryTest, UnknownNamesAndBadIndicesAreInvalidArguments) {
  Result<std::unique_ptr<ConvBackend>> unknown = MakeBackend("tpu");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("tpu"), std::string::npos);
  if (BuildHasCudnn()) {
    EXPECT_EQ(MakeBackend("cudnn", -1).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BackendFactoryTest, CudnnWithoutGpuIsUnavailableWithAReason) {
  if (GpuCount() > 0) GTEST_SKIP() << "a GPU is visible; this checks the no-GPU answer";
  Result<std::unique_ptr<ConvBackend>> gpu = MakeBackend("cudnn", 0);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(gpu.status().message().empty());
  std::printf("  %s\n", gpu.status().ToString().c_str());
}

TEST(BackendFactoryTest, NonexistentGpuIsUnavailable) {
  if (!BuildHasCudnn()) GTEST_SKIP() << "build without cuDNN";
  EXPECT_EQ(MakeBackend("cudnn", 4096).status().code(), StatusCode::kUnavailable);
}

class GpuFingerprintTest : public GpuTest {};

TEST_F(GpuFingerprintTest, IsSaneAndUsesRunTimeVersions) {
  const DeviceFingerprint& f = gpu()->fingerprint();
  EXPECT_TRUE(Validate(f).ok()) << Validate(f).ToString();
  EXPECT_EQ(f.backend, "cudnn");
  EXPECT_FALSE(f.name.empty());
  EXPECT_GE(f.cc_major, 5);
  EXPECT_GT(f.sm_count, 0);
  EXPECT_GT(f.memory_bytes, uint64_t{1} << 30);
  EXPECT_GE(f.cudnn_version, 90000);         // cuDNN 9 at run time
  EXPECT_GE(f.cuda_runtime_version, 12000);  // CUDA 12 or newer
  if (f.name.find("H100") != std::string::npos) {
    EXPECT_EQ(f.cc_major, 9);
    EXPECT_EQ(f.cc_minor, 0);
  }
  std::printf("  fingerprint: %s\n", f.Key().c_str());
  RecordProperty("fingerprint", f.Key());
}

TEST_F(GpuFingerprintTest, InvalidAlgorithmIsAnInvalidArgument) {
  ConvProblem p = MakeConv(8, 8, 8, 3, 1, 1);
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    p.op = op;
    const int count = static_cast<int>(gpu()->Algorithms(op).size());
    EXPECT_EQ(gpu()->WorkspaceSize(p, 1, count).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(gpu()->WorkspaceSize(p, 1, -1).status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ucudnn::gputest
