// The framework's own convolution as a planning candidate, end to end on the CPU backend: a real
// planner server (in process, real gRPC) over a throw-away PostgreSQL, and the shape-level C API
// as the PyTorch adapter uses it. The job submits its framework's times
// (ucudnnShapeSubmitFrameworkTimings); where they beat every ucudnn configuration by the margin,
// the re-planned kernel answers UCUDNN_SHAPE_FRAMEWORK; elsewhere the plan runs. The server keeps
// framework timings out of its coverage check, validates the new fields and keys its caches by
// the framework identity.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "shape_problem.h"
#include "support/bearer_channel.h"
#include "support/postgres_fixture.h"
#include "support/problems.h"
#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/client/ucudnn_shape.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/proto/grpc_status.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/server/server.h"
#include "ucudnn/store/store.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn {
namespace {

constexpr char kToken[] = "framework-test-token";
constexpr char kTorch[] = "torch-2.11.0+cu130/benchmark";
constexpr int64_t kBatch = 4;

// A small forward convolution at mini-batch 4, fp32 NCHW.
ucudnnConvShape_t Shape() {
  ucudnnConvShape_t s{};
  s.op = UCUDNN_CONVOLUTION_FORWARD;
  s.n = kBatch;
  s.c = 3;
  s.h = s.w = 8;
  s.k = 4;
  s.r = s.s = 3;
  s.pad_h = s.pad_w = 1;
  s.stride_h = s.stride_w = s.dilation_h = s.dilation_w = s.groups = 1;
  s.data_type = UCUDNN_SHAPE_FLOAT;
  s.layout = UCUDNN_SHAPE_NCHW;
  s.math = UCUDNN_SHAPE_MATH_DEFAULT;
  return s;
}

ConvProblem ProblemOf(const ucudnnConvShape_t& shape) {
  Result<client::ShapeKernel> kernel = client::ToShapeKernel(shape);
  EXPECT_TRUE(kernel.ok()) << kernel.status().ToString();
  return kernel.ok() ? kernel->problem : ConvProblem{};
}

// ucudnn's own timings of the CPU backend's direct algorithm (no workspace): undivided 1.0 ms is
// the best configuration.
std::vector<Timing> UcudnnTimings() {
  return {test_support::MakeTiming(1, 0, 0.35), test_support::MakeTiming(2, 0, 0.6),
          test_support::MakeTiming(4, 0, 1.0)};
}

Timing FrameworkTiming(double ms, const std::string& identity = kTorch) {
  Timing t = test_support::MakeTiming(kBatch, kFrameworkAlgo, ms);
  t.engine_config = identity;
  return t;
}

// Host operands of Shape().
struct Buffers {
  std::vector<float> x = std::vector<float>(kBatch * 3 * 8 * 8, 0.5f);
  std::vector<float> w = std::vector<float>(4 * 3 * 3 * 3, 0.25f);
  std::vector<float> y = std::vector<float>(kBatch * 4 * 8 * 8, 0.0f);
  ucudnnShapeStatus_t Run(ucudnnShapeKernel_t kernel) {
    return ucudnnShapeKernelRun(kernel, x.data(), w.data(), y.data(), nullptr, nullptr, 0);
  }
};

class FrameworkCandidateTest : public test_support::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (HasFatalFailure()) return;
    server::ServerConfig config;
    config.database_url = url();
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "";
    config.tokens = {kToken};
    config.health_interval_ms = 100;
    auto started = server::PlannerServer::Start(config);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server_ = std::move(started).value();
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    auto channel = test_support::ChannelWithToken(address_, kToken);
    planner_ = v1::PlannerService::NewStub(channel);
    timings_ = v1::TimingService::NewStub(channel);
  }

  void TearDown() override {
    for (ucudnnShapeContext_t context : contexts_) ucudnnShapeDestroy(context);
    server_.reset();
    PostgresTest::TearDown();
  }

  grpc::Status Submit(const ConvProblem& problem, const std::vector<Timing>& timings) {
    grpc::ClientContext context;
    v1::SubmitTimingsRequest request;
    *request.mutable_device() = ToProto(device_);
    *request.mutable_problem() = ToProto(problem);
    for (const Timing& t : timings) *request.add_timings() = ToProto(t);
    request.set_measured_by("framework-test");
    v1::SubmitTimingsResponse response;
    return timings_->SubmitTimings(&context, request, &response);
  }

  v1::GetPlanRequest PlanRequestFor(const ConvProblem& problem, const std::string& framework) {
    PlanRequest request;
    request.device = device_;
    request.kernels = {Kernel{problem, kBatch, "conv"}};
    request.workspace_bytes = 64 << 20;
    request.framework = framework;
    return ToProto(request, 0);
  }

  Result<v1::GetPlanResponse> GetPlan(const v1::GetPlanRequest& request) {
    grpc::ClientContext context;
    v1::GetPlanResponse response;
    const grpc::Status status = planner_->GetPlan(&context, request, &response);
    if (!status.ok()) return FromGrpc(status);
    return response;
  }

  // A shape context on "cpu" against the test server; nullptr (and a failure) when refused.
  ucudnnShapeContext_t Context(const std::string& framework) {
    std::string options = "UCUDNN_SERVER=" + address_ + ";UCUDNN_TOKEN=" + kToken +
                          ";UCUDNN_CACHE_PATH=off;UCUDNN_DEADLINE_MS=5000";
    if (!framework.empty()) options += ";UCUDNN_FRAMEWORK=" + framework;
    ucudnnShapeContext_t context = nullptr;
    EXPECT_EQ(ucudnnShapeCreate(&context, "cpu", options.c_str()), UCUDNN_SHAPE_SUCCESS)
        << ucudnnShapeLastError();
    if (context != nullptr) contexts_.push_back(context);
    return context;
  }

  // The kernel of Shape(), with its first answer waited for.
  ucudnnShapeKernel_t PlannedKernel(ucudnnShapeContext_t context) {
    const ucudnnConvShape_t shape = Shape();
    ucudnnShapeKernel_t kernel = nullptr;
    EXPECT_EQ(ucudnnShapeGetKernel(context, &shape, 0, &kernel), UCUDNN_SHAPE_SUCCESS);
    EXPECT_EQ(ucudnnShapeWaitForPlans(context, 10000), UCUDNN_SHAPE_SUCCESS);
    return kernel;
  }

  ucudnnShapeKernelInfo_t Info(ucudnnShapeKernel_t kernel) {
    ucudnnShapeKernelInfo_t info{};
    EXPECT_EQ(ucudnnShapeGetKernelInfo(kernel, &info), UCUDNN_SHAPE_SUCCESS);
    return info;
  }

  ucudnnStats_t Stats(ucudnnShapeContext_t context) {
    ucudnnStats_t stats{};
    EXPECT_EQ(ucudnnShapeGetStats(context, &stats), UCUDNN_SHAPE_SUCCESS);
    return stats;
  }

  // Submits the framework's time of Shape() through the C API and waits for the new plan.
  void SubmitFrameworkTime(ucudnnShapeContext_t context, double ms, uint64_t workspace = 0) {
    const ucudnnConvShape_t shape = Shape();
    const double spread = 0.01;
    ASSERT_EQ(ucudnnShapeSubmitFrameworkTimings(context, &shape, &ms, &spread, &workspace, 1),
              UCUDNN_SHAPE_SUCCESS)
        << ucudnnShapeLastError();
    ASSERT_EQ(ucudnnShapeWaitForPlans(context, 10000), UCUDNN_SHAPE_SUCCESS);
  }

  const DeviceFingerprint device_ = CpuBackend().fingerprint();
  const ConvProblem problem_ = ProblemOf(Shape());
  std::unique_ptr<server::PlannerServer> server_;
  std::string address_;
  std::unique_ptr<v1::PlannerService::Stub> planner_;
  std::unique_ptr<v1::TimingService::Stub> timings_;
  std::vector<ucudnnShapeContext_t> contexts_;
};

