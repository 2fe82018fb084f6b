// The client library's session on the CPU backend, against a fake PlannerService over real gRPC:
// plan execution equals undivided execution, fallback when the server is down, slow or wrong,
// the switch to a plan when it arrives, the workspace check, the total-budget mode and the
// local plan cache across restarts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "fake_planner.h"
#include "session.h"
#include "test_util.h"
#include "ucudnn/backends/cpu_backend.h"

namespace ucudnn::testing {
namespace {

using client::Session;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int64_t kBatch = 7;  // not a multiple of the fake's micro-batch: uneven segments

ClientConfig TestConfig(const std::string& server) {
  ClientConfig config = FakePlannerConfig(server);
  config.collect_quiet_ms = 50;
  return config;
}

// Reference: the whole batch at once with the direct algorithm.
std::vector<float> Undivided(CpuBackend& backend, const ConvProblem& p, int64_t batch,
                             Operands operands, float alpha, float beta) {
  Status status =
      backend.Run(p, batch, kCpuAlgoDirect, operands.Bind(p.op), nullptr, 0, alpha, beta);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return operands.out;
}

// One call of `p` at kBatch (alpha 1, beta 0) into operands.out, with all of `workspace`.
bool ExecuteOnce(Session& session, const ConvProblem& p, Operands& operands,
                 std::vector<char>& workspace) {
  return session
      .Execute(p, kBatch, operands.Bind(p.op), workspace.data(), workspace.size(), 1.0f, 0.0f)
      .ok();
}

size_t Im2colWorkspace(CpuBackend& backend, const ConvProblem& p, int64_t batch) {
  Result<size_t> ws = backend.WorkspaceSize(p, batch, kCpuAlgoIm2colGemm);
  EXPECT_TRUE(ws.ok()) << ws.status().ToString();
  return ws.ok() ? *ws : 0;
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakePlanner>(backend_);
    fake_->set_choice({3, kCpuAlgoIm2colGemm, {}});
    fake_->Start();
  }

  // `kernel` run through the session with no workspace of the caller's (alpha 1, beta 0.5) equals
  // the undivided run.
  void ExpectEqualsUndividedWithoutWorkspace(Session& session, const Kernel& kernel) {
    Operands operands = MakeOperands(kernel.problem, kBatch);
    const std::vector<float> expected =
        Undivided(backend_, kernel.problem, kBatch, operands, 1.0f, 0.5f);
    ASSERT_TRUE(session
                    .Execute(kernel.problem, kBatch, operands.Bind(kernel.problem.op), nullptr, 0,
                             1.0f, 0.5f)
                    .ok());
    EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6) << kernel.name;
  }

  CpuBackend backend_;
  std::unique_ptr<FakePlanner> fake_;
};

// ---- Equivalence -------------------------------------------------------------------------------

class PlanEquivalenceTest : public SessionTest,
                            public ::testing::WithParamInterface<std::tuple<ConvOp, int>> {};

TEST_P(PlanEquivalenceTest, PlanEqualsUndivided) {
  const auto [op, stride] = GetParam();
  const ConvProblem p = SmallProblem(op, stride);
  // Mixed algorithms: the plan's segments use im2col, the fallback would use another one.
  auto session = Session::Create(backend_, TestConfig(fake_->address()));
  const size_t limit = Im2colWorkspace(backend_, p, 3);
  session->Declare(p, kBatch, limit);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  ASSERT_EQ(session->Stats().kernels_planned, 1u);

  for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{1.5f, 0.5f}}) {
    Operands operands = MakeOperands(p, kBatch);
    const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, alpha, beta);
    std::vector<char> workspace(limit);
    const uint64_t planned_before = session->Stats().planned_calls;
    Status status =
        session->Execute(p, kBatch, operands.Bind(op), workspace.data(), limit, alpha, beta);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(session->Stats().planned_calls, planned_before + 1);
    EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6) << "alpha " << alpha << " beta " << beta;
  }
  const std::vector<KernelReport> kernels = session->Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].state, KernelReport::State::kPlanned);
  ASSERT_EQ(kernels[0].segments.size(), 3u);  // 3 + 3 + 1
  EXPECT_EQ(kernels[0].segments[2].micro_batch, 1);
  EXPECT_GT(kernels[0].predicted_ms, 0);
}

