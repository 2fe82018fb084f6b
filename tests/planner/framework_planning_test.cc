// The framework's own convolution as a planning candidate (kFrameworkAlgo): the whole kernel
// only, in every workspace mode; within kFrameworkMargin a tie, which goes to ucudnn where the
// framework benchmarks in the job ("/benchmark" identities) and to the framework otherwise.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "support/problems.h"
#include "ucudnn/core/algorithm_names.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/timing.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/planner/plan_table.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

constexpr char kTorch[] = "torch-2.11.0+cu130/benchmark";
constexpr char kTorchHeuristic[] = "torch-2.11.0+cu130/heuristic";
constexpr uint64_t kMiB = uint64_t{1} << 20;

Timing Legacy(int64_t b, int algo, double ms, uint64_t ws) {
  return test_support::MakeTiming(b, algo, ms, ws);
}

Timing Framework(int64_t b, double ms, uint64_t ws, const std::string& identity = kTorch) {
  Timing t = Legacy(b, kFrameworkAlgo, ms, ws);
  t.engine_config = identity;
  return t;
}

// Batch 4: ucudnn's best is 2 x (size 2, 2.0 ms) = 4.0 ms within 16 MiB; undivided 5.0 ms.
TimingTable Table(double framework_ms, uint64_t framework_ws = 8 * kMiB,
                  int64_t framework_batch = 4, const std::string& identity = kTorch) {
  TimingTable t;
  t.entries = {Legacy(4, 0, 5.0, 0), Legacy(2, 1, 2.0, 16 * kMiB), Legacy(1, 0, 1.5, 0),
               Framework(framework_batch, framework_ms, framework_ws, identity)};
  return t;
}

PlanRequest Request(WorkspaceMode mode, uint64_t workspace = 64 * kMiB, int kernels = 1,
                    const std::string& identity = kTorch) {
  PlanRequest request;
  request.workspace_mode = mode;
  request.workspace_bytes = workspace;
  request.framework = identity;
  for (int i = 0; i < kernels; ++i) {
    Kernel kernel;
    kernel.problem = test_support::SquareConv(ConvOp::kForward, 8, 8, 8);
    kernel.mini_batch = 4;
    kernel.name = "k" + std::to_string(i);
    request.kernels.push_back(kernel);
  }
  return request;
}

KernelPlan PlanOne(const PlanRequest& request, const TimingTable& table) {
  Result<NetworkPlan> plan = PlanNetwork(request, {&table});
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? plan->kernels.at(0) : KernelPlan{};
}

bool ChoseFramework(const KernelPlan& kp) {
  return kp.status == KernelPlanStatus::kPlanned && kp.config.segments.size() == 1 &&
         IsFramework(kp.config.segments[0]);
}

const WorkspaceMode kModes[] = {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalShared,
                                WorkspaceMode::kTotalSum};

TEST(FrameworkPlanningTest, FasterFrameworkIsChosenWithItsMeasuredTimeInEveryMode) {
  for (WorkspaceMode mode : kModes) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const KernelPlan kp = PlanOne(Request(mode), Table(3.0));
    ASSERT_TRUE(ChoseFramework(kp));
    EXPECT_EQ(kp.config.segments[0].micro_batch, 4);
    EXPECT_EQ(kp.config.segments[0].engine_config, kTorch);
    EXPECT_DOUBLE_EQ(kp.config.time_ms, 3.0);  // measured, not less the margin
    EXPECT_EQ(kp.config.workspace_bytes, 8 * kMiB);
    EXPECT_DOUBLE_EQ(kp.framework_ms, 3.0);
    ASSERT_TRUE(kp.undivided.has_value());
    EXPECT_FALSE(IsFramework(*kp.undivided));  // the baseline stays ucudnn's own
  }
}

TEST(FrameworkPlanningTest, UcudnnFasterByMoreThanTheMarginWins) {
  // 4.0 < 4.2 * 0.97 = 4.074.
  for (WorkspaceMode mode : kModes) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const KernelPlan kp = PlanOne(Request(mode), Table(4.2));
    ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned);
    EXPECT_FALSE(ChoseFramework(kp));
    EXPECT_DOUBLE_EQ(kp.config.time_ms, 4.0);
    EXPECT_DOUBLE_EQ(kp.framework_ms, 4.2);
  }
}