TEST_F(FrameworkCandidateTest, FasterFrameworkTimingsMakeTheKernelAnswerFramework) {
  ASSERT_TRUE(Submit(problem_, UcudnnTimings()).ok());
  ucudnnShapeContext_t context = Context(kTorch);
  ASSERT_NE(context, nullptr);
  ucudnnShapeKernel_t kernel = PlannedKernel(context);
  Buffers buffers;
  ASSERT_EQ(buffers.Run(kernel), UCUDNN_SHAPE_SUCCESS);
  ucudnnShapeKernelInfo_t info = Info(kernel);
  EXPECT_EQ(info.state, 1);
  EXPECT_EQ(info.segments, 1);
  EXPECT_DOUBLE_EQ(info.predicted_ms, 1.0);
  EXPECT_DOUBLE_EQ(info.undivided_ms, 1.0);
  EXPECT_EQ(info.framework_ms, 0) << "nothing known of the framework yet";

  SubmitFrameworkTime(context, 0.5);
  info = Info(kernel);
  EXPECT_EQ(info.state, 2);
  EXPECT_EQ(info.segments, 1);
  EXPECT_DOUBLE_EQ(info.predicted_ms, 0.5);
  EXPECT_DOUBLE_EQ(info.framework_ms, 0.5);
  EXPECT_DOUBLE_EQ(info.undivided_ms, 1.0);
  buffers.y.assign(buffers.y.size(), -7.0f);
  EXPECT_EQ(buffers.Run(kernel), UCUDNN_SHAPE_FRAMEWORK);
  EXPECT_EQ(buffers.y[0], -7.0f) << "nothing written";
  size_t bytes = 0;
  EXPECT_EQ(ucudnnShapeKernelWorkspaceSize(kernel, &bytes), UCUDNN_SHAPE_FRAMEWORK);
  const ucudnnConvShape_t shape = Shape();
  EXPECT_EQ(ucudnnShapeWorkspaceSize(context, &shape, 0, &bytes), UCUDNN_SHAPE_FRAMEWORK);
  EXPECT_EQ(ucudnnShapeConvolution(context, &shape, buffers.x.data(), buffers.w.data(),
                                   buffers.y.data(), nullptr, nullptr, 0, 1.0f, 0.0f),
            UCUDNN_SHAPE_FRAMEWORK);
  const ucudnnStats_t stats = Stats(context);
  EXPECT_EQ(stats.framework_calls, 3u);  // the run, the workspace query, the convolution
  EXPECT_EQ(stats.planned_calls, 1u);
  EXPECT_EQ(stats.fallback_calls, 0u);

  // The store holds it as the framework's timing; the problem still counts as measured.
  auto store = store::Store::Open(url());
  ASSERT_TRUE(store.ok());
  auto table = (*store)->GetTimings(device_, problem_);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  const Timing* stored = FindFramework(*table, kBatch, kTorch);
  ASSERT_NE(stored, nullptr);
  EXPECT_DOUBLE_EQ(stored->time_ms, 0.5);
}

