// cuDNN-backend specifics (built only with UCUDNN_ENABLE_CUDNN): the error helper and the
// algorithm lists need no GPU; wrapping a caller's handle, the run-time version and the
// descriptor cache do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "support/devices.h"
#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/core/algorithm_names.h"
#include "ucudnn/core/random_fill.h"

namespace ucudnn::gputest {
namespace {

Status FailingCudnnCall() {
  UCUDNN_GPU_CHECK(static_cast<cudnnStatus_t>(CUDNN_STATUS_NOT_SUPPORTED));
  return Status::Ok();
}

TEST(CudaCheckTest, CudnnFailureReadsLikeASentence) {
  const int line = __LINE__ + 1;
  Status s = UCUDNN_GPU_STATUS(static_cast<cudnnStatus_t>(CUDNN_STATUS_NOT_SUPPORTED));
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("static_cast<cudnnStatus_t>(CUDNN_STATUS_NOT_SUPPORTED) failed: "
                             "CUDNN_STATUS_NOT_SUPPORTED"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("at cudnn_backend_test.cc:" + std::to_string(line)), std::string::npos)
      << s.message();
  EXPECT_EQ(FailingCudnnCall().code(), StatusCode::kUnsupported);
  std::printf("  %s\n", s.ToString().c_str());
  EXPECT_TRUE(UCUDNN_GPU_STATUS(CUDNN_STATUS_SUCCESS).ok());
}

TEST(CudaCheckTest, CudaErrorsMapToWhatTheyMean) {
  Status oom = UCUDNN_GPU_STATUS(cudaErrorMemoryAllocation);
  EXPECT_EQ(oom.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(oom.message().find("cudaErrorMemoryAllocation"), std::string::npos) << oom.message();
  EXPECT_EQ(UCUDNN_GPU_STATUS(cudaErrorNoDevice).code(), StatusCode::kUnavailable);
  // Errors after which the context is unusable: the device is lost to this process.
  for (cudaError_t sticky :
       {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorECCUncorrectable, cudaErrorAssert,
        cudaErrorMisalignedAddress, cudaErrorIllegalInstruction, cudaErrorHardwareStackError}) {
    EXPECT_EQ(UCUDNN_GPU_STATUS(sticky).code(), StatusCode::kDeviceLost)
        << cudaGetErrorName(sticky);
    EXPECT_TRUE(gpu::IsStickyError(sticky));
  }
  // Errors of one call, not of the device.
  for (cudaError_t plain :
       {cudaErrorLaunchOutOfResources, cudaErrorInvalidValue, cudaErrorInvalidConfiguration}) {
    EXPECT_EQ(UCUDNN_GPU_STATUS(plain).code(), StatusCode::kInternal) << cudaGetErrorName(plain);
    EXPECT_FALSE(gpu::IsStickyError(plain));
  }
  EXPECT_EQ(UCUDNN_GPU_STATUS(static_cast<cudnnStatus_t>(CUDNN_STATUS_EXECUTION_FAILED)).code(),
            StatusCode::kInternal);
  EXPECT_TRUE(UCUDNN_GPU_STATUS(cudaSuccess).ok());
}

// What "cuDNN declines this configuration" is: the NOT_SUPPORTED family (shape, data type, layout,
// padding, architecture, shared memory, launch parameters). A BAD_PARAM is never a decline
// (inconsistent descriptors: our bug), so it is not relabelled unsupported anywhere.
TEST(CudaCheckTest, OnlyNotSupportedStatusesAreDeclines) {
  for (cudnnStatus_t decline :
       {CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_NOT_SUPPORTED_SHAPE,
        CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, CUDNN_STATUS_NOT_SUPPORTED_LAYOUT,
        CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH, CUDNN_STATUS_NOT_SUPPORTED_PADDING,
        CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT}) {
    EXPECT_EQ(UCUDNN_GPU_STATUS(decline).code(), StatusCode::kUnsupported)
        << cudnnGetErrorString(decline);
  }
  for (cudnnStatus_t bug : {CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                            CUDNN_STATUS_BAD_PARAM_NULL_POINTER, CUDNN_STATUS_INTERNAL_ERROR}) {
    EXPECT_EQ(UCUDNN_GPU_STATUS(bug).code(), StatusCode::kInternal) << cudnnGetErrorString(bug);
  }
  // The installation, not the configuration.
  EXPECT_EQ(UCUDNN_GPU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE).code(),
            StatusCode::kUnavailable);
}

TEST(CudaCheckTest, LongCallsAreShortened) {
  EXPECT_EQ(gpu::CallText("cudnnGetConvolutionForwardWorkspaceSize(handle_, d->x, d->w, d->conv, "
                          "d->y,\n    algo, &bytes)"),
            "cudnnGetConvolutionForwardWorkspaceSize(...)");
  EXPECT_EQ(gpu::CallText("cudaFree(  data_ )"), "cudaFree( data_ )");
}

TEST(CudnnAlgorithmsTest, AllLegacyAlgorithmsAreListed) {
  EXPECT_EQ(CudnnAlgorithms(ConvOp::kForward).size(), 8u);
  EXPECT_EQ(CudnnAlgorithms(ConvOp::kBackwardData).size(), 6u);
  EXPECT_EQ(CudnnAlgorithms(ConvOp::kBackwardFilter).size(), 7u);
  EXPECT_EQ(CudnnAlgorithms(ConvOp::kForward)[CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED].name,
            "WINOGRAD_NONFUSED");
  EXPECT_EQ(
      CudnnAlgorithms(ConvOp::kBackwardFilter)[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING].name,
      "FFT_TILING");
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    const auto algos = CudnnAlgorithms(op);
    for (size_t i = 0; i < algos.size(); ++i) EXPECT_EQ(algos[i].id, static_cast<int>(i));
  }
}

TEST(DistinctFingerprintsTest, OnePerGpuModel) {
  const DeviceFingerprint h100 = test_support::H100();
  DeviceFingerprint a100 = h100;
  a100.name = "NVIDIA A100-SXM4-80GB";
  a100.cc_major = 8;
  a100.sm_count = 108;
  const std::vector<DeviceFingerprint> distinct =
      DistinctFingerprints({{0, h100}, {1, a100}, {2, h100}, {3, a100}});
  ASSERT_EQ(distinct.size(), 2u);
  EXPECT_EQ(distinct[0], h100);
  EXPECT_EQ(distinct[1], a100);
  EXPECT_TRUE(DistinctFingerprints({}).empty());
}

class CudnnBackendTest : public GpuTest {
 protected:
  // Forward operands of `batch` samples on the GPU: random input and filter, unset output.
  struct ForwardOperands {
    std::unique_ptr<BackendBuffer> x, w, y;
    ConvOperands ops;
  };
  static ForwardOperands MakeForwardOperands(ConvBackend& b, const ConvProblem& p, int64_t batch) {
    ForwardOperands f;
    auto x = b.Allocate(batch * p.input_elements_per_sample() * 4);
    auto w = b.Allocate(p.filter_elements() * 4);
    auto y = b.Allocate(batch * p.output_elements_per_sample() * 4);
    EXPECT_TRUE(x.ok() && w.ok() && y.ok());
    if (!x.ok() || !w.ok() || !y.ok()) return f;
    f.x = std::move(*x);
    f.w = std::move(*w);
    f.y = std::move(*y);
    EXPECT_TRUE(
        FillRandom(b, f.x->data(), batch * p.input_elements_per_sample(), p.data_type, 1).ok());
    EXPECT_TRUE(FillRandom(b, f.w->data(), p.filter_elements(), p.data_type, 2).ok());
    f.ops = ConvOperands{.x = f.x->data(), .w = f.w->data(), .y = f.y->data()};
    return f;
  }
};

TEST_F(CudnnBackendTest, FingerprintHasTheLoadedLibraryVersions) {
  Result<DeviceFingerprint> f = GpuFingerprint(0);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->cudnn_version, static_cast<int>(cudnnGetVersion()));
  int runtime = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&runtime), cudaSuccess);
  EXPECT_EQ(f->cuda_runtime_version, runtime);
  std::printf("  cuDNN at run time %d (headers %d), CUDA runtime %d\n", f->cudnn_version,
              CUDNN_VERSION, runtime);
  Result<std::vector<GpuDevice>> gpus = ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(static_cast<int>(gpus->size()), GpuCount());
  EXPECT_GE(DistinctFingerprints(*gpus).size(), 1u);
  EXPECT_EQ(GpuFingerprint(GpuCount()).status().code(), StatusCode::kUnavailable);
}

