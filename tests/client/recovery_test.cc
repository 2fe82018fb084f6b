// A plan that fails while running must not fail the training step: on the CPU backend, with a
// backend that declines one algorithm at run time only (as cuDNN can answer NOT_SUPPORTED for a
// planned algorithm its workspace query accepted), the call still gives the undivided result for
// every op, whether the failure comes before any output was written, with beta = 0, or after
// micro-batches accumulated with beta != 0; the plan is dropped, logged once and counted.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

#include "fake_planner.h"
#include "session.h"
#include "test_util.h"
#include "ucudnn/backends/cpu_backend.h"

namespace ucudnn::testing {
namespace {

using client::Session;
using std::chrono::seconds;

constexpr int64_t kBatch = 7;  // the fake plans 3 + 3 + 1

// The CPU backend, except that Run() of `algo` at micro-batch `batch` fails once armed, with
// nothing written (as cuDNN reports NOT_SUPPORTED before launching anything). Workspace queries
// keep accepting it, so the plan passes verification.
class DecliningBackend final : public ConvBackend {
 public:
  void Decline(int algo, int64_t batch) {
    algo_ = algo;
    batch_ = batch;
  }
  int declined() const { return declined_; }

  const DeviceFingerprint& fingerprint() const override { return cpu_.fingerprint(); }
  std::vector<AlgorithmInfo> Algorithms(ConvOp op) const override { return cpu_.Algorithms(op); }
  Result<size_t> WorkspaceSize(const ConvProblem& problem, int64_t batch,
                               const Algorithm& algo) override {
    return cpu_.WorkspaceSize(problem, batch, algo);
  }
  Status Run(const ConvProblem& problem, int64_t batch, const Algorithm& algo,
             const ConvOperands& operands, void* workspace, size_t workspace_bytes, float alpha,
             float beta) override {
    if (!algo.is_engine() && algo.id == algo_ && batch == batch_) {
      ++declined_;
      return Unsupported("declining backend: algo " + AlgorithmText(algo) + " at micro-batch " +
                         std::to_string(batch));
    }
    return cpu_.Run(problem, batch, algo, operands, workspace, workspace_bytes, alpha, beta);
  }
  Status Synchronize() override { return Status::Ok(); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override {
    return cpu_.Allocate(bytes);
  }
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return cpu_.CopyToDevice(dst, src, bytes);
  }
  Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return cpu_.CopyToHost(dst, src, bytes);
  }
  Result<std::vector<double>> TimeRuns(const ConvProblem& problem, int64_t batch,
                                       const Algorithm& algo, const ConvOperands& operands,
                                       void* workspace, size_t workspace_bytes, int warmup,
                                       int runs) override {
    return cpu_.TimeRuns(problem, batch, algo, operands, workspace, workspace_bytes, warmup, runs);
  }

 private:
  CpuBackend cpu_;
  int algo_ = -1;
  int64_t batch_ = -1;
  int declined_ = 0;
};

std::vector<float> Reference(CpuBackend& cpu, const ConvProblem& p, Operands operands, float alpha,
                             float beta) {
  Status status = cpu.Run(p, kBatch, kCpuAlgoDirect, operands.Bind(p.op), nullptr, 0, alpha, beta);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return operands.out;
}

// A session over `backend` whose fake planner splits the batch into segments of 3 with
// im2col_gemm, its plan for `p` received, and a workspace of the plan's size.
struct PlannedSession {
  PlannedSession(ConvBackend& backend, const ConvProblem& p) : fake(cpu) {
    fake.set_choice({3, kCpuAlgoIm2colGemm, {}});
    fake.Start();
    session = Session::Create(backend, FakePlannerConfig(fake.address()));
    Result<size_t> limit = cpu.WorkspaceSize(p, 3, kCpuAlgoIm2colGemm);
    EXPECT_TRUE(limit.ok());
    if (!limit.ok()) return;
    workspace.resize(*limit);
    session->Declare(p, kBatch, *limit);
    planned = session->WaitForPlans(seconds(20));
  }
  CpuBackend cpu;  // the reference, and the fake's workspace sizes
  FakePlanner fake;
  std::unique_ptr<Session> session;
  std::vector<char> workspace;
  bool planned = false;
};

// (op, micro-batch that fails: 3 = the first segment, 1 = the last; beta, first call or later)
using Case = std::tuple<ConvOp, int64_t, float, bool>;

class PlanFailureTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanFailureTest, CallGivesTheUndividedResultAndThePlanIsDropped) {
  const auto [op, failing_batch, beta, on_first_call] = GetParam();
  const ConvProblem p = SmallProblem(op);
  DecliningBackend backend;
  PlannedSession planned(backend, p);
  ASSERT_TRUE(planned.planned);
  CpuBackend& cpu = planned.cpu;
  Session* session = planned.session.get();
  std::vector<char>& workspace = planned.workspace;
  ASSERT_EQ(session->Stats().kernels_planned, 1u);

