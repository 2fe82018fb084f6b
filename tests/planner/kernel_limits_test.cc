// Per-kernel workspace limits (Kernel::workspace_limit): in kPerKernel each kernel's DP, baseline,
// framework candidate and INFEASIBLE reason use its own limit; absent, the request's.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "planner/planner_testing.h"
#include "support/problems.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/planner/plan_table.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

constexpr char kTorch[] = "torch-2.11.0+cu130/benchmark";
constexpr uint64_t kMiB = uint64_t{1} << 20;

using test_support::MakeTiming;

// Batch 4: undivided 5.0 ms at 0 or 4.5 ms at 32 MiB; 2 x (size 2, 2.0 ms) at 16 MiB; 4 x (size 1,
// 1.5 ms) at 0.
TimingTable Table() {
  TimingTable t;
  t.entries = {MakeTiming(4, 0, 5.0, 0), MakeTiming(4, 2, 3.0, 32 * kMiB),
               MakeTiming(2, 1, 2.0, 16 * kMiB), MakeTiming(1, 0, 1.5, 0)};
  return t;
}

// Kernels of the same problem at mini-batch 4, with the given limits (nullopt: the request's).
PlanRequest Request(WorkspaceMode mode, uint64_t workspace,
                    const std::vector<std::optional<uint64_t>>& limits) {
  PlanRequest request;
  request.workspace_mode = mode;
  request.workspace_bytes = workspace;
  request.policy = BatchPolicy::kAll;
  for (size_t i = 0; i < limits.size(); ++i) {
    Kernel kernel;
    kernel.problem = test_support::SquareConv(ConvOp::kForward, 8, 8, 8);
    kernel.mini_batch = 4;
    kernel.name = "k" + std::to_string(i);
    kernel.workspace_limit = limits[i];
    request.kernels.push_back(kernel);
  }
  return request;
}

NetworkPlan Plan(const PlanRequest& request, const std::vector<const TimingTable*>& tables) {
  Result<NetworkPlan> plan = PlanNetwork(request, tables);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : NetworkPlan{};
}

TEST(KernelLimitsTest, SameProblemDifferentLimitsGetDifferentConfigurations) {
  const TimingTable table = Table();
  const PlanRequest request =
      Request(WorkspaceMode::kPerKernel, 64 * kMiB, {0, 16 * kMiB, std::nullopt});
  const NetworkPlan plan = Plan(request, {&table, &table, &table});
  ASSERT_EQ(plan.kernels.size(), 3u);
  for (const KernelPlan& kp : plan.kernels) ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned);
  // 0 bytes: only algorithm 0 fits, undivided (5.0 ms) faster than 4 x (size 1) (6.0 ms).
  EXPECT_EQ(plan.kernels[0].kernel.workspace_limit, std::optional<uint64_t>(0));
  EXPECT_EQ(plan.kernels[0].config.workspace_bytes, 0u);
  EXPECT_DOUBLE_EQ(plan.kernels[0].config.time_ms, 5.0);
  EXPECT_DOUBLE_EQ(plan.kernels[0].undivided->time_ms, 5.0);
  // 16 MiB: two segments of size 2.
  EXPECT_DOUBLE_EQ(plan.kernels[1].config.time_ms, 4.0);
  EXPECT_EQ(plan.kernels[1].config.workspace_bytes, 16 * kMiB);
  EXPECT_DOUBLE_EQ(plan.kernels[1].undivided->time_ms, 5.0);
  // Absent: the request's 64 MiB, where the 32 MiB undivided algorithm wins.
  EXPECT_DOUBLE_EQ(plan.kernels[2].config.time_ms, 3.0);
  EXPECT_DOUBLE_EQ(plan.kernels[2].undivided->time_ms, 3.0);
  EXPECT_NE(plan.kernels[0].config, plan.kernels[1].config);
  EXPECT_NE(plan.kernels[1].config, plan.kernels[2].config);
  EXPECT_DOUBLE_EQ(plan.total_time_ms, 12.0);
  EXPECT_EQ(plan.total_workspace_bytes, 48 * kMiB);
  // The table says how many kernels have a limit of their own.
  EXPECT_NE(FormatPlanTable(plan).find("64 MiB per kernel (2 with a limit of their own)"),
            std::string::npos)
      << FormatPlanTable(plan);
}