TEST_F(CudnnBackendTest, WrapsACallersHandleWithoutTakingIt) {
  cudnnHandle_t handle = nullptr;
  ASSERT_EQ(cudnnCreate(&handle), CUDNN_STATUS_SUCCESS);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudnnSetStream(handle, stream), CUDNN_STATUS_SUCCESS);
  {
    Result<std::unique_ptr<CudnnBackend>> wrapped = CudnnBackend::Wrap(handle);
    ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
    CudnnBackend& b = **wrapped;
    EXPECT_FALSE(b.owns_handle());
    EXPECT_EQ(b.handle(), handle);
    EXPECT_EQ(b.stream(), stream);
    ConvProblem p = MakeConv(16, 12, 24, 3, 1, 1);
    const int64_t batch = 2;
    HostTensors host = RandomTensors(p, batch, 5);
    Result<std::vector<float>> ref = CpuReference(p, batch, host);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    Result<std::vector<float>> out =
        RunAlgorithm(b, p, batch, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, host);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_LT(RelativeL2(*out, *ref), 3e-3);
  }
  // The handle outlives the backend and still works.
  EXPECT_EQ(cudnnDestroy(handle), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(CudnnBackend::Wrap(nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CudnnBackendTest, DescriptorsAreCachedPerShapeAndBatch) {
  Result<std::unique_ptr<CudnnBackend>> made = CudnnBackend::Create(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  CudnnBackend& b = **made;
  EXPECT_TRUE(b.owns_handle());
  EXPECT_NE(b.stream(), nullptr);
  ConvProblem p = MakeConv(32, 16, 32, 3, 1, 1);
  ASSERT_TRUE(b.WorkspaceSize(p, 4, 0).ok());
  ASSERT_TRUE(b.WorkspaceSize(p, 4, 1).ok());
  EXPECT_EQ(b.cached_descriptor_sets(), 1u);
  p.op = ConvOp::kBackwardFilter;  // same convolution, same descriptors
  ASSERT_TRUE(b.WorkspaceSize(p, 4, 0).ok());
  EXPECT_EQ(b.cached_descriptor_sets(), 1u);
  ASSERT_TRUE(b.WorkspaceSize(p, 8, 0).ok());
  EXPECT_EQ(b.cached_descriptor_sets(), 2u);
}

TEST_F(CudnnBackendTest, ProblemsTheLegacyApiCannotExpressAreUnsupported) {
  ConvProblem p = MakeConv(16, 12, 16, 3, 1, 1);
  p.data_type = DataType::kBFloat16;
  p.compute_type = DataType::kBFloat16;
  p.layout = Layout::kNHWC;
  Result<size_t> ws = gpu()->WorkspaceSize(p, 2, 0);
  EXPECT_EQ(ws.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(ws.status().message().find("compute_type"), std::string::npos);
}

// Timed runs alone, and a batch of them queued together and waited for once: each request gets
// its own times, a request that cannot run (an algorithm cuDNN does not have) its own error, and
// the ones around it their times, as one call each would give.
TEST_F(CudnnBackendTest, TimedRunsGiveOnePositiveTimePerRunAloneAndInABatch) {
  ConvProblem p = MakeConv(64, 28, 64, 3, 1, 1);
  const int64_t batch = 4;
  ConvBackend& b = *gpu();
  const ForwardOperands operands = MakeForwardOperands(b, p, batch);
  ASSERT_FALSE(HasFailure());
  const ConvOperands& ops = operands.ops;
  const int algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  Result<std::vector<double>> single = b.TimeRuns(p, batch, algo, ops, nullptr, 0, 1, 4);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  ASSERT_EQ(single->size(), 4u);
  for (double t : *single) EXPECT_GT(t, 0.0);
  EXPECT_EQ(b.TimeRuns(p, batch, algo, ops, nullptr, 0, 1, 0).status().code(),
            StatusCode::kInvalidArgument);

  const std::vector<ConvBackend::TimedRunRequest> requests = {
      {algo, nullptr, 0, 1, 3, 1}, {99, nullptr, 0, 1, 1, 1}, {algo, nullptr, 0, 0, 2, 4}};
  std::vector<Result<std::vector<double>>> times = b.TimeRunBatch(p, batch, ops, requests);
  ASSERT_EQ(times.size(), 3u);
  ASSERT_TRUE(times[0].ok()) << times[0].status().ToString();
  EXPECT_EQ(times[0]->size(), 3u);
  EXPECT_FALSE(times[1].ok());
  ASSERT_TRUE(times[2].ok()) << times[2].status().ToString();
  EXPECT_EQ(times[2]->size(), 2u);
  for (const size_t i : {0u, 2u}) {
    for (double t : *times[i]) EXPECT_GT(t, 0.0) << "request " << i;
  }
  // The same run timed alone and in a batch: the same order of magnitude (a batch's run does not
  // include the others').
  EXPECT_LT(*std::min_element(times[0]->begin(), times[0]->end()),
            3 * *std::min_element(single->begin(), single->end()));
  EXPECT_TRUE(b.Healthy().ok());
}

// Operands of 4 samples timed at a micro-batch of 1: the runs walk the four slices, as a
// segment's micro-batches do, so every slice of the output is written, plain and grouped.
TEST_F(CudnnBackendTest, TimedRunsWalkTheOperandsSlices) {
  ConvProblem p = MakeConv(16, 14, 16, 3, 1, 1);
  ConvBackend& b = *gpu();
  ForwardOperands operands = MakeForwardOperands(b, p, 4);
  ASSERT_FALSE(HasFailure());
  ConvOperands ops = operands.ops;
  ops.samples = 4;
  const size_t y_floats = 4 * static_cast<size_t>(p.output_elements_per_sample());
  const int algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  for (const int group : {1, 2}) {
    std::vector<float> y(y_floats, 0.0f);
    ASSERT_EQ(cudaMemset(ops.y, 0xff, y_floats * sizeof(float)), cudaSuccess);  // NaNs
    Result<std::vector<double>> times = b.TimeRunGroups(p, 1, algo, ops, nullptr, 0, 0, 2, group);
    ASSERT_TRUE(times.ok()) << times.status().ToString();
    ASSERT_TRUE(b.CopyToHost(y.data(), ops.y, y_floats * sizeof(float)).ok());
    // Two samples of `group` runs: the first 2 * group slices are written.
    const size_t slice = y_floats / 4;
    for (size_t i = 0; i < y_floats; ++i) {
      EXPECT_EQ(std::isnan(y[i]), i >= 2 * group * slice) << "group " << group << " at " << i;
      if (HasFailure()) break;
    }
  }
}

TEST_F(CudnnBackendTest, ASoundDeviceIsHealthy) {
  EXPECT_TRUE(gpu()->Healthy().ok()) << gpu()->Healthy().ToString();
  // A caller's handle: its stream only.
  cudnnHandle_t handle = nullptr;
  ASSERT_EQ(cudnnCreate(&handle), CUDNN_STATUS_SUCCESS);
  {
    Result<std::unique_ptr<CudnnBackend>> wrapped = CudnnBackend::Wrap(handle);
    ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
    EXPECT_TRUE((*wrapped)->Healthy().ok());
  }
  EXPECT_EQ(cudnnDestroy(handle), CUDNN_STATUS_SUCCESS);
}

// The worker's result checks on the device (engine/result_check.h): values widened to fp32 as
// the host converts them, the squared norms the host sums, and a poisoned output (all bits set:
// NaN in every type) set in place and read as not finite.
TEST_F(CudnnBackendTest, ResultCheckNumericsAgreeWithTheHost) {
  const size_t count = 300007;
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32}) {
    SCOPED_TRACE(std::string(ToString(type)));
    const size_t bytes = count * ElementSize(type);
    auto got = gpu()->Allocate(bytes);
    auto want = gpu()->Allocate(count * sizeof(float));
    auto widened = gpu()->Allocate(count * sizeof(float));
    ASSERT_TRUE(got.ok() && want.ok() && widened.ok());
    ASSERT_TRUE(FillRandom(*gpu(), (*got)->data(), count, type, 3).ok());
    ASSERT_TRUE(FillRandom(*gpu(), (*want)->data(), count, DataType::kFloat32, 4).ok());
    std::vector<unsigned char> got_bytes(bytes);
    std::vector<float> want_host(count), widened_host(count);
    ASSERT_TRUE(gpu()->CopyToHost(got_bytes.data(), (*got)->data(), bytes).ok());
    ASSERT_TRUE(gpu()->CopyToHost(want_host.data(), (*want)->data(), count * 4).ok());
    const std::vector<float> got_host = ToFloat(got_bytes.data(), count, type);

    ASSERT_TRUE(gpu()->WidenToFloat((*widened)->data(), (*got)->data(), type, count).ok());
    ASSERT_TRUE(gpu()->CopyToHost(widened_host.data(), (*widened)->data(), count * 4).ok());
    EXPECT_EQ(widened_host, got_host);

    double difference = 0, norm = 0;
    for (size_t i = 0; i < count; ++i) {
      const double d = static_cast<double>(got_host[i]) - want_host[i];
      difference += d * d;
      norm += static_cast<double>(want_host[i]) * want_host[i];
    }
    Result<std::pair<double, double>> norms =
        gpu()->DifferenceNorms((*got)->data(), type, (*want)->data(), count);
    ASSERT_TRUE(norms.ok()) << norms.status().ToString();
    EXPECT_NEAR(norms->first, difference, 1e-5 * difference);
    EXPECT_NEAR(norms->second, norm, 1e-5 * norm);

    ASSERT_TRUE(gpu()->FillBytes((*got)->data(), 0xFF, bytes).ok());
    ASSERT_TRUE(gpu()->CopyToHost(got_bytes.data(), (*got)->data(), bytes).ok());
    EXPECT_EQ(std::count(got_bytes.begin(), got_bytes.end(), 0xFF), static_cast<long>(bytes));
    norms = gpu()->DifferenceNorms((*got)->data(), type, (*want)->data(), count);
    ASSERT_TRUE(norms.ok()) << norms.status().ToString();
    EXPECT_FALSE(std::isfinite(norms->first));
  }
}

// A kernel of a few microseconds, timed one run per event pair, includes the host's time to issue
// each cuDNN call (the device waits for it between the events); groups queued behind the stream
// gate run back to back, so their mean per run is the device's time, never more.
TEST_F(CudnnBackendTest, GroupedTimingOfShortRunsLeavesOutHostTime) {
  ConvProblem p = MakeConv(8, 8, 8, 3, 1, 1);
  const int64_t batch = 1;
  ConvBackend& b = *gpu();
  const ForwardOperands operands = MakeForwardOperands(b, p, batch);
  ASSERT_FALSE(HasFailure());
  const ConvOperands& ops = operands.ops;
  const int algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  Result<std::vector<double>> single = b.TimeRunGroups(p, batch, algo, ops, nullptr, 0, 3, 21, 1);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  ASSERT_EQ(single->size(), 21u);
  // Device time only: more samples than one gate holds (64 runs), so several gates in one call.
  Result<std::vector<double>> grouped =
      b.TimeRunGroups(p, batch, algo, ops, nullptr, 0, 1, 21, 16, /*device_time_only=*/true);
  ASSERT_TRUE(grouped.ok()) << grouped.status().ToString();
  ASSERT_EQ(grouped->size(), 21u);
  for (double t : *grouped) EXPECT_GT(t, 0.0);
  // Issued back to back by the host, as a segment's micro-batches are: at the pace of the slower
  // of host and device, so never faster than the device alone (within the clock's noise).
  Result<std::vector<double>> issued = b.TimeRunGroups(p, batch, algo, ops, nullptr, 0, 1, 21, 16);
  ASSERT_TRUE(issued.ok()) << issued.status().ToString();
  ASSERT_EQ(issued->size(), 21u);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double one = median(*single);
  const double per_run = median(*grouped);
  const double in_sequence = median(*issued);
  std::printf(
      "  %s: %.2f us per run timed alone, %.2f us per run in groups of 16 on the device alone, "
      "%.2f us issued back to back\n",
      Describe(p, batch).c_str(), one * 1000.0, per_run * 1000.0, in_sequence * 1000.0);
  EXPECT_LE(per_run, one * 1.10);
  EXPECT_GE(in_sequence, per_run * 0.90);
  EXPECT_EQ(b.TimeRunGroups(p, batch, algo, ops, nullptr, 0, 0, 1, 0).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ucudnn::gputest