INSTANTIATE_TEST_SUITE_P(AllOps, PlanEquivalenceTest,
                         ::testing::Combine(::testing::Values(ConvOp::kForward,
                                                              ConvOp::kBackwardData,
                                                              ConvOp::kBackwardFilter),
                                            ::testing::Values(1, 2)),
                         [](const ::testing::TestParamInfo<std::tuple<ConvOp, int>>& info) {
                           return std::string(ToString(std::get<0>(info.param))) + "_stride" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST_F(SessionTest, FallbackEqualsUndivided) {
  // No server at all: every call runs undivided with the best algorithm within the workspace.
  auto session = Session::Create(backend_, TestConfig(""));
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    const ConvProblem p = SmallProblem(op);
    Operands operands = MakeOperands(p, kBatch);
    const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.25f);
    const size_t limit = Im2colWorkspace(backend_, p, kBatch);
    std::vector<char> workspace(limit);
    ASSERT_TRUE(
        session->Execute(p, kBatch, operands.Bind(op), workspace.data(), limit, 1.0f, 0.25f).ok());
    EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  }
  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.fallback_calls, 3u);
  EXPECT_EQ(stats.planned_calls, 0u);
  EXPECT_EQ(stats.plan_requests, 0u);
  for (const KernelReport& k : session->Kernels())
    EXPECT_EQ(k.state, KernelReport::State::kNoServer);
}

// ---- Server trouble ----------------------------------------------------------------------------

TEST_F(SessionTest, ServerDownFallsBack) {
  // Nothing listens on port 1: connections are refused.
  auto session = Session::Create(backend_, TestConfig("127.0.0.1:1"));
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  for (int i = 0; i < 3; ++i) {
    Operands operands = MakeOperands(p, kBatch, 10 + i);
    const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.0f);
    ASSERT_TRUE(session->Execute(p, kBatch, operands.Bind(p.op), nullptr, 0, 1.0f, 0.0f).ok());
    EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  }
  EXPECT_TRUE(WaitUntil([&] { return session->Stats().plan_request_failures >= 2; }))
      << "the planner thread retries with back-off";
  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.fallback_calls, 3u);
  EXPECT_EQ(stats.planned_calls, 0u);
  EXPECT_FALSE(session->WaitForPlans(milliseconds(1)));  // still waiting for a server
}

TEST_F(SessionTest, SlowServerNeverBlocksCallsAndHitsTheDeadline) {
  ClientConfig config = TestConfig(fake_->address());
  config.deadline_ms = 100;
  fake_->Hold();  // the server sits on every request until released
  auto session = Session::Create(backend_, config);
  const ConvProblem p = SmallProblem(ConvOp::kBackwardData);
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.0f);
  ASSERT_TRUE(session->Execute(p, kBatch, operands.Bind(p.op), nullptr, 0, 1.0f, 0.0f).ok());
  // The request reached the server, which still holds it: the call above did not wait for it.
  ASSERT_TRUE(WaitUntil([&] { return fake_->calls_in_handler() >= 1; }));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(session->Execute(p, kBatch, operands.Bind(p.op), nullptr, 0, 1.0f, 0.0f).ok());
  }
  EXPECT_GE(fake_->calls_in_handler(), 1);
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  // The client gives up at its deadline while the server still holds the call.
  EXPECT_TRUE(WaitUntil([&] { return session->Stats().plan_request_failures >= 1; }));
  EXPECT_EQ(session->Stats().fallback_calls, 6u);
  EXPECT_EQ(session->Stats().planned_calls, 0u);
  fake_->Release();
}

TEST_F(SessionTest, ServerErrorFallsBack) {
  fake_->set_behaviour(FakePlanner::Behaviour::kError);
  auto session = Session::Create(backend_, TestConfig(fake_->address()));
  const ConvProblem p = SmallProblem(ConvOp::kBackwardFilter);
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 1.0f);
  ASSERT_TRUE(session->Execute(p, kBatch, operands.Bind(p.op), nullptr, 0, 1.0f, 1.0f).ok());
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  EXPECT_TRUE(WaitUntil([&] { return session->Stats().plan_request_failures >= 2; }));
  EXPECT_GE(fake_->calls(), 2) << "errors are retried";
  const std::vector<KernelReport> kernels = session->Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].state, KernelReport::State::kWaiting);
  EXPECT_NE(kernels[0].reason.find("told to fail"), std::string::npos) << kernels[0].reason;
}