TEST(KernelLimitsTest, AbsentLimitsPlanAsBeforeAndLimitsOnlyApplyPerKernel) {
  const TimingTable table = Table();
  const NetworkPlan absent =
      Plan(Request(WorkspaceMode::kPerKernel, 16 * kMiB, {std::nullopt}), {&table});
  const NetworkPlan same =
      Plan(Request(WorkspaceMode::kPerKernel, 64 * kMiB, {16 * kMiB}), {&table});
  ASSERT_EQ(absent.kernels.size(), 1u);
  ASSERT_EQ(same.kernels.size(), 1u);
  EXPECT_EQ(absent.kernels[0].config, same.kernels[0].config);
  EXPECT_EQ(absent.kernels[0].undivided, same.kernels[0].undivided);
  // A total mode plans with the request's budget (the server refuses per-kernel limits there).
  const NetworkPlan shared = Plan(Request(WorkspaceMode::kTotalShared, 64 * kMiB, {0}), {&table});
  ASSERT_EQ(shared.kernels.size(), 1u);
  EXPECT_DOUBLE_EQ(shared.kernels[0].config.time_ms, 3.0);
}

TEST(KernelLimitsTest, InfeasibleReasonAndFrameworkUseTheKernelsLimit) {
  TimingTable table;
  table.entries = {MakeTiming(4, 1, 4.0, 8 * kMiB)};
  Timing framework = MakeTiming(4, kFrameworkAlgo, 3.0, 4 * kMiB);
  framework.engine_config = kTorch;
  table.entries.push_back(framework);
  PlanRequest request = Request(WorkspaceMode::kPerKernel, 64 * kMiB, {1 * kMiB, 4 * kMiB});
  request.framework = kTorch;
  const NetworkPlan plan = Plan(request, {&table, &table});
  ASSERT_EQ(plan.kernels.size(), 2u);
  // 1 MiB: neither fits; the reason is the DP's at that limit.
  EXPECT_EQ(plan.kernels[0].status, KernelPlanStatus::kInfeasible);
  Result<KernelConfig> dp = SolveKernelDp(table, 4, BatchPolicy::kAll, 1 * kMiB);
  ASSERT_FALSE(dp.ok());
  EXPECT_EQ(plan.kernels[0].reason, dp.status().message());
  EXPECT_FALSE(plan.kernels[0].undivided.has_value());
  // 4 MiB: the framework fits, ucudnn's 8 MiB algorithm does not.
  ASSERT_EQ(plan.kernels[1].status, KernelPlanStatus::kPlanned);
  ASSERT_EQ(plan.kernels[1].config.segments.size(), 1u);
  EXPECT_TRUE(IsFramework(plan.kernels[1].config.segments[0]));
  EXPECT_FALSE(plan.complete);
}

TEST(KernelLimitsTest, RandomLimitsNeverExceededNeverSlowerThanUndivided) {
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<int> level(0, 8);
  for (int round = 0; round < 20; ++round) {
    const TimingTable table = testing_planner::RandomTable(rng, 8, 3);
    std::vector<std::optional<uint64_t>> limits;
    for (int i = 0; i < 4; ++i) limits.push_back(static_cast<uint64_t>(level(rng)) * 400);
    PlanRequest request = Request(WorkspaceMode::kPerKernel, 1 << 20, limits);
    for (Kernel& k : request.kernels) k.mini_batch = 8;
    const NetworkPlan plan = Plan(request, {&table, &table, &table, &table});
    ASSERT_EQ(plan.kernels.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      SCOPED_TRACE("round " + std::to_string(round) + " kernel " + std::to_string(i));
      const KernelPlan& kp = plan.kernels[i];
      const uint64_t limit = *limits[i];
      Result<KernelConfig> dp = SolveKernelDp(table, 8, BatchPolicy::kAll, limit);
      Result<Segment> base = FastestUndivided(table, 8, limit);
      ASSERT_EQ(kp.undivided.has_value(), base.ok());
      if (base.ok()) {
        EXPECT_EQ(*kp.undivided, *base);
      }
      if (!dp.ok()) {
        EXPECT_EQ(kp.status, KernelPlanStatus::kInfeasible);
        continue;
      }
      ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned);
      EXPECT_LE(kp.config.workspace_bytes, limit);
      EXPECT_EQ(testing_planner::CheckConfig(kp.config, table, 8, BatchPolicy::kAll, limit), "");
      EXPECT_NEAR(kp.config.time_ms, dp->time_ms, 1e-9);
      if (base.ok()) {
        EXPECT_LE(kp.config.time_ms, base->time_ms);
      }
    }
  }
}

}  // namespace
}  // namespace ucudnn