TEST_F(FrameworkCandidateTest, AFasterFrameworkBeyondTheLimitFitsAKernelOfALargerLimit) {
  ASSERT_TRUE(Submit(problem_, UcudnnTimings()).ok());
  ucudnnShapeContext_t context = Context(kTorch);
  ASSERT_NE(context, nullptr);
  ucudnnShapeKernel_t kernel = PlannedKernel(context);
  uint64_t workspace = 7;
  ASSERT_EQ(ucudnnShapeGetKernelFrameworkWorkspace(kernel, &workspace), UCUDNN_SHAPE_SUCCESS);
  EXPECT_EQ(workspace, 0u) << "nothing known of the framework yet";

  const uint64_t beyond = uint64_t{1} << 30;  // the context's limit is 64 MiB
  SubmitFrameworkTime(context, 0.5, beyond);
  const ucudnnShapeKernelInfo_t info = Info(kernel);
  EXPECT_EQ(info.state, 1) << "the framework's own does not fit: ucudnn's plan";
  EXPECT_DOUBLE_EQ(info.framework_ms, 0.5);
  ASSERT_EQ(ucudnnShapeGetKernelFrameworkWorkspace(kernel, &workspace), UCUDNN_SHAPE_SUCCESS);
  EXPECT_EQ(workspace, beyond) << "what the caller needs to tell where it would fit";
  EXPECT_EQ(ucudnnShapeGetKernelFrameworkWorkspace(nullptr, &workspace), UCUDNN_SHAPE_BAD_PARAM);
  EXPECT_EQ(ucudnnShapeGetKernelFrameworkWorkspace(kernel, nullptr), UCUDNN_SHAPE_BAD_PARAM);

  // The same shape at a limit the framework's workspace fits is another kernel, planned at its
  // own limit: the framework's own. The first keeps its plan.
  const ucudnnConvShape_t shape = Shape();
  ucudnnShapeKernel_t wide = nullptr;
  ASSERT_EQ(ucudnnShapeGetKernel(context, &shape, 2 * beyond, &wide), UCUDNN_SHAPE_SUCCESS);
  EXPECT_NE(wide, kernel);
  ucudnnShapeKernel_t again = nullptr;
  ASSERT_EQ(ucudnnShapeGetKernel(context, &shape, 2 * beyond, &again), UCUDNN_SHAPE_SUCCESS);
  EXPECT_EQ(again, wide) << "one handle per shape and limit";
  ASSERT_EQ(ucudnnShapePrepare(context, &shape, 1, 2 * beyond), UCUDNN_SHAPE_SUCCESS);
  ASSERT_EQ(ucudnnShapeWaitForPlans(context, 10000), UCUDNN_SHAPE_SUCCESS);
  EXPECT_EQ(Info(wide).state, 2);
  EXPECT_EQ(Info(kernel).state, 1);
  // A call by shape runs the kernel declared first.
  Buffers buffers;
  EXPECT_EQ(ucudnnShapeConvolution(context, &shape, buffers.x.data(), buffers.w.data(),
                                   buffers.y.data(), nullptr, nullptr, 0, 1.0f, 0.0f),
            UCUDNN_SHAPE_SUCCESS);
  EXPECT_EQ(Stats(context).kernels, 2u);
}