TEST_F(SessionTest, WrongPlanForTheWorkspaceIsNotUsed) {
  // The fake plans the whole batch with im2col, whatever the limit: more than the call has.
  fake_->set_choice({kBatch, kCpuAlgoIm2colGemm, {}});
  auto session = Session::Create(backend_, TestConfig(fake_->address()));
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  const size_t small = Im2colWorkspace(backend_, p, 1);
  ASSERT_LT(small, Im2colWorkspace(backend_, p, kBatch));
  std::vector<char> workspace(small);
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.0f);
  ASSERT_TRUE(ExecuteOnce(*session, p, operands, workspace));
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  ASSERT_EQ(session->Stats().kernels_planned, 1u);
  ASSERT_TRUE(ExecuteOnce(*session, p, operands, workspace));
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.planned_calls, 0u);
  EXPECT_EQ(stats.fallback_calls, 2u);
  EXPECT_EQ(stats.rejected_plan_calls, 1u);
}

// ---- Plans arriving ----------------------------------------------------------------------------

TEST_F(SessionTest, SwitchesToThePlanWhenItArrives) {
  fake_->Hold();
  auto session = Session::Create(backend_, TestConfig(fake_->address()));
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  const size_t limit = Im2colWorkspace(backend_, p, 3);
  std::vector<char> workspace(limit);
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.0f);

  ASSERT_TRUE(ExecuteOnce(*session, p, operands, workspace));
  ASSERT_TRUE(WaitUntil([&] { return fake_->calls_in_handler() == 1; }));
  ASSERT_TRUE(ExecuteOnce(*session, p, operands, workspace));
  EXPECT_EQ(session->Stats().fallback_calls, 2u);
  EXPECT_EQ(session->Stats().planned_calls, 0u);

  fake_->Release();
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  ASSERT_TRUE(ExecuteOnce(*session, p, operands, workspace));
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.planned_calls, 1u);
  EXPECT_EQ(stats.fallback_calls, 2u);
  EXPECT_EQ(stats.plans_received, 1u);
  EXPECT_EQ(stats.plan_requests, 1u);
  // The request carried the kernel and the limit of its first call.
  const std::vector<v1::GetPlanRequest> requests = fake_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].workspace_bytes(), limit);
  EXPECT_EQ(requests[0].workspace_mode(), v1::WORKSPACE_MODE_PER_KERNEL);
  ASSERT_EQ(requests[0].kernels_size(), 1);
  EXPECT_EQ(requests[0].kernels(0).mini_batch(), kBatch);
  EXPECT_EQ(requests[0].device().backend(), "cpu");
}

// The drop-in handle's path: a kernel whose plan is the framework's own convolution runs
// undivided with the runner's own choice, counted as a framework call, and is never verified or
// bound on the backend.
TEST_F(SessionTest, FrameworkPlanRunsUndividedAsAFrameworkCall) {
  fake_->set_framework_choice("torch-test");
  ClientConfig config = TestConfig(fake_->address());
  config.framework = "torch-test";
  auto session = Session::Create(backend_, config);
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  const size_t limit = Im2colWorkspace(backend_, p, kBatch);
  std::vector<char> workspace(limit);
  session->Declare(p, kBatch, limit);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.0f);
  ASSERT_TRUE(ExecuteOnce(*session, p, operands, workspace));
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.framework_calls, 1u);
  EXPECT_EQ(stats.fallback_calls, 0u);
  EXPECT_EQ(stats.planned_calls, 0u);
  ASSERT_NE(session->PlanOf(p, kBatch), nullptr);
  EXPECT_TRUE(session->PlanOf(p, kBatch)->framework);
  EXPECT_EQ(session->PlanOf(p, kBatch)->required_bytes.load(), client::PlanEntry::kUnverified);
  const std::vector<v1::GetPlanRequest> requests = fake_->requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_EQ(requests[0].framework(), "torch-test");
  const std::vector<KernelReport> kernels = session->Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].framework_calls, 1u);
  EXPECT_DOUBLE_EQ(kernels[0].framework_ms, 0.25 * kBatch);
}

TEST_F(SessionTest, TotalModeFrameworkPlanTakesNoSliceOfTheLibraryWorkspace) {
  fake_->set_framework_choice("torch-test");
  ClientConfig config = TestConfig(fake_->address());
  config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
  config.workspace_bytes = 1 << 20;
  config.collect_quiet_ms = 60000;
  config.framework = "torch-test";
  auto session = Session::Create(backend_, config);
  const Kernel kernel{SmallProblem(ConvOp::kForward), kBatch, "fwd"};
  session->Prepare({kernel});
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  const client::PlanEntry* plan = session->PlanOf(kernel.problem, kBatch);
  ASSERT_NE(plan, nullptr);
  EXPECT_TRUE(plan->framework);
  EXPECT_FALSE(plan->library_workspace);
  Operands operands = MakeOperands(kernel.problem, kBatch);
  const std::vector<float> expected =
      Undivided(backend_, kernel.problem, kBatch, operands, 1.0f, 0.0f);
  ASSERT_TRUE(session
                  ->Execute(kernel.problem, kBatch, operands.Bind(kernel.problem.op), nullptr, 0,
                            1.0f, 0.0f)
                  .ok());
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  EXPECT_EQ(session->Stats().framework_calls, 1u);
  EXPECT_EQ(session->Stats().fallback_calls, 0u);
}

