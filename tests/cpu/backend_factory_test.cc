#include "ucudnn/backends/backend_factory.h"

#include <gtest/gtest.h>

namespace ucudnn {
namespace {

TEST(BackendFactoryTest, CpuAlwaysWorks) {
  Result<std::unique_ptr<ConvBackend>> cpu = MakeBackend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ((*cpu)->fingerprint().backend, "cpu");
  EXPECT_EQ((*cpu)->Algorithms(ConvOp::kForward).size(), 3u);
}

TEST(BackendFactoryTest, UnknownNameIsInvalid) {
  Result<std::unique_ptr<ConvBackend>> r = MakeBackend("tpu");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tpu"), std::string::npos);
}

TEST(BackendFactoryTest, CudnnIsUnavailableWithoutItOrWithoutAGpu) {
  if (BuildHasCudnn() && GpuCount() > 0) GTEST_SKIP() << "a GPU is present";
  if (!BuildHasCudnn()) {
    EXPECT_EQ(GpuCount(), 0);
  }
  Result<std::unique_ptr<ConvBackend>> r = MakeBackend("cudnn");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

}  // namespace
}  // namespace ucudnn