TEST_F(FrameworkCandidateTest, SlowerFrameworkLeavesTheUcudnnPlan) {
  ASSERT_TRUE(Submit(problem_, UcudnnTimings()).ok());
  ucudnnShapeContext_t context = Context(kTorch);
  ASSERT_NE(context, nullptr);
  ucudnnShapeKernel_t kernel = PlannedKernel(context);
  SubmitFrameworkTime(context, 2.0);  // 1.0 < 2.0 * 0.97
  const ucudnnShapeKernelInfo_t info = Info(kernel);
  EXPECT_EQ(info.state, 1);
  EXPECT_DOUBLE_EQ(info.predicted_ms, 1.0);
  EXPECT_DOUBLE_EQ(info.framework_ms, 2.0);
  Buffers buffers;
  EXPECT_EQ(buffers.Run(kernel), UCUDNN_SHAPE_SUCCESS);
  EXPECT_EQ(Stats(context).framework_calls, 0u);
}

TEST_F(FrameworkCandidateTest, ContextWithoutFrameworkNeverGetsAFrameworkPlan) {
  std::vector<Timing> timings = UcudnnTimings();
  timings.push_back(FrameworkTiming(0.1));
  ASSERT_TRUE(Submit(problem_, timings).ok());
  ucudnnShapeContext_t context = Context("");
  ASSERT_NE(context, nullptr);
  ucudnnShapeKernel_t kernel = PlannedKernel(context);
  const ucudnnShapeKernelInfo_t info = Info(kernel);
  EXPECT_EQ(info.state, 1);
  EXPECT_EQ(info.framework_ms, 0);
  Buffers buffers;
  EXPECT_EQ(buffers.Run(kernel), UCUDNN_SHAPE_SUCCESS);
  // Nothing to submit as.
  const ucudnnConvShape_t shape = Shape();
  const double ms = 0.1;
  EXPECT_EQ(ucudnnShapeSubmitFrameworkTimings(context, &shape, &ms, nullptr, nullptr, 1),
            UCUDNN_SHAPE_UNAVAILABLE);
  EXPECT_NE(std::string(ucudnnShapeLastError()).find("UCUDNN_FRAMEWORK"), std::string::npos);
}

TEST_F(FrameworkCandidateTest, BadFrameworkIdentityIsRefused) {
  for (const std::string& bad : {std::string(129, 'a'), std::string("torch\x7f")}) {
    const std::string options = "UCUDNN_CACHE_PATH=off;UCUDNN_FRAMEWORK=" + bad;
    ucudnnShapeContext_t context = nullptr;
    EXPECT_EQ(ucudnnShapeCreate(&context, "cpu", options.c_str()), UCUDNN_SHAPE_BAD_PARAM);
    EXPECT_EQ(context, nullptr);
    EXPECT_NE(std::string(ucudnnShapeLastError()).find("UCUDNN_FRAMEWORK"), std::string::npos)
        << ucudnnShapeLastError();
  }
  auto refused = GetPlan(PlanRequestFor(problem_, "bad\nname"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("framework"), std::string::npos);
  Timing below = FrameworkTiming(1.0);
  below.algo = -3;
  const grpc::Status status = Submit(problem_, {below});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("algo"), std::string::npos) << status.error_message();
}