TEST_F(SessionTest, InvalidFrameworkIdentityIsNotSent) {
  ClientConfig config = TestConfig(fake_->address());
  config.framework = std::string(129, 'x');
  auto session = Session::Create(backend_, config);
  EXPECT_EQ(session->framework(), "");
  session->Declare(SmallProblem(ConvOp::kForward), kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  const std::vector<v1::GetPlanRequest> requests = fake_->requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_EQ(requests[0].framework(), "");
}

TEST_F(SessionTest, MissingTimingsAreAskedAgain) {
  fake_->set_behaviour(FakePlanner::Behaviour::kMissing);
  auto session = Session::Create(backend_, TestConfig(fake_->address()));
  const ConvProblem p = SmallProblem(ConvOp::kBackwardData);
  session->Declare(p, kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  ASSERT_EQ(session->Kernels().at(0).state, KernelReport::State::kMissing);
  // The shape API tells it apart from a kernel that has no plan for good (an adapter waits for
  // its benchmark before timing the framework's own on a device a worker may share).
  client::KernelState* kernel = session->FindKernel(p, kBatch, 1 << 20);
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(session->Info(*kernel).state, client::KernelInfo::State::kMissing);
  fake_->set_behaviour(FakePlanner::Behaviour::kPlan);
  EXPECT_TRUE(WaitUntil([&] { return session->Stats().kernels_planned == 1; }));
  EXPECT_EQ(session->Info(*kernel).state, client::KernelInfo::State::kPlanned);
  EXPECT_GE(fake_->calls(), 2);
}

TEST_F(SessionTest, KernelsOfOneLimitGoInOneRequest) {
  fake_->Hold();
  auto session = Session::Create(backend_, TestConfig(fake_->address()));
  session->Declare(SmallProblem(ConvOp::kForward), kBatch, 4096);  // sent at once
  ASSERT_TRUE(WaitUntil([&] { return fake_->calls_in_handler() == 1; }));
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    session->Declare(SmallProblem(op, 2), kBatch, 4096);
  }
  fake_->Release();
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  const std::vector<v1::GetPlanRequest> requests = fake_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].kernels_size(), 3);
  EXPECT_EQ(session->Stats().kernels_planned, 4u);
}

// Kernels of different limits (issue 21: per-kernel budgets) go into one request, each carrying
// its own limit where it differs from the request's; each plan is published and cached under its
// kernel's limit.
TEST_F(SessionTest, KernelsOfSeveralLimitsGoInOneRequestEachWithItsLimit) {
  fake_->Hold();
  auto session = Session::Create(backend_, TestConfig(fake_->address()));
  session->Declare(SmallProblem(ConvOp::kForward), kBatch, 4096);  // sent at once
  ASSERT_TRUE(WaitUntil([&] { return fake_->calls_in_handler() == 1; }));
  session->Declare(SmallProblem(ConvOp::kForward, 2), kBatch, 4096);
  session->Declare(SmallProblem(ConvOp::kBackwardData, 2), kBatch, 1 << 20);
  session->Declare(SmallProblem(ConvOp::kBackwardFilter, 2), kBatch, 8 << 20);
  fake_->Release();
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  const std::vector<v1::GetPlanRequest> requests = fake_->requests();
  ASSERT_EQ(requests.size(), 2u);
  ASSERT_EQ(requests[1].kernels_size(), 3);
  EXPECT_EQ(requests[1].workspace_bytes(), 4096u);
  EXPECT_FALSE(requests[1].kernels(0).has_workspace_limit_bytes()) << "the request's own limit";
  EXPECT_EQ(requests[1].kernels(1).workspace_limit_bytes(), uint64_t{1} << 20);
  EXPECT_EQ(requests[1].kernels(2).workspace_limit_bytes(), uint64_t{8} << 20);
  EXPECT_EQ(session->Stats().kernels_planned, 4u);
  for (const KernelReport& k : session->Kernels()) {
    EXPECT_EQ(k.state, KernelReport::State::kPlanned) << k.problem;
  }
}

