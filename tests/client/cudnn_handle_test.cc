// The drop-in handle on cuDNN (label gpu; skips without a GPU): for every op on real ResNet-50
// layer shapes, the plan's micro-batches give what one undivided cuDNN call with the same
// algorithm gives; the fallback and the pass-through give cuDNN's results; the C API wraps the
// same handle.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "fake_planner.h"
#include "test_util.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/client/handle.h"
#include "ucudnn/client/ucudnn_c.h"

extern "C" cudnnStatus_t ucudnn_test_c_api_roundtrip(cudnnHandle_t cudnn, uint64_t* kernels);

namespace ucudnn::testing {
namespace {

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call
#define CHECK_CUDNN(call) ASSERT_EQ((call), CUDNN_STATUS_SUCCESS) << #call

constexpr int64_t kBatch = 32;

struct Layer {
  const char* name;
  int64_t c, hw, k, rs, pad, stride;
};

// Real ResNet-50 shapes (torchvision): the first layer, a 3x3, a strided 3x3 and a 1x1.
const Layer kLayers[] = {
    {"conv1", 3, 224, 64, 7, 3, 2},
    {"layer1.0.conv2", 64, 56, 64, 3, 1, 1},
    {"layer2.0.conv2", 128, 56, 128, 3, 1, 2},
    {"layer3.0.conv3", 256, 14, 1024, 1, 0, 1},
};

ConvProblem ProblemOf(const Layer& l, ConvOp op) {
  ConvProblem p;
  p.op = op;
  p.c = l.c;
  p.h = p.w = l.hw;
  p.k = l.k;
  p.r = p.s = l.rs;
  p.pad_h = p.pad_w = l.pad;
  p.stride_h = p.stride_w = l.stride;
  return p;
}

// Device buffers and cuDNN descriptors of one convolution at kBatch.
class GpuConv {
 public:
  explicit GpuConv(const ConvProblem& p) : p_(p) {}
  ~GpuConv() {
    for (void* b : {x_, w_, dy_, out_, ws_}) {
      if (b != nullptr) {
        EXPECT_EQ(cudaFree(b), cudaSuccess);
      }
    }
    if (xd_) {
      EXPECT_EQ(cudnnDestroyTensorDescriptor(xd_), CUDNN_STATUS_SUCCESS);
    }
    if (yd_) {
      EXPECT_EQ(cudnnDestroyTensorDescriptor(yd_), CUDNN_STATUS_SUCCESS);
    }
    if (wd_) {
      EXPECT_EQ(cudnnDestroyFilterDescriptor(wd_), CUDNN_STATUS_SUCCESS);
    }
    if (cd_) {
      EXPECT_EQ(cudnnDestroyConvolutionDescriptor(cd_), CUDNN_STATUS_SUCCESS);
    }
  }

  ConvOp op() const { return p_.op; }

  // The kernel as Handle::Prepare takes it.
  Handle::ConvolutionKernel Describe(const char* name) const {
    Handle::ConvolutionKernel k;
    k.op = p_.op == ConvOp::kForward        ? Handle::ConvolutionKernel::Op::kForward
           : p_.op == ConvOp::kBackwardData ? Handle::ConvolutionKernel::Op::kBackwardData
                                            : Handle::ConvolutionKernel::Op::kBackwardFilter;
    k.xDesc = xd_;
    k.wDesc = wd_;
    k.convDesc = cd_;
    k.yDesc = yd_;
    k.workspaceSizeInBytes = workspace_bytes_;
    k.name = name;
    return k;
  }