  if (!on_first_call) {
    // A good first run (the checked one); the failure comes on the unchecked path.
    Operands warm = MakeOperands(p, kBatch, 5);
    ASSERT_TRUE(
        session->Execute(p, kBatch, warm.Bind(op), workspace.data(), workspace.size(), 1.0f, beta)
            .ok());
    ASSERT_EQ(session->Stats().planned_calls, 1u);
  }
  backend.Decline(kCpuAlgoIm2colGemm, failing_batch);

  LogCapture log;
  Operands operands = MakeOperands(p, kBatch);
  const std::vector<float> expected = Reference(cpu, p, operands, 1.5f, beta);
  Status status = session->Execute(p, kBatch, operands.Bind(op), workspace.data(), workspace.size(),
                                   1.5f, beta);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(backend.declined(), 1);
  EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6);

  // The plan is dropped: the next call runs undivided at once, and the failure is logged once.
  Operands again = MakeOperands(p, kBatch, 9);
  const std::vector<float> expected_again = Reference(cpu, p, again, 1.0f, beta);
  ASSERT_TRUE(
      session->Execute(p, kBatch, again.Bind(op), workspace.data(), workspace.size(), 1.0f, beta)
          .ok());
  EXPECT_LT(NormalizedL2(again.out, expected_again), 1e-6);
  EXPECT_EQ(backend.declined(), 1);

  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.failed_plans, 1u);
  EXPECT_EQ(stats.recovered_calls, 1u);
  EXPECT_EQ(stats.fallback_calls, 2u);
  EXPECT_EQ(stats.planned_calls, on_first_call ? 0u : 1u);
  const std::string text = log.text();
  const size_t first = text.find("failed after");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("failed after", first + 1), std::string::npos) << "logged once: " << text;
  const std::vector<KernelReport> kernels = session->Kernels();
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].state, KernelReport::State::kPlanFailed);
  EXPECT_NE(kernels[0].reason.find("declining backend"), std::string::npos) << kernels[0].reason;
}

INSTANTIATE_TEST_SUITE_P(AllOps, PlanFailureTest,
                         ::testing::Combine(::testing::Values(ConvOp::kForward,
                                                              ConvOp::kBackwardData,
                                                              ConvOp::kBackwardFilter),
                                            ::testing::Values(int64_t{3}, int64_t{1}),
                                            ::testing::Values(0.0f, 0.5f), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const ConvOp op = std::get<0>(info.param);
                           const bool first_segment = std::get<1>(info.param) == 3;
                           const bool beta0 = std::get<2>(info.param) == 0.0f;
                           const bool first_call = std::get<3>(info.param);
                           return std::string(ToString(op)) +
                                  (first_segment ? "_first_segment" : "_last_segment") +
                                  (beta0 ? "_beta0" : "_beta_half") +
                                  (first_call ? "_first_call" : "_later_call");
                         });