TEST(FrameworkPlanningTest, TiesGoToTheFrameworkThatDoesNotBenchmark) {
  // A heuristic framework's own costs the job nothing more: 4.0 >= 4.1 * 0.97 = 3.977.
  for (WorkspaceMode mode : kModes) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const KernelPlan kp = PlanOne(Request(mode, 64 * kMiB, 1, kTorchHeuristic),
                                  Table(4.1, 8 * kMiB, 4, kTorchHeuristic));
    ASSERT_TRUE(ChoseFramework(kp));
    EXPECT_DOUBLE_EQ(kp.config.time_ms, 4.1);
  }
  EXPECT_TRUE(BeatsFramework(4.0, 4.2));
  EXPECT_FALSE(BeatsFramework(4.0, 4.1));
}

TEST(FrameworkPlanningTest, TiesGoToUcudnnWhereTheFrameworkBenchmarksInTheJob) {
  // ucudnn's 4.0 ms (16 MiB) against the framework's 4.1 (ucudnn faster by less than the
  // margin) and 3.9 (the framework faster by less: 3.9 > 4.0 * 0.97 = 3.88), the framework's
  // own workspace as large: ucudnn's, which spares the job the framework's benchmark. At 3.85
  // the framework is faster by more than the margin: kept.
  for (WorkspaceMode mode : kModes) {
    SCOPED_TRACE(std::string(ToString(mode)));
    for (double framework_ms : {4.1, 3.9}) {
      const KernelPlan kp = PlanOne(Request(mode), Table(framework_ms, 16 * kMiB));
      ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned);
      EXPECT_FALSE(ChoseFramework(kp)) << framework_ms;
      EXPECT_DOUBLE_EQ(kp.config.time_ms, 4.0);
      EXPECT_DOUBLE_EQ(kp.framework_ms, framework_ms);
    }
    const KernelPlan kept = PlanOne(Request(mode), Table(3.85, 16 * kMiB));
    ASSERT_TRUE(ChoseFramework(kept));
    EXPECT_DOUBLE_EQ(kept.config.time_ms, 3.85);
  }
  EXPECT_TRUE(BeatsFramework(4.0, 3.9, true));
  EXPECT_FALSE(BeatsFramework(4.0, 3.85, true));
}

TEST(FrameworkPlanningTest, ATieTakesNoMoreWorkspaceThanTheFrameworksOwn) {
  // The framework's 4.1 ms needs 8 MiB; ucudnn's 4.0 needs 16 (no outright win: 4.0 >= 4.1 *
  // 0.97), and within 8 MiB ucudnn's best is 5.0: no tie either. The framework's own, in every
  // mode; with 16 MiB free for it, ucudnn's (the test above).
  for (WorkspaceMode mode : kModes) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const KernelPlan kp = PlanOne(Request(mode), Table(4.1, 8 * kMiB));
    ASSERT_TRUE(ChoseFramework(kp));
    EXPECT_EQ(kp.config.workspace_bytes, 8 * kMiB);
  }
  // A tie within the framework's workspace goes to ucudnn's configuration there: 4.0 ms at
  // 16 MiB, 4.05 ms at 4 MiB (size 2, algo 2) against the framework's 4.1 ms at 8 MiB.
  TimingTable table = Table(4.1, 8 * kMiB);
  table.entries.push_back(Legacy(2, 2, 2.025, 4 * kMiB));
  for (WorkspaceMode mode : kModes) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const KernelPlan kp = PlanOne(Request(mode), table);
    ASSERT_FALSE(ChoseFramework(kp));
    EXPECT_DOUBLE_EQ(kp.config.time_ms, 4.05);
    EXPECT_EQ(kp.config.workspace_bytes, 4 * kMiB);
  }
  // An outright win keeps its workspace: ucudnn's 4.0 at 16 MiB against 4.2 at 8 MiB.
  for (WorkspaceMode mode : kModes) {
    const KernelPlan kp = PlanOne(Request(mode), Table(4.2, 8 * kMiB));
    EXPECT_EQ(kp.config.workspace_bytes, 16 * kMiB) << ToString(mode);
  }
}