// A server older than per-kernel limits plans every kernel under the request's limit and echoes
// none: the kernels whose own limit differs are asked again, one request per limit from then on.
TEST_F(SessionTest, AServerWithoutPerKernelLimitsGetsOneRequestPerLimit) {
  fake_->set_ignore_kernel_limits(true);
  fake_->Hold();
  auto session = Session::Create(backend_, TestConfig(fake_->address()));
  session->Declare(SmallProblem(ConvOp::kForward), kBatch, 4096);
  ASSERT_TRUE(WaitUntil([&] { return fake_->calls_in_handler() == 1; }));
  session->Declare(SmallProblem(ConvOp::kForward, 2), kBatch, 4096);
  session->Declare(SmallProblem(ConvOp::kBackwardData, 2), kBatch, 1 << 20);
  fake_->Release();
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  const std::vector<v1::GetPlanRequest> requests = fake_->requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].kernels_size(), 2) << "both limits asked together first";
  ASSERT_EQ(requests[2].kernels_size(), 1);
  EXPECT_EQ(requests[2].workspace_bytes(), uint64_t{1} << 20) << "then in its own request";
  EXPECT_FALSE(requests[2].kernels(0).has_workspace_limit_bytes());
  EXPECT_EQ(session->Stats().kernels_planned, 3u);
}

// ---- Total-budget mode --------------------------------------------------------------------------

TEST_F(SessionTest, TotalModePlansTheNetworkTogetherInTheLibraryWorkspace) {
  ClientConfig config = TestConfig(fake_->address());
  config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
  config.workspace_bytes = 1 << 20;
  config.collect_quiet_ms = 60000;  // only Prepare() closes the collection here
  auto session = Session::Create(backend_, config);
  std::vector<Kernel> kernels;
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    kernels.push_back(Kernel{SmallProblem(op), kBatch, std::string(ToString(op))});
  }
  session->Prepare(kernels);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  const std::vector<v1::GetPlanRequest> requests = fake_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].workspace_mode(), v1::WORKSPACE_MODE_TOTAL_SUM);
  EXPECT_EQ(requests[0].workspace_bytes(), config.workspace_bytes);
  EXPECT_EQ(requests[0].kernels_size(), 3);

  // The framework passes no workspace: the library's own serves the plan.
  for (const Kernel& kernel : kernels) ExpectEqualsUndividedWithoutWorkspace(*session, kernel);
  EXPECT_EQ(session->Stats().planned_calls, 3u);
  EXPECT_EQ(session->Stats().fallback_calls, 0u);
}

TEST_F(SessionTest, TotalModeCollectsKernelsFromFirstCalls) {
  ClientConfig config = TestConfig(fake_->address());
  config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
  config.workspace_bytes = 1 << 20;
  config.collect_quiet_ms = 100;
  auto session = Session::Create(backend_, config);
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData}) {
    const ConvProblem p = SmallProblem(op);
    Operands operands = MakeOperands(p, kBatch);
    ASSERT_TRUE(session->Execute(p, kBatch, operands.Bind(op), nullptr, 0, 1.0f, 0.0f).ok());
  }
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  const std::vector<v1::GetPlanRequest> requests = fake_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].kernels_size(), 2);
  EXPECT_EQ(session->Stats().kernels_planned, 2u);
}

TEST_F(SessionTest, TotalModeWithoutBudgetPlansPerKernel) {
  ClientConfig config = TestConfig(fake_->address());
  config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
  config.workspace_bytes = 0;
  LogCapture log;
  auto session = Session::Create(backend_, config);
  EXPECT_EQ(session->workspace_mode(), WorkspaceMode::kPerKernel);
  EXPECT_NE(log.text().find("needs a budget"), std::string::npos) << log.text();
}