TEST(PlanFailureRemainderTest, EveryAlgorithmDecliningFailsTheCallWithTheBackendsError) {
  // Nothing can finish the rest of the batch: the error comes back, nothing throws.
  class AlwaysDeclining final : public CpuBackend {
   public:
    Status Run(const ConvProblem& problem, int64_t batch, const Algorithm& algo,
               const ConvOperands& operands, void* workspace, size_t workspace_bytes, float alpha,
               float beta) override {
      if (batch == 1) return Unsupported("always declining");
      return CpuBackend::Run(problem, batch, algo, operands, workspace, workspace_bytes, alpha,
                             beta);
    }
  };
  const ConvProblem p = SmallProblem(ConvOp::kBackwardFilter);
  AlwaysDeclining backend;
  PlannedSession planned(backend, p);
  ASSERT_TRUE(planned.planned);
  Session* session = planned.session.get();
  std::vector<char>& workspace = planned.workspace;
  Operands operands = MakeOperands(p, kBatch);
  // Segments of 3 and 3 run; the last one (1 sample) fails, and so does every remainder run.
  Status status = session->Execute(p, kBatch, operands.Bind(p.op), workspace.data(),
                                   workspace.size(), 1.0f, 0.5f);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.ToString();
  EXPECT_EQ(session->Stats().failed_plans, 1u);
  EXPECT_EQ(session->Stats().recovered_calls, 0u);
}

// A plan naming a graph-API engine configuration that this job's library cannot build (another
// cuDNN release's identity, a configuration its heuristics no longer offer): the backend below
// answers the workspace of such a configuration (as the planner's measurement said) but declines
// to run it, as the cuDNN backend does when the execution plan cannot be built. The step still
// gives the undivided result, and the plan is dropped.
class EngineDecliningBackend final : public CpuBackend {
 public:
  Result<size_t> WorkspaceSize(const ConvProblem& problem, int64_t batch,
                               const Algorithm& algo) override {
    if (algo.is_engine()) return CpuBackend::WorkspaceSize(problem, batch, kCpuAlgoIm2colGemm);
    return CpuBackend::WorkspaceSize(problem, batch, algo);
  }
  Status Run(const ConvProblem& problem, int64_t batch, const Algorithm& algo,
             const ConvOperands& operands, void* workspace, size_t workspace_bytes, float alpha,
             float beta) override {
    if (algo.is_engine()) {
      ++declined;
      return Unsupported("cannot build engine configuration " + AlgorithmText(algo) +
                         " with this cuDNN");
    }
    return CpuBackend::Run(problem, batch, algo, operands, workspace, workspace_bytes, alpha, beta);
  }
  int declined = 0;
};

TEST(EngineFallbackTest, AConfigurationTheLibraryCannotBuildFallsBackToUndivided) {
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    const ConvProblem p = SmallProblem(op);
    EngineDecliningBackend backend;
    FakePlanner fake(backend);
    fake.set_choice({3, kEngineAlgo, "eng58{k25=1}"});
    fake.Start();
    std::unique_ptr<Session> session = Session::Create(backend, FakePlannerConfig(fake.address()));
    CpuBackend cpu;
    Result<size_t> limit = cpu.WorkspaceSize(p, 3, kCpuAlgoIm2colGemm);
    ASSERT_TRUE(limit.ok());
    std::vector<char> workspace(*limit);
    session->Declare(p, kBatch, *limit);
    ASSERT_TRUE(session->WaitForPlans(seconds(20)));
    ASSERT_EQ(session->Stats().kernels_planned, 1u);

    Operands operands = MakeOperands(p, kBatch);
    const std::vector<float> expected = Reference(cpu, p, operands, 1.0f, 0.0f);
    Status status = session->Execute(p, kBatch, operands.Bind(op), workspace.data(),
                                     workspace.size(), 1.0f, 0.0f);
    ASSERT_TRUE(status.ok()) << ToString(op) << ": " << status.ToString();
    EXPECT_LT(NormalizedL2(operands.out, expected), 1e-6) << ToString(op);
    EXPECT_EQ(backend.declined, 1) << ToString(op);
    const ClientStats stats = session->Stats();
    EXPECT_EQ(stats.failed_plans, 1u) << ToString(op);
    EXPECT_EQ(stats.planned_calls, 0u) << ToString(op);
    const std::vector<KernelReport> kernels = session->Kernels();
    ASSERT_EQ(kernels.size(), 1u);
    EXPECT_EQ(kernels[0].state, KernelReport::State::kPlanFailed);
    EXPECT_NE(kernels[0].reason.find("eng58{k25=1}"), std::string::npos) << kernels[0].reason;
  }
}

}  // namespace
}  // namespace ucudnn::testing