TEST(FrameworkPlanningTest, OnlyABenchmarkModeBenchmarksInTheJob) {
  EXPECT_TRUE(FrameworkBenchmarks("torch-2.11.0+cu130/benchmark"));
  EXPECT_TRUE(FrameworkBenchmarks("torch-2.11.0+cu130/benchmark-deterministic"));
  EXPECT_FALSE(FrameworkBenchmarks("torch-2.11.0+cu130/heuristic"));
  EXPECT_FALSE(FrameworkBenchmarks("torch-2.11.0+cu130/heuristic-deterministic"));
  EXPECT_FALSE(FrameworkBenchmarks("benchmark"));          // no mode: the name is not one
  EXPECT_FALSE(FrameworkBenchmarks("mine/benchmark/v2"));  // the mode is the last part
  EXPECT_FALSE(FrameworkBenchmarks(""));
}

TEST(FrameworkPlanningTest, FrameworkTimingAtAnotherMicroBatchIsIgnored) {
  for (WorkspaceMode mode : kModes) {
    SCOPED_TRACE(std::string(ToString(mode)));
    // At size 2 the framework's 0.5 ms would make 2 x 0.5 = 1.0 ms if it were combined.
    const KernelPlan kp = PlanOne(Request(mode), Table(0.5, 0, 2));
    ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned);
    EXPECT_DOUBLE_EQ(kp.config.time_ms, 4.0);
    for (const Segment& s : kp.config.segments) EXPECT_FALSE(IsFramework(s));
    EXPECT_EQ(kp.framework_ms, 0);
  }
}

TEST(FrameworkPlanningTest, FrameworkOverTheWorkspaceLimitIsNotChosen) {
  for (WorkspaceMode mode : kModes) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const KernelPlan kp = PlanOne(Request(mode, 32 * kMiB), Table(1.0, 40 * kMiB));
    ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned);
    EXPECT_FALSE(ChoseFramework(kp));
    EXPECT_DOUBLE_EQ(kp.framework_ms, 1.0);  // known, though it does not fit
    EXPECT_EQ(kp.framework_workspace_bytes, 40 * kMiB) << "what a caller needs to fit it";
  }
}

TEST(FrameworkPlanningTest, OnlyTheRequestsIdentityIsACandidate) {
  TimingTable table = Table(9.0);
  table.entries.push_back(Framework(4, 1.0, 0, "jax-0.5"));
  const KernelPlan torch = PlanOne(Request(WorkspaceMode::kPerKernel), table);
  EXPECT_FALSE(ChoseFramework(torch));
  EXPECT_DOUBLE_EQ(torch.framework_ms, 9.0);
  PlanRequest none = Request(WorkspaceMode::kPerKernel);
  none.framework.clear();
  const KernelPlan plain = PlanOne(none, Table(1.0));
  EXPECT_FALSE(ChoseFramework(plain));
  EXPECT_EQ(plain.framework_ms, 0);
}

TEST(FrameworkPlanningTest, FrameworkAloneMakesAPlanWhereNothingOfUcudnnFits) {
  TimingTable table;
  table.entries = {Legacy(4, 1, 2.0, 100 * kMiB), Framework(4, 6.0, 0)};
  const KernelPlan kp = PlanOne(Request(WorkspaceMode::kPerKernel, 64 * kMiB), table);
  ASSERT_TRUE(ChoseFramework(kp)) << kp.reason;
  EXPECT_TRUE(kp.reason.empty());
}

TEST(FrameworkPlanningTest, TotalSumIlpChoosesTheFrameworkWhereTheBudgetNeedsIt) {
  // Two kernels, budget 20 MiB: ucudnn's 4.0 ms needs 16 MiB each, so only one kernel can have it;
  // the framework (4.5 ms at 2 MiB) beats ucudnn's no-workspace 5.0 ms for the other.
  const TimingTable table = Table(4.5, 2 * kMiB);
  const PlanRequest request = Request(WorkspaceMode::kTotalSum, 20 * kMiB, 2);
  Result<NetworkPlan> plan = PlanNetwork(request, {&table, &table});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->complete);
  int framework = 0;
  for (const KernelPlan& kp : plan->kernels) framework += ChoseFramework(kp) ? 1 : 0;
  EXPECT_EQ(framework, 1);
  EXPECT_DOUBLE_EQ(plan->total_time_ms, 4.0 + 4.5);
  EXPECT_EQ(plan->total_workspace_bytes, 18 * kMiB);
}

