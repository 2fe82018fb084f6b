#include "ucudnn/backends/cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/conv_reference.h"
#include "support/operands.h"
#include "support/problems.h"
#include "ucudnn/core/random_fill.h"

// OpenBLAS's thread count, declared here like fingerprint.cc does (no cblas.h variant needed).
extern "C" int openblas_get_num_threads();

namespace ucudnn {
namespace {

using test_support::RandomVector;
using testing::RandomSmallProblem;
using testing::ReferenceConv;
using testing::RelativeL2;
using testing::SizesOf;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kGuard = 12345.0f;  // written past the end of outputs to catch overruns
constexpr size_t kGuardElements = 64;

ConvProblem ResNetLikeProblem(ConvOp op) { return test_support::SquareConv(op, 8, 9, 12); }

struct AlphaBeta {
  float alpha, beta;
};
constexpr AlphaBeta kAlphaBetas[] = {
    {1.0f, 0.0f}, {0.5f, 0.0f}, {1.0f, 1.0f}, {-1.5f, 0.25f}, {2.0f, -1.0f}};

// One Run of `algo` on `p` against the float64 reference; the output starts as NaN when beta = 0
// (every element must be written, and not read) and as random data otherwise.
void CheckAgainstReference(CpuBackend& backend, const ConvProblem& p, int64_t batch, int algo,
                           AlphaBeta ab, uint64_t seed) {
  SCOPED_TRACE(CanonicalKey(p) + " batch=" + std::to_string(batch) +
               " algo=" + std::to_string(algo) + " alpha=" + std::to_string(ab.alpha) +
               " beta=" + std::to_string(ab.beta));
  const test_support::OpTensorSizes sizes = test_support::OpSizes(p, batch);
  const std::vector<float> a = RandomVector(sizes.first_input, seed);
  const std::vector<float> b = RandomVector(sizes.second_input, seed + 1);
  const size_t out_count = sizes.output;
  std::vector<float> initial =
      ab.beta == 0.0f ? std::vector<float>(out_count, kNaN) : RandomVector(out_count, seed + 2);
  std::vector<float> out = initial;
  out.resize(out_count + kGuardElements, kGuard);
  const ConvOperands ops = test_support::BindOperands(p.op, a.data(), b.data(), out.data());

  Result<size_t> ws_bytes = backend.WorkspaceSize(p, batch, algo);
  ASSERT_TRUE(ws_bytes.ok()) << ws_bytes.status().ToString();
  // Stale NaNs in the workspace must not leak into the result.
  std::vector<float> workspace(*ws_bytes / sizeof(float) + 1, kNaN);
  Status st = backend.Run(p, batch, algo, ops, workspace.data(), *ws_bytes, ab.alpha, ab.beta);
  ASSERT_TRUE(st.ok()) << st.ToString();

  for (size_t i = out_count; i < out.size(); ++i) ASSERT_EQ(out[i], kGuard) << "overrun at " << i;
  out.resize(out_count);
  std::vector<double> want = ReferenceConv(p, batch, a, b);
  for (size_t i = 0; i < out_count; ++i) {
    want[i] *= ab.alpha;
    if (ab.beta != 0.0f) want[i] += double{ab.beta} * initial[i];
  }
  EXPECT_LT(RelativeL2(out, want), 1e-5);
}

class CpuBackendReferenceTest : public ::testing::TestWithParam<std::tuple<ConvOp, int>> {};

TEST_P(CpuBackendReferenceTest, MatchesFloat64ReferenceOnRandomProblems) {
  const auto [op, algo] = GetParam();
  CpuBackend backend;
  std::mt19937_64 rng(1000 + static_cast<int>(op) * 10 + algo);
  constexpr int kProblems = 40;
  for (int i = 0; i < kProblems; ++i) {
    const ConvProblem p = RandomSmallProblem(op, rng);
    const int64_t batch = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    const AlphaBeta ab = kAlphaBetas[i % std::size(kAlphaBetas)];
    CheckAgainstReference(backend, p, batch, algo, ab, 77 + i);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST_P(CpuBackendReferenceTest, MatchesFloat64ReferenceOnRandom3dProblems) {
  const auto [op, algo] = GetParam();
  CpuBackend backend;
  std::mt19937_64 rng(3000 + static_cast<int>(op) * 10 + algo);
  constexpr int kProblems = 25;
  for (int i = 0; i < kProblems; ++i) {
    const ConvProblem p = testing::RandomSmall3dProblem(op, rng);
    const int64_t batch = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    const AlphaBeta ab = kAlphaBetas[i % std::size(kAlphaBetas)];
    CheckAgainstReference(backend, p, batch, algo, ab, 177 + i);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST_P(CpuBackendReferenceTest, MatchesReferenceOnAFixedLayer) {
  const auto [op, algo] = GetParam();
  CpuBackend backend;
  ConvProblem p = ResNetLikeProblem(op);
  CheckAgainstReference(backend, p, 3, algo, {1.0f, 0.0f}, 5);
  p.stride_h = p.stride_w = 2;
  p.groups = 4;
  CheckAgainstReference(backend, p, 2, algo, {0.75f, 0.5f}, 6);
}

INSTANTIATE_TEST_SUITE_P(AllOpsAllAlgos, CpuBackendReferenceTest,
                         ::testing::Combine(::testing::Values(ConvOp::kForward,
                                                              ConvOp::kBackwardData,
                                                              ConvOp::kBackwardFilter),
                                            ::testing::Values(kCpuAlgoDirect, kCpuAlgoIm2colGemm,
                                                              kCpuAlgoIm2colGemmPerSample)),
                         [](const auto& info) {
                           return std::string(ToString(std::get<0>(info.param))) + "_algo" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(CpuBackendTest, AlgorithmsAreTheSameForEveryOp) {
  CpuBackend backend;
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    const std::vector<AlgorithmInfo> algos = backend.Algorithms(op);
    ASSERT_EQ(algos.size(), 3u);
    EXPECT_EQ(algos[0].id, kCpuAlgoDirect);
    EXPECT_EQ(algos[0].name, "direct");
    EXPECT_EQ(algos[1].id, kCpuAlgoIm2colGemm);
    EXPECT_EQ(algos[1].name, "im2col_gemm");
    EXPECT_EQ(algos[2].id, kCpuAlgoIm2colGemmPerSample);
    EXPECT_EQ(algos[2].name, "im2col_gemm_per_sample");
  }
}

TEST(CpuBackendTest, FingerprintIsTheCpus) {
  CpuBackend backend;
  EXPECT_EQ(backend.fingerprint().backend, "cpu");
  EXPECT_EQ(backend.fingerprint(), CpuFingerprint());
  EXPECT_EQ(backend.fingerprint(), CpuFingerprint(1));
}

// Timings measured with N BLAS threads are filed under a device of their own, not under the
// 1-thread device that the workers benchmark.
TEST(CpuBackendTest, FingerprintRecordsTheBlasThreadsInEffect) {
  {
    CpuBackend two(CpuBackendOptions{.blas_threads = 2});
    // OpenBLAS caps the request at its build's maximum (1 for a serial build).
    const int threads = openblas_get_num_threads();
    EXPECT_GE(threads, 1);
    EXPECT_LE(threads, 2);
    EXPECT_EQ(two.fingerprint(), CpuFingerprint(threads));
    if (threads == 2) {
      EXPECT_NE(two.fingerprint().Hash(), CpuFingerprint(1).Hash());
    }
    // 0 keeps OpenBLAS's setting, and the fingerprint says what it is.
    CpuBackend keep(CpuBackendOptions{.blas_threads = 0});
    EXPECT_EQ(keep.fingerprint(), CpuFingerprint(threads));
  }
  CpuBackend restored;  // the setting is process-wide: back to 1 for the other tests
  EXPECT_EQ(openblas_get_num_threads(), 1);
  EXPECT_EQ(restored.fingerprint(), CpuFingerprint(1));
}

TEST(CpuBackendTest, WorkspaceGrowsWithBatchOnlyForWholeBatchIm2col) {
  CpuBackend backend;
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    const ConvProblem p = ResNetLikeProblem(op);
    const size_t per_sample_gemm = static_cast<size_t>(
        (p.c * p.r * p.s + p.k) * p.out_h() * p.out_w() * static_cast<int64_t>(sizeof(float)));
    size_t previous = 0;
    for (int64_t batch : {1, 2, 3, 8, 64, 256}) {
      Result<size_t> direct = backend.WorkspaceSize(p, batch, kCpuAlgoDirect);
      Result<size_t> whole = backend.WorkspaceSize(p, batch, kCpuAlgoIm2colGemm);
      Result<size_t> one = backend.WorkspaceSize(p, batch, kCpuAlgoIm2colGemmPerSample);
      ASSERT_TRUE(direct.ok() && whole.ok() && one.ok());
      EXPECT_EQ(*direct, 0u);
      EXPECT_EQ(*whole, per_sample_gemm * batch);  // linear in the batch
      EXPECT_GT(*whole, previous);
      previous = *whole;
      EXPECT_EQ(*one, static_cast<size_t>(p.c * p.r * p.s * p.out_h() * p.out_w() * 4));
    }
  }
}

TEST(CpuBackendTest, UnsupportedComputeTypes) {
  CpuBackend backend;
  std::vector<float> buf(4096, 1.0f);
  ConvOperands ops{buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data()};
  auto expect_unsupported = [&](const ConvProblem& p, const std::string& field) {
    for (int algo = 0; algo < kCpuAlgoCount; ++algo) {
      Result<size_t> ws = backend.WorkspaceSize(p, 1, algo);
      ASSERT_FALSE(ws.ok());
      EXPECT_EQ(ws.status().code(), StatusCode::kUnsupported) << ws.status().ToString();
      EXPECT_NE(ws.status().message().find(field), std::string::npos) << ws.status().ToString();
      Status st = backend.Run(p, 1, algo, ops, buf.data(), 0, 1.0f, 0.0f);
      EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.ToString();
    }
  };
  ConvProblem p = ResNetLikeProblem(ConvOp::kBackwardFilter);
  p.compute_type = DataType::kFloat16;
  expect_unsupported(p, "compute_type");
  p.data_type = DataType::kFloat16;
  p.layout = Layout::kNHWC;
  expect_unsupported(p, "compute_type");

  // Math modes are accepted and computed in fp32.
  p = ResNetLikeProblem(ConvOp::kForward);
  p.math = MathMode::kTensorOp;
  EXPECT_TRUE(backend.WorkspaceSize(p, 1, kCpuAlgoIm2colGemm).ok());
}

// fp16 and bf16, NCHW and NHWC: the same convolution as fp32 NCHW on the same values (inputs
// exactly representable in the narrow type), up to the rounding of the narrow output; with beta
// reading the narrow output it had.
TEST(CpuBackendTest, HalfPrecisionAndChannelsLastMatchFp32Nchw) {
  CpuBackend backend;
  const int64_t batch = 2;
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
      for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
        ConvProblem p;
        p.op = op;
        p.c = 6;
        p.h = 7;
        p.w = 5;
        p.k = 4;
        p.r = 3;
        p.s = 2;
        p.pad_h = 1;
        p.stride_w = 2;
        p.groups = 2;
        p.data_type = type;
        p.layout = layout;
        p.math = MathMode::kTensorOp;
        ASSERT_TRUE(Validate(p).ok());
        // NCHW index <-> memory index of `layout`, per tensor.
        auto offset = [&](int64_t n, int64_t c, int64_t h, int64_t w, int64_t C, int64_t H,
                          int64_t W) {
          return static_cast<size_t>(layout == Layout::kNHWC ? ((n * H + h) * W + w) * C + c
                                                             : ((n * C + c) * H + h) * W + w);
        };
        struct Tensor {
          int64_t n, c, h, w;
        };
        const Tensor xt{batch, p.c, p.h, p.w}, yt{batch, p.k, p.out_h(), p.out_w()},
            wt{p.k, p.c / p.groups, p.r, p.s};
        // fp32 NCHW values that the narrow type holds exactly, and the narrow tensor in `layout`.
        auto make = [&](const Tensor& t, uint64_t seed, std::vector<float>* nchw,
                        std::vector<uint16_t>* narrow) {
          const size_t count = static_cast<size_t>(t.n * t.c * t.h * t.w);
          std::vector<uint16_t> bits(count);
          GenerateRandom(bits.data(), count, type, seed);
          *nchw = ToFloat(bits.data(), count, type);
          narrow->assign(count, 0);
          size_t i = 0;
          for (int64_t n = 0; n < t.n; ++n)
            for (int64_t c = 0; c < t.c; ++c)
              for (int64_t h = 0; h < t.h; ++h)
                for (int64_t w = 0; w < t.w; ++w)
                  (*narrow)[offset(n, c, h, w, t.c, t.h, t.w)] = bits[i++];
        };
        const Tensor& a_t = op == ConvOp::kBackwardData ? yt : xt;
        const Tensor& b_t = op == ConvOp::kBackwardFilter ? yt : wt;
        const Tensor& out_t = op == ConvOp::kForward ? yt : op == ConvOp::kBackwardData ? xt : wt;
        std::vector<float> a32, b32, out32;
        std::vector<uint16_t> a16, b16, out16;
        make(a_t, 1, &a32, &a16);
        make(b_t, 2, &b32, &b16);
        make(out_t, 3, &out32, &out16);  // the output's prior contents, for beta
        const float alpha = 1.5f, beta = 0.5f;

        ConvProblem reference = p;
        reference.data_type = DataType::kFloat32;
        reference.layout = Layout::kNCHW;
        auto operands = [&](const void* a, const void* b, void* out) {
          ConvOperands o;
          if (op == ConvOp::kForward) o = {a, b, nullptr, out, nullptr, nullptr};
          if (op == ConvOp::kBackwardData) o = {nullptr, b, a, nullptr, out, nullptr};
          if (op == ConvOp::kBackwardFilter) o = {a, nullptr, b, nullptr, nullptr, out};
          return o;
        };
        for (int algo = 0; algo < kCpuAlgoCount; ++algo) {
          Result<size_t> ws = backend.WorkspaceSize(p, batch, algo);
          ASSERT_TRUE(ws.ok()) << ws.status().ToString();
          std::vector<unsigned char> workspace(std::max<size_t>(*ws, 1));
          std::vector<float> expected = out32;
          ASSERT_TRUE(backend
                          .Run(reference, batch, algo,
                               operands(a32.data(), b32.data(), expected.data()), workspace.data(),
                               *ws, alpha, beta)
                          .ok());
          std::vector<uint16_t> got = out16;
          Status st = backend.Run(p, batch, algo, operands(a16.data(), b16.data(), got.data()),
                                  workspace.data(), *ws, alpha, beta);
          ASSERT_TRUE(st.ok()) << st.ToString();
          size_t i = 0, nonzero = 0;
          for (int64_t n = 0; n < out_t.n; ++n)
            for (int64_t c = 0; c < out_t.c; ++c)
              for (int64_t h = 0; h < out_t.h; ++h)
                for (int64_t w = 0; w < out_t.w; ++w, ++i) {
                  const uint16_t bits = got[offset(n, c, h, w, out_t.c, out_t.h, out_t.w)];
                  const float value = ToFloat(&bits, 1, type)[0];
                  // One rounding to the narrow type: 2^-8 relative for bf16, 2^-11 for fp16.
                  const float tolerance = (type == DataType::kBFloat16 ? 1.0f / 256 : 1.0f / 2048) *
                                              std::fabs(expected[i]) +
                                          1e-6f;
                  ASSERT_NEAR(value, expected[i], tolerance)
                      << ToString(type) << " " << ToString(layout) << " " << ToString(op)
                      << " algo " << algo << " element " << i;
                  nonzero += value != 0.0f;
                }
          EXPECT_GT(nonzero, i / 2);  // a real result, not zeros
        }
      }
    }
  }
}

TEST(CpuBackendTest, HugeProblemsAreUnsupportedNotOverflowed) {
  CpuBackend backend;
  ConvProblem p;
  p.c = 1 << 16;
  p.k = 1;
  p.h = p.w = 1 << 10;
  p.r = p.s = 1 << 10;
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  Result<size_t> whole = backend.WorkspaceSize(p, 1 << 16, kCpuAlgoIm2colGemm);
  EXPECT_EQ(whole.status().code(), StatusCode::kUnsupported) << whole.status().ToString();
  Result<size_t> direct = backend.WorkspaceSize(p, 1 << 16, kCpuAlgoDirect);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(*direct, 0u);
}

TEST(CpuBackendTest, RejectsInvalidInput) {
  CpuBackend backend;
  const ConvProblem p = ResNetLikeProblem(ConvOp::kForward);
  std::vector<float> x(SizesOf(p, 1).x, 1.0f), w(SizesOf(p, 1).w, 1.0f);
  std::vector<float> y(SizesOf(p, 1).y, 7.0f);
  ConvOperands ops;
  ops.x = x.data();
  ops.w = w.data();
  ops.y = y.data();

  EXPECT_EQ(backend.WorkspaceSize(p, 1, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.WorkspaceSize(p, 1, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.WorkspaceSize(p, 0, 0).status().code(), StatusCode::kInvalidArgument);
  ConvProblem bad = p;
  bad.groups = 3;
  Result<size_t> bad_ws = backend.WorkspaceSize(bad, 1, 0);
  EXPECT_EQ(bad_ws.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_ws.status().message().find("groups"), std::string::npos);

  const size_t needed = *backend.WorkspaceSize(p, 1, kCpuAlgoIm2colGemm);
  std::vector<char> workspace(needed);
  Status st = backend.Run(p, 1, kCpuAlgoIm2colGemm, ops, workspace.data(), needed - 1, 1, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("workspace_bytes"), std::string::npos) << st.ToString();
  st = backend.Run(p, 1, kCpuAlgoIm2colGemm, ops, nullptr, needed, 1, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  ConvOperands no_w = ops;
  no_w.w = nullptr;
  st = backend.Run(p, 1, kCpuAlgoDirect, no_w, nullptr, 0, 1, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("operands.w"), std::string::npos) << st.ToString();
  for (float v : y) ASSERT_EQ(v, 7.0f);  // nothing ran

  // Direct needs no workspace at all.
  EXPECT_TRUE(backend.Run(p, 1, kCpuAlgoDirect, ops, nullptr, 0, 1, 0).ok());
}

TEST(CpuBackendTest, AllocateAndCopy) {
  CpuBackend backend;
  Result<std::unique_ptr<BackendBuffer>> empty = backend.Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);
  EXPECT_NE((*empty)->data(), nullptr);

  Result<std::unique_ptr<BackendBuffer>> buf = backend.Allocate(1000);
  ASSERT_TRUE(buf.ok());
  EXPECT_EQ((*buf)->size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*buf)->data()) % 64, 0u);
  std::vector<float> host = RandomVector(250, 3), back(250, 0.0f);
  ASSERT_TRUE(backend.CopyToDevice((*buf)->data(), host.data(), 1000).ok());
  ASSERT_TRUE(backend.CopyToHost(back.data(), (*buf)->data(), 1000).ok());
  EXPECT_EQ(back, host);
  EXPECT_EQ(backend.CopyToHost(nullptr, (*buf)->data(), 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.CopyToDevice((*buf)->data(), nullptr, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend.CopyToDevice(nullptr, nullptr, 0).ok());
  EXPECT_TRUE(backend.Synchronize().ok());
}

TEST(CpuBackendTest, TimeRunsReturnsOneTimePerRunAndComputes) {
  CpuBackend backend;
  const ConvProblem p = ResNetLikeProblem(ConvOp::kForward);
  const testing::TensorSizes sizes = SizesOf(p, 2);
  std::vector<float> x = RandomVector(sizes.x, 1), w = RandomVector(sizes.w, 2);
  std::vector<float> y(sizes.y, kNaN);
  ConvOperands ops;
  ops.x = x.data();
  ops.w = w.data();
  ops.y = y.data();
  const size_t ws = *backend.WorkspaceSize(p, 2, kCpuAlgoIm2colGemm);
  std::vector<char> workspace(ws);
  Result<std::vector<double>> times =
      backend.TimeRuns(p, 2, kCpuAlgoIm2colGemm, ops, workspace.data(), ws, 1, 5);
  ASSERT_TRUE(times.ok()) << times.status().ToString();
  ASSERT_EQ(times->size(), 5u);
  for (double t : *times) EXPECT_GT(t, 0.0);
  EXPECT_LT(RelativeL2(y, ReferenceConv(p, 2, x, w)), 1e-5);

  // Operands of 6 samples: the runs of 2 walk the three slices, as micro-batches do in a step,
  // so every slice of the output is computed (one warm-up and two timed runs).
  const testing::TensorSizes six = SizesOf(p, 6);
  std::vector<float> x6 = RandomVector(six.x, 3);
  std::vector<float> y6(six.y, kNaN);
  ConvOperands walked = ops;
  walked.x = x6.data();
  walked.y = y6.data();
  walked.samples = 6;
  ASSERT_TRUE(backend.TimeRuns(p, 2, kCpuAlgoIm2colGemm, walked, workspace.data(), ws, 1, 2).ok());
  EXPECT_LT(RelativeL2(y6, ReferenceConv(p, 6, x6, w)), 1e-5);

  EXPECT_EQ(backend.TimeRuns(p, 2, 0, ops, nullptr, 0, 0, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.TimeRuns(p, 2, 0, ops, nullptr, 0, -1, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.TimeRuns(p, 2, kCpuAlgoIm2colGemm, ops, nullptr, 0, 0, 1).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ucudnn
