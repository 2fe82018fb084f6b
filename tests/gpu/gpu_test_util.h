// Shared by the GPU tests: the skip-without-GPU fixtures, real layer shapes, and host-side
// operand handling (random data, layout and precision conversion, running one algorithm).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/core/backend.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn {
// gtest prints parameters through PrintTo found by argument-dependent lookup.
inline void PrintTo(ConvOp op, std::ostream* os) { *os << ToString(op); }
}  // namespace ucudnn

namespace ucudnn::gputest {

// Why GPU tests cannot run here, or "" when a GPU is visible.
std::string NoGpuReason();

// Base of every GPU test: skips visibly (GTEST_SKIP with the reason) where GpuCount() == 0,
// otherwise provides gpu(), a cuDNN backend on GPU 0 shared by the whole test program.
template <typename Base>
class GpuFixture : public Base {
 protected:
  void SetUp() override {
    const std::string reason = NoGpuReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    ASSERT_NE(gpu(), nullptr) << "GpuCount() > 0 but the cuDNN backend could not be made";
  }
  static ConvBackend* gpu();
};
using GpuTest = GpuFixture<::testing::Test>;
template <typename Param>
using GpuTestWithParam = GpuFixture<::testing::TestWithParam<Param>>;

// The process-wide cuDNN backend on GPU 0 (nullptr where none can be made; the failure is
// printed once).
ConvBackend* SharedGpuBackend();
template <typename Base>
ConvBackend* GpuFixture<Base>::gpu() {
  return SharedGpuBackend();
}

// The CPU backend used as the numerical reference (OpenBLAS with all cores).
ConvBackend& ReferenceCpuBackend();

// A real convolution layer at a small batch.
struct Layer {
  std::string name;
  ConvProblem problem;  // forward, fp32, NCHW, default math; tests change op/type/layout
  int64_t batch = 0;
};
std::vector<Layer> TestLayers();
// Readable test names in ctest and gtest output.
inline void PrintTo(const Layer& layer, std::ostream* os) { *os << layer.name; }
ConvProblem MakeConv(int64_t c, int64_t hw, int64_t k, int64_t rs, int64_t pad, int64_t stride,
                     int64_t groups = 1, int64_t dilation = 1);
// A 3-D convolution: depth d, filter depth t, depth padding and stride, the rest as MakeConv.
ConvProblem MakeConv3d(int64_t c, int64_t d, int64_t hw, int64_t k, int64_t t, int64_t rs,
                       int64_t pad_d, int64_t pad, int64_t stride_d, int64_t stride);

// Host operands in fp32, NCHW activations and KCRS filter, all three tensors of the shape.
// Values are exactly representable in fp16, so fp32 and fp16 runs see the same inputs.
struct HostTensors {
  std::vector<float> x;  // n x c x h x w           (x or dx)
  std::vector<float> y;  // n x k x out_h x out_w   (y or dy)
  std::vector<float> w;  // k x c/g x r x s         (w or dw)
};
HostTensors RandomTensors(const ConvProblem& p, int64_t batch, uint64_t seed);
// The tensor the op writes (y, dx or dw) within `t`.
std::vector<float>& Written(HostTensors& t, ConvOp op);

// Runs `algo` on `backend` for `p` (any data type and layout): converts the operands from fp32
// NCHW, allocates exactly the workspace the backend asks for, runs with alpha and beta, and
// returns the written tensor converted back to fp32 NCHW. The written tensor starts as
// `initial` (when beta != 0) or NaN everywhere, so an element the backend skips shows up.
Result<std::vector<float>> RunAlgorithm(ConvBackend& backend, const ConvProblem& p, int64_t batch,
                                        const Algorithm& algo, const HostTensors& host,
                                        float alpha = 1.0f, float beta = 0.0f);

// || a - ref ||_2 / || ref ||_2 in double; infinity on size mismatch, NaN if a has NaN.
double RelativeL2(const std::vector<float>& a, const std::vector<float>& ref);

// The CPU reference of the op (fp32 NCHW) on `host`.
Result<std::vector<float>> CpuReference(const ConvProblem& p, int64_t batch,
                                        const HostTensors& host);

std::string Describe(const ConvProblem& p, int64_t batch);

}  // namespace ucudnn::gputest