TEST_F(SessionTest, TotalModeReplanningNeverLeavesOverlappingSlices) {
  ClientConfig config = TestConfig(fake_->address());
  config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
  config.workspace_bytes = 1 << 20;
  config.collect_quiet_ms = 60000;  // only Prepare() closes the collection here
  auto session = Session::Create(backend_, config);
  const Kernel a{SmallProblem(ConvOp::kForward), kBatch, "a"};
  const Kernel b{SmallProblem(ConvOp::kBackwardData), kBatch, "b"};
  const Kernel c{SmallProblem(ConvOp::kBackwardFilter), kBatch, "c"};
  session->Prepare({a, b});
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  ASSERT_EQ(session->Stats().kernels_planned, 2u);
  const client::PlanEntry* first_a = session->PlanOf(a.problem, kBatch);
  ASSERT_NE(first_a, nullptr);
  EXPECT_EQ(first_a->workspace_offset, 0u);

  // A third kernel joins; the new answer lacks timings for the first one, so the new layout
  // starts with the second at offset 0, where the first one's old slice lies.
  fake_->set_missing({a.problem});
  session->Prepare({c});
  ASSERT_TRUE(WaitUntil([&] { return session->PlanOf(c.problem, kBatch) != nullptr; }));
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  EXPECT_EQ(session->PlanOf(a.problem, kBatch), nullptr) << "the stale slice is not kept";
  const client::PlanEntry* plan_b = session->PlanOf(b.problem, kBatch);
  const client::PlanEntry* plan_c = session->PlanOf(c.problem, kBatch);
  ASSERT_NE(plan_b, nullptr);
  ASSERT_NE(plan_c, nullptr);
  EXPECT_EQ(plan_b->workspace_offset, 0u);
  EXPECT_GE(plan_c->workspace_offset, plan_b->workspace_offset + plan_b->workspace_slice);
  EXPECT_EQ(session->Stats().kernels_planned, 2u);
  for (const KernelReport& k : session->Kernels()) {
    if (k.name == "a") {
      EXPECT_EQ(k.state, KernelReport::State::kMissing);
    }
  }

  // Every kernel still computes the right thing: a undivided, b and c in their own slices.
  for (const Kernel& kernel : {a, b, c}) ExpectEqualsUndividedWithoutWorkspace(*session, kernel);
  EXPECT_EQ(session->Stats().planned_calls, 2u);
  EXPECT_EQ(session->Stats().fallback_calls, 1u);
}

// ---- Plan sources that misbehave
// -----------------------------------------------------------------

// An in-process source: answers with `kernels_answered` kernels whatever was asked, or throws.
class MisbehavingSource final : public client::PlanSource {
 public:
  explicit MisbehavingSource(CpuBackend& backend) : backend_(backend) {}
  Result<NetworkPlan> GetPlan(const PlanRequest& request) override {
    ++calls;
    if (throws.load()) throw std::runtime_error("source exploded");
    NetworkPlan plan;
    const size_t answered = short_answers.load() ? 0 : request.kernels.size();
    for (size_t i = 0; i < answered; ++i) {
      const Kernel& kernel = request.kernels[i];
      KernelPlan kp;
      kp.kernel = kernel;
      kp.status = KernelPlanStatus::kPlanned;
      Segment s{kernel.mini_batch, kCpuAlgoDirect, 1.0, 0, {}};
      Result<size_t> ws = backend_.WorkspaceSize(kernel.problem, kernel.mini_batch, s.algo);
      if (ws.ok()) s.workspace_bytes = *ws;
      kp.config.segments = {s};
      kp.config.time_ms = 1.0;
      kp.config.workspace_bytes = s.workspace_bytes;
      plan.kernels.push_back(kp);
    }
    plan.complete = true;
    return plan;
  }
  void Cancel() override {}
  std::string Describe() const override { return "misbehaving"; }

  std::atomic<bool> throws{false};
  std::atomic<bool> short_answers{false};
  std::atomic<int> calls{0};

 private:
  CpuBackend& backend_;
};

TEST_F(SessionTest, ShortAnswersAndThrowingSourcesAreFailuresNotCrashes) {
  auto owned = std::make_unique<MisbehavingSource>(backend_);
  MisbehavingSource* source = owned.get();
  source->short_answers = true;
  auto session = Session::Create(backend_, TestConfig(""), std::move(owned));
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  session->Declare(p, kBatch, 1 << 20);
  ASSERT_TRUE(WaitUntil([&] { return session->Stats().plan_request_failures >= 2; }));
  EXPECT_EQ(session->Stats().kernels_planned, 0u);
  EXPECT_NE(session->Kernels().at(0).reason.find("answered 0 kernels for 1"), std::string::npos)
      << session->Kernels().at(0).reason;

  source->short_answers = false;
  source->throws = true;
  const int calls = source->calls.load();
  ASSERT_TRUE(WaitUntil([&] { return source->calls.load() >= calls + 2; }));
  EXPECT_NE(session->Kernels().at(0).reason.find("source exploded"), std::string::npos)
      << session->Kernels().at(0).reason;

  // The planner thread lived through it: a good answer is still taken.
  source->throws = false;
  ASSERT_TRUE(WaitUntil([&] { return session->Stats().kernels_planned == 1; }));
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.0f);
  ASSERT_TRUE(session->Execute(p, kBatch, operands.Bind(p.op), nullptr, 0, 1.0f, 0.0f).ok());
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  EXPECT_EQ(session->Stats().planned_calls, 1u);
}