TEST_F(FrameworkCandidateTest, FrameworkTimingsAloneLeaveTheProblemMissingWithAJob) {
  ASSERT_TRUE(Submit(problem_, {FrameworkTiming(0.5)}).ok());
  auto response = GetPlan(PlanRequestFor(problem_, kTorch));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  const v1::KernelPlan& kernel = response->plan().kernels(0);
  EXPECT_EQ(kernel.status(), v1::KERNEL_PLAN_STATUS_MISSING);
  EXPECT_DOUBLE_EQ(kernel.framework_ms(), 0.5) << "known, so the client need not measure it";
  ASSERT_EQ(response->plan().missing_size(), 1);
  EXPECT_GT(response->plan().missing(0).job_id(), 0) << "a worker is asked to measure it";
}

TEST_F(FrameworkCandidateTest, FrameworksCoexistAndPlansAreKeptApart) {
  std::vector<Timing> timings = UcudnnTimings();
  timings.push_back(FrameworkTiming(0.5));
  timings.push_back(FrameworkTiming(3.0, "jax-0.5"));
  ASSERT_TRUE(Submit(problem_, timings).ok());
  auto torch = GetPlan(PlanRequestFor(problem_, kTorch));
  auto jax = GetPlan(PlanRequestFor(problem_, "jax-0.5"));
  auto none = GetPlan(PlanRequestFor(problem_, ""));
  ASSERT_TRUE(torch.ok() && jax.ok() && none.ok());
  EXPECT_EQ(torch->plan().kernels(0).segments(0).algo(), kFrameworkAlgo);
  EXPECT_DOUBLE_EQ(torch->plan().kernels(0).framework_ms(), 0.5);
  EXPECT_EQ(jax->plan().kernels(0).segments(0).algo(), 0);
  EXPECT_DOUBLE_EQ(jax->plan().kernels(0).framework_ms(), 3.0);
  EXPECT_EQ(none->plan().kernels(0).segments(0).algo(), 0);
  EXPECT_EQ(none->plan().kernels(0).framework_ms(), 0);
  EXPECT_NE(torch->plan().plan_hash(), jax->plan().plan_hash());
  EXPECT_NE(torch->plan().plan_hash(), none->plan().plan_hash());
  // Served again from the cache, each its own.
  auto torch_again = GetPlan(PlanRequestFor(problem_, kTorch));
  ASSERT_TRUE(torch_again.ok());
  EXPECT_TRUE(torch_again->from_cache());
  EXPECT_EQ(torch_again->plan().kernels(0).segments(0).algo(), kFrameworkAlgo);
}

// A shape outside the library's limits is the framework's to run: ucudnnShapeCheck says so
// without a context, and names the field.
TEST(ShapeCheckTest, ShapesOutsideTheLimitsAreNamed) {
  const ucudnnConvShape_t shape = Shape();
  EXPECT_EQ(ucudnnShapeCheck(&shape), UCUDNN_SHAPE_SUCCESS);
  ucudnnConvShape_t empty = Shape();
  empty.n = 0;  // an empty batch (a detection head with no region)
  EXPECT_EQ(ucudnnShapeCheck(&empty), UCUDNN_SHAPE_BAD_PARAM);
  EXPECT_THAT(ucudnnShapeLastError(), ::testing::HasSubstr("shape.n"));
  ucudnnConvShape_t long_audio = Shape();
  long_audio.h = 1;
  long_audio.w = 48000;  // 3 s of 16 kHz audio through a Conv1d
  EXPECT_EQ(ucudnnShapeCheck(&long_audio), UCUDNN_SHAPE_BAD_PARAM);
  EXPECT_THAT(ucudnnShapeLastError(), ::testing::HasSubstr("shape.w"));
  EXPECT_EQ(ucudnnShapeCheck(nullptr), UCUDNN_SHAPE_BAD_PARAM);
}

}  // namespace
}  // namespace ucudnn