  void Init(size_t workspace_bytes) {
    const size_t xn = kBatch * p_.input_elements_per_sample();
    const size_t yn = kBatch * p_.output_elements_per_sample();
    const size_t wn = p_.filter_elements();
    out_n_ = p_.op == ConvOp::kForward ? yn : p_.op == ConvOp::kBackwardData ? xn : wn;
    Upload(&x_, RandomVector(xn, 1));
    Upload(&w_, RandomVector(wn, 2));
    Upload(&dy_, RandomVector(yn, 3));
    initial_ = RandomVector(out_n_, 4);
    Upload(&out_, initial_);
    workspace_bytes_ = workspace_bytes;
    CHECK_CUDA(cudaMalloc(&ws_, std::max<size_t>(workspace_bytes, 1)));
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&xd_));
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&yd_));
    CHECK_CUDNN(cudnnCreateFilterDescriptor(&wd_));
    CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&cd_));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(xd_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kBatch, p_.c,
                                           p_.h, p_.w));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(yd_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kBatch, p_.k,
                                           p_.out_h(), p_.out_w()));
    CHECK_CUDNN(cudnnSetFilter4dDescriptor(wd_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p_.k, p_.c,
                                           p_.r, p_.s));
    CHECK_CUDNN(cudnnSetConvolution2dDescriptor(cd_, p_.pad_h, p_.pad_w, p_.stride_h, p_.stride_w,
                                                1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  }

  void ResetOutput() {
    ASSERT_EQ(cudaMemcpy(out_, initial_.data(), out_n_ * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> Output() {
    std::vector<float> host(out_n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), out_, out_n_ * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

  // The op through cuDNN itself.
  cudnnStatus_t Raw(cudnnHandle_t h, int algo, float alpha, float beta) {
    switch (p_.op) {
      case ConvOp::kForward:
        return cudnnConvolutionForward(h, &alpha, xd_, x_, wd_, w_, cd_,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws_,
                                       workspace_bytes_, &beta, yd_, out_);
      case ConvOp::kBackwardData:
        return cudnnConvolutionBackwardData(h, &alpha, wd_, w_, yd_, dy_, cd_,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws_,
                                            workspace_bytes_, &beta, xd_, out_);
      case ConvOp::kBackwardFilter:
        return cudnnConvolutionBackwardFilter(h, &alpha, xd_, x_, yd_, dy_, cd_,
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                              ws_, workspace_bytes_, &beta, wd_, out_);
    }
    return CUDNN_STATUS_BAD_PARAM;
  }

  // Through the drop-in handle, with cuDNN's own function names (the overloads).
  cudnnStatus_t Drop(Handle& h, int algo, float alpha, float beta) {
    switch (p_.op) {
      case ConvOp::kForward:
        return cudnnConvolutionForward(h, &alpha, xd_, x_, wd_, w_, cd_,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws_,
                                       workspace_bytes_, &beta, yd_, out_);
      case ConvOp::kBackwardData:
        return cudnnConvolutionBackwardData(h, &alpha, wd_, w_, yd_, dy_, cd_,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws_,
                                            workspace_bytes_, &beta, xd_, out_);
      case ConvOp::kBackwardFilter:
        return cudnnConvolutionBackwardFilter(h, &alpha, xd_, x_, yd_, dy_, cd_,
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                              ws_, workspace_bytes_, &beta, wd_, out_);
    }
    return CUDNN_STATUS_BAD_PARAM;
  }

  cudnnStatus_t ViaC(ucudnnHandle_t h, int algo, float alpha, float beta) {
    switch (p_.op) {
      case ConvOp::kForward:
        return ucudnnConvolutionForward(h, &alpha, xd_, x_, wd_, w_, cd_,
                                        static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws_,
                                        workspace_bytes_, &beta, yd_, out_);
      case ConvOp::kBackwardData:
        return ucudnnConvolutionBackwardData(h, &alpha, wd_, w_, yd_, dy_, cd_,
                                             static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws_,
                                             workspace_bytes_, &beta, xd_, out_);
      case ConvOp::kBackwardFilter:
        return ucudnnConvolutionBackwardFilter(h, &alpha, xd_, x_, yd_, dy_, cd_,
                                               static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                               ws_, workspace_bytes_, &beta, wd_, out_);
    }
    return CUDNN_STATUS_BAD_PARAM;
  }

  // The workspace query through the handle: declares the kernel.
  cudnnStatus_t Declare(Handle& h, int algo, size_t* bytes) {
    switch (p_.op) {
      case ConvOp::kForward:
        return cudnnGetConvolutionForwardWorkspaceSize(
            h, xd_, wd_, cd_, yd_, static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      case ConvOp::kBackwardData:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, wd_, yd_, cd_, xd_, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      case ConvOp::kBackwardFilter:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, xd_, yd_, cd_, wd_, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
    }
    return CUDNN_STATUS_BAD_PARAM;
  }

 private:
  void Upload(void** dst, const std::vector<float>& host) {
    ASSERT_EQ(cudaMalloc(dst, host.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(*dst, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }

  ConvProblem p_;
  void *x_ = nullptr, *w_ = nullptr, *dy_ = nullptr, *out_ = nullptr, *ws_ = nullptr;
  size_t out_n_ = 0;
  size_t workspace_bytes_ = 0;
  std::vector<float> initial_;
  cudnnTensorDescriptor_t xd_ = nullptr, yd_ = nullptr;
  cudnnFilterDescriptor_t wd_ = nullptr;
  cudnnConvolutionDescriptor_t cd_ = nullptr;
};

class CudnnHandleTest : public ::testing::TestWithParam<std::tuple<int, ConvOp>> {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) GTEST_SKIP() << "no GPU";
    ASSERT_EQ(cudnnCreate(&cudnn_), CUDNN_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (cudnn_ != nullptr) {
      EXPECT_EQ(cudnnDestroy(cudnn_), CUDNN_STATUS_SUCCESS);
    }
  }
  cudnnHandle_t cudnn_ = nullptr;
};

// Algorithm 1 of each op (IMPLICIT_PRECOMP_GEMM, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1) runs every
// shape here and is deterministic (algorithm 0 of the backward ops sums with atomics); the fake
// plans micro-batches of 8 with it.
constexpr int kAlgo = 1;

// Whether cuDNN may run fp32 "default math" on TF32 tensor cores: on compute capability 8.0 and
// newer unless NVIDIA_TF32_OVERRIDE=0. cuDNN picks its kernels per shape, so a micro-batch may
// run on TF32 where the whole batch did not, or the reverse.
bool Tf32Possible() {
  const char* override_env = std::getenv("NVIDIA_TF32_OVERRIDE");
  if (override_env != nullptr && std::string(override_env) == "0") return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return true;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return true;
  }
  return major >= 8;
}

// Micro-batched against undivided, same algorithm. Forward and backward-data compute each sample
// alone, so in full fp32 they agree to rounding (1e-6, the CPU tests' bound). Backward-filter
// sums over N*P*Q terms per output, and splitting the batch reassociates that fp32 sum: about
// sqrt(N*P*Q) ulps apart (1e-5 measured on the H100), bound 1e-4 (tests/gpu's bound for fp32
// GEMM-based algorithms). With TF32 possible, 3e-3 (tests/gpu's TF32 bound).
double PlanBound(ConvOp op) {
  if (Tf32Possible()) return 3e-3;
  return op == ConvOp::kBackwardFilter ? 1e-4 : 1e-6;
}
constexpr size_t kWorkspace = size_t{256} << 20;

TEST_P(CudnnHandleTest, PlanEqualsUndivided) {
  const auto [layer, op] = GetParam();
  const ConvProblem p = ProblemOf(kLayers[layer], op);
  Result<std::unique_ptr<ConvBackend>> planner_backend = MakeBackend("cudnn");
  ASSERT_TRUE(planner_backend.ok()) << planner_backend.status().ToString();
  FakePlanner fake(**planner_backend);
  fake.set_choice({8, kAlgo, {}});
  fake.Start();

  GpuConv conv(p);
  conv.Init(kWorkspace);
  ClientConfig config;
  config.server = fake.address();
  config.workspace_bytes = kWorkspace;
  config.deadline_ms = 60000;
  Handle handle(cudnn_, config);
  ASSERT_TRUE(handle.active());
  size_t asked = 0;
  ASSERT_EQ(conv.Declare(handle, kAlgo, &asked), CUDNN_STATUS_SUCCESS);
  EXPECT_GE(asked, kWorkspace);
  ASSERT_TRUE(handle.WaitForPlans(60000));
  ASSERT_EQ(handle.Stats().kernels_planned, 1u) << handle.Kernels().at(0).reason;

  for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{1.0f, 1.0f}}) {
    conv.ResetOutput();
    ASSERT_EQ(conv.Raw(cudnn_, kAlgo, alpha, beta), CUDNN_STATUS_SUCCESS);
    const std::vector<float> expected = conv.Output();
    conv.ResetOutput();
    ASSERT_EQ(conv.Drop(handle, /*algo the plan overrides=*/0, alpha, beta), CUDNN_STATUS_SUCCESS);
    const std::vector<float> planned = conv.Output();
    const double error = NormalizedL2(planned, expected);
    RecordProperty("normalized_l2", std::to_string(error));
    EXPECT_LT(error, PlanBound(op)) << kLayers[layer].name << " " << ToString(op) << " beta "
                                    << beta << (Tf32Possible() ? " (TF32 possible)" : "");
  }
  EXPECT_EQ(handle.Stats().planned_calls, 2u);
  EXPECT_EQ(handle.Stats().fallback_calls, 0u);
}

// The same with a plan of graph-API engine configurations (the first one cuDNN proposes for a
// micro-batch of 8 that runs): bound once per micro-batch size, executed on the job's handle,
// backward-filter's later micro-batches accumulating through the plan built with beta 1.
TEST_P(CudnnHandleTest, PlanOfEngineConfigurationsEqualsUndivided) {
  const auto [layer, op] = GetParam();
  const ConvProblem p = ProblemOf(kLayers[layer], op);
  Result<std::unique_ptr<ConvBackend>> planner_backend = MakeBackend("cudnn");
  ASSERT_TRUE(planner_backend.ok()) << planner_backend.status().ToString();
  std::string engine;
  for (const Timing& c : (*planner_backend)->Candidates(p, 8)) {
    if (c.engine_config.empty()) continue;
    Result<size_t> ws = (*planner_backend)->WorkspaceSize(p, 8, AlgorithmOf(c));
    if (ws.ok() && *ws <= kWorkspace) {
      engine = c.engine_config;
      break;
    }
  }
  ASSERT_FALSE(engine.empty()) << "cuDNN proposed no engine configuration that builds";
  FakePlanner fake(**planner_backend);
  fake.set_choice({8, kEngineAlgo, engine});
  fake.Start();

  GpuConv conv(p);
  conv.Init(kWorkspace);
  ClientConfig config;
  config.server = fake.address();
  config.workspace_bytes = kWorkspace;
  config.deadline_ms = 60000;
  config.cache_path.clear();
  Handle handle(cudnn_, config);
  ASSERT_TRUE(handle.active());
  size_t asked = 0;
  ASSERT_EQ(conv.Declare(handle, kAlgo, &asked), CUDNN_STATUS_SUCCESS);
  ASSERT_TRUE(handle.WaitForPlans(60000));
  ASSERT_EQ(handle.Stats().kernels_planned, 1u) << handle.Kernels().at(0).reason;
  for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{1.0f, 1.0f}}) {
    conv.ResetOutput();
    ASSERT_EQ(conv.Raw(cudnn_, kAlgo, alpha, beta), CUDNN_STATUS_SUCCESS);
    const std::vector<float> expected = conv.Output();
    conv.ResetOutput();
    ASSERT_EQ(conv.Drop(handle, 0, alpha, beta), CUDNN_STATUS_SUCCESS);
    const double error = NormalizedL2(conv.Output(), expected);
    // Another kernel than the legacy reference's: TF32 may differ (tests/gpu's TF32 bound).
    EXPECT_LT(error, 1e-2) << kLayers[layer].name << " " << ToString(op) << " " << engine
                           << " beta " << beta;
  }
  EXPECT_EQ(handle.Stats().planned_calls, 2u) << engine;
  EXPECT_EQ(handle.Stats().fallback_calls, 0u) << engine;
}

TEST_P(CudnnHandleTest, FallbackAndPassThroughGiveCudnnResults) {
  const auto [layer, op] = GetParam();
  const ConvProblem p = ProblemOf(kLayers[layer], op);
  GpuConv conv(p);
  conv.Init(kWorkspace);

  conv.ResetOutput();
  ASSERT_EQ(conv.Raw(cudnn_, kAlgo, 1.0f, 0.0f), CUDNN_STATUS_SUCCESS);
  const std::vector<float> expected = conv.Output();

  ClientConfig off;
  off.enabled = false;
  Handle passthrough(cudnn_, off);
  conv.ResetOutput();
  ASSERT_EQ(conv.Drop(passthrough, kAlgo, 1.0f, 0.0f), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(conv.Output(), expected) << "the off switch calls cuDNN unchanged";
  EXPECT_EQ(passthrough.Stats().passthrough_calls, 1u);

  ClientConfig no_server;  // cuDNN's heuristic best within the workspace, maybe another algo
  Handle fallback(cudnn_, no_server);
  conv.ResetOutput();
  ASSERT_EQ(conv.Drop(fallback, kAlgo, 1.0f, 0.0f), CUDNN_STATUS_SUCCESS);
  // Another algorithm may run: FFT and Winograd round differently (tests/gpu's bounds for
  // transform algorithms).
  EXPECT_LT(NormalizedL2(conv.Output(), expected), Tf32Possible() ? 1e-2 : 1e-3);
  EXPECT_EQ(fallback.Stats().fallback_calls, 1u);

  ucudnnHandle_t c_handle = nullptr;
  ASSERT_EQ(ucudnnCreateWithOptions(&c_handle, cudnn_, "UCUDNN_DISABLE=1"), CUDNN_STATUS_SUCCESS);
  conv.ResetOutput();
  ASSERT_EQ(conv.ViaC(c_handle, kAlgo, 1.0f, 0.0f), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(conv.Output(), expected);
  ucudnnStats_t stats;
  ASSERT_EQ(ucudnnGetStats(c_handle, &stats), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(stats.passthrough_calls, 1u);
  EXPECT_EQ(ucudnnDestroy(c_handle), CUDNN_STATUS_SUCCESS);
}

INSTANTIATE_TEST_SUITE_P(ResNet50, CudnnHandleTest,
                         ::testing::Combine(::testing::Range(0, 4),
                                            ::testing::Values(ConvOp::kForward,
                                                              ConvOp::kBackwardData,
                                                              ConvOp::kBackwardFilter)),
                         [](const ::testing::TestParamInfo<std::tuple<int, ConvOp>>& info) {
                           std::string name = kLayers[std::get<0>(info.param)].name;
                           for (char& c : name) c = c == '.' ? '_' : c;
                           return name + "_" + std::string(ToString(std::get<1>(info.param)));
                         });

TEST(CudnnHandleCApiTest, CreateAndDestroy) {
  if (GpuCount() == 0) GTEST_SKIP() << "no GPU";
  cudnnHandle_t cudnn = nullptr;
  ASSERT_EQ(cudnnCreate(&cudnn), CUDNN_STATUS_SUCCESS);
  uint64_t kernels = 99;
  EXPECT_EQ(ucudnn_test_c_api_roundtrip(cudnn, &kernels), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(kernels, 0u);
  EXPECT_EQ(ucudnnCreate(nullptr, cudnn), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(ucudnnDestroy(nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnDestroy(cudnn), CUDNN_STATUS_SUCCESS);
}

TEST(CudnnHandleCApiTest, NullArgumentsAreBadParam) {
  // Runs everywhere: no cuDNN call is made for a null handle.
  ucudnnHandle_t handle = reinterpret_cast<ucudnnHandle_t>(0x1);
  EXPECT_EQ(ucudnnCreate(&handle, nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(ucudnnGetCudnnHandle(nullptr), nullptr);
  EXPECT_EQ(ucudnnGetStats(nullptr, nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(ucudnnPrepare(nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(ucudnnPrepareKernels(nullptr, nullptr, 0), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(ucudnnWaitForPlans(nullptr, 0), CUDNN_STATUS_BAD_PARAM);
  int submitted = 7;
  EXPECT_EQ(ucudnnContribute(nullptr, &submitted), CUDNN_STATUS_BAD_PARAM);
}

// ---- Prepare(kernels) and contribution
// ------------------------------------------------------------

TEST(CudnnHandlePrepareTest, DescriptorKernelsArePlannedTogether) {
  if (GpuCount() == 0) GTEST_SKIP() << "no GPU";
  cudnnHandle_t cudnn = nullptr;
  ASSERT_EQ(cudnnCreate(&cudnn), CUDNN_STATUS_SUCCESS);
  {
    Result<std::unique_ptr<ConvBackend>> planner_backend = MakeBackend("cudnn");
    ASSERT_TRUE(planner_backend.ok()) << planner_backend.status().ToString();
    FakePlanner fake(**planner_backend);
    fake.set_choice({8, kAlgo, {}});
    fake.Start();
    ClientConfig config;
    config.server = fake.address();
    config.cache_path = "";
    config.deadline_ms = 60000;
    config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
    config.workspace_bytes = size_t{1} << 30;
    config.collect_quiet_ms = 600000;  // only Prepare() closes the network
    Handle handle(cudnn, config);
    ASSERT_TRUE(handle.active());

    std::vector<std::unique_ptr<GpuConv>> convs;
    std::vector<Handle::ConvolutionKernel> kernels;
    for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
      convs.push_back(std::make_unique<GpuConv>(ProblemOf(kLayers[3], op)));
      convs.back()->Init(kWorkspace);
      kernels.push_back(convs.back()->Describe(kLayers[3].name));
    }
    EXPECT_EQ(handle.Prepare(nullptr, 1), CUDNN_STATUS_BAD_PARAM);
    ASSERT_EQ(handle.Prepare(kernels), CUDNN_STATUS_SUCCESS);
    ASSERT_TRUE(handle.WaitForPlans(60000));
    EXPECT_EQ(handle.Stats().kernels_planned, 3u);
    const std::vector<v1::GetPlanRequest> requests = fake.requests();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].kernels_size(), 3);

    for (auto& conv : convs) {
      conv->ResetOutput();
      ASSERT_EQ(conv->Raw(cudnn, kAlgo, 1.0f, 0.0f), CUDNN_STATUS_SUCCESS);
      const std::vector<float> expected = conv->Output();
      conv->ResetOutput();
      ASSERT_EQ(conv->Drop(handle, 0, 1.0f, 0.0f), CUDNN_STATUS_SUCCESS);
      EXPECT_LT(NormalizedL2(conv->Output(), expected), PlanBound(conv->op()));
    }
    EXPECT_EQ(handle.Stats().planned_calls, 3u);
  }
  EXPECT_EQ(cudnnDestroy(cudnn), CUDNN_STATUS_SUCCESS);
}

TEST(CudnnHandleContributionTest, MissingTimingsAreMeasuredOnTheJobsGpuAndPlanned) {
  if (GpuCount() == 0) GTEST_SKIP() << "no GPU";
  cudnnHandle_t cudnn = nullptr;
  ASSERT_EQ(cudnnCreate(&cudnn), CUDNN_STATUS_SUCCESS);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudnnSetStream(cudnn, stream), CUDNN_STATUS_SUCCESS);
  {
    Result<std::unique_ptr<ConvBackend>> planner_backend = MakeBackend("cudnn");
    ASSERT_TRUE(planner_backend.ok()) << planner_backend.status().ToString();
    FakePlanner fake(**planner_backend);
    fake.set_behaviour(FakePlanner::Behaviour::kFromTimings);
    fake.set_token("gpu-contributor");
    fake.Start();
    ClientConfig config;
    config.server = fake.address();
    config.token = "gpu-contributor";
    config.contribute = true;
    config.cache_path = "";
    config.deadline_ms = 60000;
    config.workspace_bytes = kWorkspace;
    Handle handle(cudnn, config);
    ASSERT_TRUE(handle.active());

    const ConvProblem p = ProblemOf(kLayers[3], ConvOp::kForward);
    GpuConv conv(p);
    conv.Init(kWorkspace);
    size_t asked = 0;
    ASSERT_EQ(conv.Declare(handle, kAlgo, &asked), CUDNN_STATUS_SUCCESS);
    int device_before = -1;
    ASSERT_EQ(cudaGetDevice(&device_before), cudaSuccess);
    // A quiet point: the missing timings are measured (on the library's own handle and stream),
    // submitted with the token, and the plan made from them arrives.
    ASSERT_TRUE(handle.WaitForPlans(600000));
    int device_after = -1;
    ASSERT_EQ(cudaGetDevice(&device_after), cudaSuccess);
    EXPECT_EQ(device_after, device_before);
    cudaStream_t still = nullptr;
    ASSERT_EQ(cudnnGetStream(cudnn, &still), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(still, stream) << "the caller's handle keeps its stream";

    EXPECT_EQ(fake.submissions(), 1);
    EXPECT_FALSE(fake.timings(p).empty());
    const ClientStats stats = handle.Stats();
    EXPECT_EQ(stats.contributed_problems, 1u);
    EXPECT_EQ(stats.kernels_planned, 1u) << handle.Kernels().at(0).reason;

    conv.ResetOutput();
    ASSERT_EQ(conv.Raw(cudnn, kAlgo, 1.0f, 0.0f), CUDNN_STATUS_SUCCESS);
    const std::vector<float> expected = conv.Output();
    conv.ResetOutput();
    ASSERT_EQ(conv.Drop(handle, 0, 1.0f, 0.0f), CUDNN_STATUS_SUCCESS);
    // The plan may pick any algorithm (FFT, Winograd): tests/gpu's transform bounds.
    EXPECT_LT(NormalizedL2(conv.Output(), expected), Tf32Possible() ? 1e-2 : 1e-3);
    EXPECT_EQ(handle.Stats().planned_calls, 1u);

    int submitted = -1;
    EXPECT_EQ(handle.Contribute(&submitted), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(submitted, 0) << "nothing is missing any more";
  }
  EXPECT_EQ(cudnnDestroy(cudnn), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace ucudnn::testing