// ---- TLS
// -----------------------------------------------------------------------------------------

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class TlsTest : public SessionTest {
 protected:
  void SetUp() override {
    // A self-signed certificate for 127.0.0.1, made now (nothing that expires in the tree).
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
    cert_ = dir_.file("cert.pem");
    const std::string key = dir_.file("key.pem");
    const std::string command =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
        "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '" +
        key + "' -out '" + cert_ + "' >/dev/null 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({ReadFile(key), ReadFile(cert_)});
    fake_ = std::make_unique<FakePlanner>(backend_);
    fake_->set_choice({3, kCpuAlgoIm2colGemm, {}});
    fake_->Start(grpc::SslServerCredentials(options));
  }

  TempDir dir_;
  std::string cert_;
};

TEST_F(TlsTest, PlansComeOverTlsWithTheGivenRoots) {
  ClientConfig config = TestConfig(fake_->address());
  config.tls = true;
  config.ca_file = cert_;
  auto session = Session::Create(backend_, config);
  session->Declare(SmallProblem(ConvOp::kForward), kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  EXPECT_EQ(session->Stats().kernels_planned, 1u);
  EXPECT_EQ(session->Stats().plan_request_failures, 0u);
}

TEST_F(TlsTest, UntrustedOrPlaintextConnectionsGetNoPlans) {
  for (const bool tls : {true, false}) {
    ClientConfig config = TestConfig(fake_->address());
    config.deadline_ms = 2000;
    config.tls = tls;  // TLS with the system roots, which do not know the certificate; plaintext
    auto session = Session::Create(backend_, config);
    session->Declare(SmallProblem(ConvOp::kForward), kBatch, 1 << 20);
    ASSERT_TRUE(WaitUntil([&] { return session->Stats().plan_request_failures >= 1; }))
        << "tls " << tls;
    EXPECT_EQ(session->Stats().kernels_planned, 0u) << "tls " << tls;
  }
  EXPECT_EQ(fake_->calls(), 0) << "no request reached the handler";
}

TEST_F(TlsTest, AnUnreadableCaFileMeansNoServerNotPlaintext) {
  ClientConfig config = TestConfig(fake_->address());
  config.tls = true;
  config.ca_file = dir_.file("missing.pem");
  LogCapture log;
  auto session = Session::Create(backend_, config);
  EXPECT_NE(log.text().find("cannot read root certificates"), std::string::npos) << log.text();
  session->Declare(SmallProblem(ConvOp::kForward), kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForPlans(seconds(5)));
  EXPECT_EQ(session->Kernels().at(0).state, KernelReport::State::kNoServer);
  EXPECT_EQ(fake_->calls(), 0);
}

// ---- Local plan cache
// ----------------------------------------------------------------------------

TEST_F(SessionTest, CachedPlansSurviveARestartWithoutServer) {
  TempDir dir;
  const std::string cache = dir.file("plans.bin");
  const ConvProblem p = SmallProblem(ConvOp::kBackwardFilter, 2);
  const size_t limit = Im2colWorkspace(backend_, p, 3);
  {
    ClientConfig config = TestConfig(fake_->address());
    config.cache_path = cache;
    auto session = Session::Create(backend_, config);
    session->Declare(p, kBatch, limit);
    ASSERT_TRUE(session->WaitForPlans(seconds(20)));
    ASSERT_EQ(session->Stats().kernels_planned, 1u);
  }
  ASSERT_TRUE(std::filesystem::exists(cache));
  fake_->Stop();

  ClientConfig config = TestConfig("127.0.0.1:1");  // the server is gone
  config.cache_path = cache;
  auto session = Session::Create(backend_, config);
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.0f);
  std::vector<char> workspace(limit);
  ASSERT_TRUE(ExecuteOnce(*session, p, operands, workspace));
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.planned_calls, 1u) << "the very first call runs the cached plan";
  EXPECT_EQ(stats.plans_from_cache, 1u);
  EXPECT_EQ(stats.plan_requests, 0u);
  EXPECT_TRUE(session->Kernels().at(0).from_cache);
}