TEST(FrameworkPlanningTest, DpAndFrontsNeverUseFrameworkTimings) {
  TimingTable table;
  table.entries = {Legacy(4, 0, 5.0, 0), Framework(4, 1.0, 0), Framework(2, 0.1, 0)};
  Result<KernelConfig> dp = SolveKernelDp(table, 4, BatchPolicy::kPowerOfTwo, 0);
  ASSERT_TRUE(dp.ok());
  EXPECT_DOUBLE_EQ(dp->time_ms, 5.0);
  Result<Segment> undivided = FastestUndivided(table, 4, 0);
  ASSERT_TRUE(undivided.ok());
  EXPECT_EQ(undivided->algo, 0);
  for (const KernelConfig& point : ParetoFront(table, 4, BatchPolicy::kPowerOfTwo)) {
    for (const Segment& s : point.segments) EXPECT_FALSE(IsFramework(s));
  }
}

TEST(FrameworkPlanningTest, IdentityValidationAndNames) {
  EXPECT_TRUE(CheckFrameworkIdentity("framework", kTorch).ok());
  EXPECT_FALSE(CheckFrameworkIdentity("framework", "").ok());
  EXPECT_FALSE(CheckFrameworkIdentity("framework", std::string(129, 'a')).ok());
  EXPECT_TRUE(CheckFrameworkIdentity("framework", std::string(128, 'a')).ok());
  const Status bad = CheckFrameworkIdentity("framework", "torch\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("framework"), std::string::npos);
  EXPECT_TRUE(CheckAlgorithm({kFrameworkAlgo, kTorch}).ok());
  EXPECT_FALSE(CheckAlgorithm({kFrameworkAlgo, ""}).ok());
  EXPECT_FALSE(CheckAlgorithm(-3).ok());
  const Algorithm framework(kFrameworkAlgo, kTorch);
  EXPECT_TRUE(framework.is_framework());
  EXPECT_FALSE(framework.is_engine());
  EXPECT_EQ(AlgorithmText(framework), std::string("framework(") + kTorch + ")");
  EXPECT_TRUE(AlgorithmLess(Algorithm(kEngineAlgo, "eng1"), framework));
  EXPECT_FALSE(AlgorithmLess(framework, Algorithm(3)));
}

TEST(FrameworkPlanningTest, TablesNameTheFramework) {
  const KernelPlan kp = PlanOne(Request(WorkspaceMode::kPerKernel), Table(3.0));
  ASSERT_TRUE(ChoseFramework(kp));
  EXPECT_EQ(FormatSegments(kp.config.segments, ConvOp::kForward, AlgorithmNamerFor("cpu")),
            std::string("framework ") + kTorch);
  NetworkPlan plan;
  plan.kernels = {kp};
  EXPECT_NE(
      FormatPlanTable(plan, AlgorithmNamerFor("cpu")).find(std::string("framework ") + kTorch),
      std::string::npos);
  EXPECT_EQ(AlgorithmName("cpu", ConvOp::kForward, AlgorithmOf(kp.config.segments[0])),
            std::string("framework(") + kTorch + ")");
}

TEST(FrameworkPlanningTest, TimingFilesRoundTripFrameworkTimings) {
  TimingTables tables;
  ProblemTimings& p = tables[CanonicalKey(test_support::SquareConv(ConvOp::kForward, 8, 8, 8))];
  p.problem = test_support::SquareConv(ConvOp::kForward, 8, 8, 8);
  p.layer = "conv1";
  p.mini_batch = 4;
  p.table.entries = {Legacy(4, 0, 5.0, 0), Framework(4, 3.0, 8, "torch 2.11, \"eager\"")};
  Result<std::string> text = WriteTimingCsv(tables);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  Result<TimingTables> back = ParseTimingCsv(*text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, tables);
}

}  // namespace
}  // namespace ucudnn