TEST_F(SessionTest, ACachedPlanKeepsWhatTheServerKnewOfTheFramework) {
  TempDir dir;
  const std::string cache = dir.file("plans.bin");
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  const uint64_t limit = 1 << 20;
  fake_->set_known_framework(0.75, 96 << 20);
  {
    ClientConfig config = TestConfig(fake_->address());
    config.cache_path = cache;
    auto session = Session::Create(backend_, config);
    session->Declare(p, kBatch, limit);
    ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  }
  fake_->Stop();
  ClientConfig config = TestConfig("127.0.0.1:1");  // the server is gone
  config.cache_path = cache;
  auto session = Session::Create(backend_, config);
  client::KernelState* kernel = session->FindKernel(p, kBatch, limit);
  ASSERT_NE(kernel, nullptr);
  const client::KernelInfo info = session->Info(*kernel);
  EXPECT_EQ(info.state, client::KernelInfo::State::kPlanned);
  EXPECT_EQ(session->Stats().plans_from_cache, 1u);
  // Else a job whose plans all come from the file measures the framework's own again.
  EXPECT_DOUBLE_EQ(info.framework_ms, 0.75);
  EXPECT_EQ(info.framework_workspace_bytes, uint64_t{96} << 20);
}

TEST_F(SessionTest, CachedNetworkPlanSurvivesARestart) {
  TempDir dir;
  ClientConfig config = TestConfig(fake_->address());
  config.cache_path = dir.file("plans.bin");
  config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
  config.workspace_bytes = 1 << 20;
  const std::vector<Kernel> kernels = {Kernel{SmallProblem(ConvOp::kForward), kBatch, "a"},
                                       Kernel{SmallProblem(ConvOp::kBackwardData), kBatch, "b"}};
  {
    auto session = Session::Create(backend_, config);
    session->Prepare(kernels);
    ASSERT_TRUE(session->WaitForPlans(seconds(20)));
    ASSERT_EQ(session->Stats().kernels_planned, 2u);
  }
  fake_->Stop();
  config.server = "127.0.0.1:1";
  auto session = Session::Create(backend_, config);
  // Declared in the other order: the record is found all the same.
  session->Prepare({kernels[1], kernels[0]});
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  EXPECT_EQ(session->Stats().kernels_planned, 2u);
  EXPECT_EQ(session->Stats().plans_from_cache, 2u);
  EXPECT_EQ(session->Stats().plan_requests, 0u);
}

TEST_F(SessionTest, CorruptCacheIsIgnoredWithAWarning) {
  TempDir dir;
  const std::string cache = dir.file("plans.bin");
  {
    std::ofstream out(cache, std::ios::binary);
    out << "ucudnn-plan-cache 1\n" << std::string(40, '\x7f');
  }
  ClientConfig config = TestConfig("");
  config.cache_path = cache;
  LogCapture log;
  auto session = Session::Create(backend_, config);
  EXPECT_NE(log.text().find("ignoring corrupt plan cache"), std::string::npos) << log.text();
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  Operands operands = MakeOperands(p, kBatch);
  ASSERT_TRUE(session->Execute(p, kBatch, operands.Bind(p.op), nullptr, 0, 1.0f, 0.0f).ok());
  EXPECT_EQ(session->Stats().fallback_calls, 1u);
}

// ---- Off switch
// ----------------------------------------------------------------------------------

TEST_F(SessionTest, DisabledPassesThroughWithoutRequests) {
  ClientConfig config = TestConfig(fake_->address());
  config.enabled = false;
  auto session = Session::Create(backend_, config);
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Undivided(backend_, p, kBatch, operands, 1.0f, 0.0f);
  session->Declare(p, kBatch, 0);
  ASSERT_TRUE(session->Execute(p, kBatch, operands.Bind(p.op), nullptr, 0, 1.0f, 0.0f).ok());
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);
  EXPECT_EQ(session->Stats().passthrough_calls, 1u);
  EXPECT_EQ(session->Stats().kernels, 0u);
  EXPECT_EQ(fake_->calls(), 0);
}

TEST_F(SessionTest, InvalidCallReportsTheBackendError) {
  auto session = Session::Create(backend_, TestConfig(""));
  ConvProblem p = SmallProblem(ConvOp::kForward);
  Operands operands = MakeOperands(p, kBatch);
  ConvOperands bound = operands.Bind(p.op);
  bound.x = nullptr;
  EXPECT_FALSE(session->Execute(p, kBatch, bound, nullptr, 0, 1.0f, 0.0f).ok());
}

}  // namespace
}  // namespace ucudnn::testing
