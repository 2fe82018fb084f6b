// PlanNetwork: the three workspace modes, missing and infeasible kernels, baselines, totals,
// request validation and determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "planner/planner_testing.h"
#include "support/problems.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

using testing_planner::PlanText;
using testing_planner::RandomTable;

ConvProblem Problem(int64_t c, int64_t k, ConvOp op = ConvOp::kForward) {
  return test_support::SquareConv(op, c, 14, k);
}

// `count` kernels with distinct problems, mini-batch 8, and a random table each.
struct Network {
  PlanRequest request;
  std::vector<TimingTable> tables;
  std::vector<const TimingTable*> pointers() const {
    std::vector<const TimingTable*> out;
    for (const TimingTable& t : tables) out.push_back(&t);
    return out;
  }
};

// Kernels k0..k<count-1> of different shapes at mini-batch 8, each with an empty table.
Network KernelsOfMiniBatch8(int count) {
  Network net;
  for (int i = 0; i < count; ++i) {
    Kernel kernel;
    kernel.problem = Problem(16, 16 + i);
    kernel.mini_batch = 8;
    kernel.name = "k" + std::to_string(i);
    net.request.kernels.push_back(kernel);
  }
  net.tables.resize(count);
  return net;
}

Network RandomNetwork(std::mt19937_64& rng, int count, int64_t mini_batch = 8) {
  Network net;
  for (int i = 0; i < count; ++i) {
    Kernel kernel;
    kernel.problem = Problem(16 + i, 32);
    kernel.mini_batch = mini_batch;
    kernel.name = "conv" + std::to_string(i) + "/fwd";
    net.request.kernels.push_back(kernel);
    TimingTable table;
    do {
      table = RandomTable(rng, mini_batch, 3);
    } while (ParetoFront(table, mini_batch, BatchPolicy::kAll).empty());
    net.tables.push_back(std::move(table));
  }
  return net;
}

TEST(PlanNetwork, PerKernelIsTheDpOfEachKernel) {
  std::mt19937_64 rng(1);
  Network net = RandomNetwork(rng, 6);
  net.request.policy = BatchPolicy::kAll;
  net.request.workspace_mode = WorkspaceMode::kPerKernel;
  net.request.workspace_bytes = 1500;
  Result<NetworkPlan> plan = PlanNetwork(net.request, net.pointers());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->workspace_mode, WorkspaceMode::kPerKernel);
  EXPECT_EQ(plan->policy, BatchPolicy::kAll);
  EXPECT_EQ(plan->workspace_budget_bytes, 1500u);
  EXPECT_FALSE(plan->ilp.used);
  double total = 0, undivided = 0;
  uint64_t ws = 0;
  bool complete = true, every_baseline = true;
  int with_baseline = 0;
  ASSERT_EQ(plan->kernels.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const KernelPlan& kp = plan->kernels[i];
    EXPECT_EQ(kp.kernel, net.request.kernels[i]);
    Result<KernelConfig> dp = SolveKernelDp(net.tables[i], 8, BatchPolicy::kAll, 1500);
    Result<Segment> base = FastestUndivided(net.tables[i], 8, 1500);
    ASSERT_EQ(kp.undivided.has_value(), base.ok());
    if (base.ok()) {
      EXPECT_EQ(*kp.undivided, *base);
    }
    if (!dp.ok()) {
      EXPECT_EQ(kp.status, KernelPlanStatus::kInfeasible);
      EXPECT_EQ(kp.reason, dp.status().message());
      complete = false;
      continue;
    }
    EXPECT_EQ(kp.status, KernelPlanStatus::kPlanned);
    EXPECT_EQ(kp.config, *dp);
    total += dp->time_ms;
    ws += dp->workspace_bytes;
    if (base.ok()) {
      undivided += base->time_ms;
      ++with_baseline;
      EXPECT_LE(dp->time_ms, base->time_ms + 1e-12);  // never worse than undivided
    } else {
      every_baseline = false;
    }
  }
  EXPECT_EQ(plan->complete, complete);
  EXPECT_DOUBLE_EQ(plan->total_time_ms, total);
  // Over the same kernels as total_time_ms, or 0 (unknown) when a planned kernel has none.
  EXPECT_DOUBLE_EQ(plan->total_undivided_ms, every_baseline ? undivided : 0.0);
  EXPECT_GT(with_baseline, 0);
  EXPECT_FALSE(every_baseline);  // this network exercises the unknown case; see also below
  EXPECT_EQ(plan->total_workspace_bytes, ws);
}

TEST(PlanNetwork, MissingTablesAreReportedAndLeftOutOfTotals) {
  std::mt19937_64 rng(2);
  Network net = RandomNetwork(rng, 3);
  net.request.workspace_bytes = UINT64_MAX;
  std::vector<const TimingTable*> tables = net.pointers();
  tables[1] = nullptr;
  for (WorkspaceMode mode :
       {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalSum, WorkspaceMode::kTotalShared}) {
    net.request.workspace_mode = mode;
    Result<NetworkPlan> plan = PlanNetwork(net.request, tables);
    ASSERT_TRUE(plan.ok());
    EXPECT_FALSE(plan->complete);
    EXPECT_EQ(plan->kernels[1].status, KernelPlanStatus::kMissing);
    EXPECT_THAT(plan->kernels[1].reason, ::testing::HasSubstr("no timings"));
    EXPECT_EQ(plan->kernels[0].status, KernelPlanStatus::kPlanned);
    EXPECT_EQ(plan->kernels[2].status, KernelPlanStatus::kPlanned);
    EXPECT_DOUBLE_EQ(plan->total_time_ms,
                     plan->kernels[0].config.time_ms + plan->kernels[2].config.time_ms);
  }
}

TEST(PlanNetwork, TotalSumMatchesExhaustiveChoiceOverFronts) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 20; ++round) {
    Network net = RandomNetwork(rng, 3);
    net.request.policy = round % 2 ? BatchPolicy::kAll : BatchPolicy::kPowerOfTwo;
    net.request.workspace_mode = WorkspaceMode::kTotalSum;
    net.request.workspace_bytes = 500 + rng() % 4000;
    const uint64_t budget = net.request.workspace_bytes;
    Result<NetworkPlan> plan = PlanNetwork(net.request, net.pointers(), IlpOptions{60, 0});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_TRUE(plan->ilp.used);

    // Exhaustive over every combination of front points (fronts are exact, see pareto_test).
    std::vector<std::vector<KernelConfig>> fronts;
    for (const TimingTable& t : net.tables) {
      fronts.push_back(ParetoFront(t, 8, net.request.policy, budget));
    }
    double best = std::numeric_limits<double>::infinity();
    for (const auto& a : fronts[0]) {
      for (const auto& b : fronts[1]) {
        for (const auto& c : fronts[2]) {
          if (a.workspace_bytes + b.workspace_bytes + c.workspace_bytes > budget) continue;
          best = std::min(best, a.time_ms + b.time_ms + c.time_ms);
        }
      }
    }
    bool any_empty = fronts[0].empty() || fronts[1].empty() || fronts[2].empty();
    if (best == std::numeric_limits<double>::infinity()) {
      EXPECT_FALSE(plan->complete);
      if (!any_empty) {
        for (const KernelPlan& kp : plan->kernels) {
          EXPECT_EQ(kp.status, KernelPlanStatus::kInfeasible);
          EXPECT_THAT(kp.reason, ::testing::HasSubstr("more than the budget"));
        }
        EXPECT_EQ(plan->ilp.status, "infeasible");
      }
      continue;
    }
    ASSERT_TRUE(plan->complete);
    EXPECT_EQ(plan->ilp.status, "optimal");
    EXPECT_NEAR(plan->total_time_ms, best, 1e-9);
    EXPECT_LE(plan->total_workspace_bytes, budget);
    uint64_t sum = 0;
    for (const KernelPlan& kp : plan->kernels) sum += kp.config.workspace_bytes;
    EXPECT_EQ(plan->total_workspace_bytes, sum);
    EXPECT_NEAR(plan->ilp.objective_ms, plan->total_time_ms, 1e-9);
  }
}

constexpr auto* Entry = testing_planner::MakeTiming;

TEST(PlanNetwork, TotalSumAtAndAroundTheBoundaries) {
  Network net = KernelsOfMiniBatch8(2);
  for (int i = 0; i < 2; ++i) {
    net.tables[i].entries = {Entry(8, 0, 5.0, 60), Entry(8, 1, 1.0 + i, 100)};
  }
  net.request.workspace_mode = WorkspaceMode::kTotalSum;
  net.request.policy = BatchPolicy::kAll;

  // 119 bytes: each kernel fits alone (60), both do not (120).
  net.request.workspace_bytes = 119;
  Result<NetworkPlan> plan = PlanNetwork(net.request, net.pointers());
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->complete);
  EXPECT_EQ(plan->ilp.status, "infeasible");
  for (const KernelPlan& kp : plan->kernels) {
    EXPECT_EQ(kp.status, KernelPlanStatus::kInfeasible);
    EXPECT_THAT(kp.reason, ::testing::HasSubstr("more than the budget"));
  }
  EXPECT_EQ(plan->total_time_ms, 0.0);

  // Exactly 120: both slow. 159: still both slow. 160: kernel 0 fast (it gains more).
  struct Case {
    uint64_t budget;
    int algo0, algo1;
    double total;
  };
  for (const Case& c : {Case{120, 0, 0, 10.0}, Case{159, 0, 0, 10.0}, Case{160, 1, 0, 6.0},
                        Case{199, 1, 0, 6.0}, Case{200, 1, 1, 3.0}}) {
    net.request.workspace_bytes = c.budget;
    plan = PlanNetwork(net.request, net.pointers());
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(plan->complete) << c.budget;
    EXPECT_EQ(plan->kernels[0].config.segments[0].algo, c.algo0) << c.budget;
    EXPECT_EQ(plan->kernels[1].config.segments[0].algo, c.algo1) << c.budget;
    EXPECT_DOUBLE_EQ(plan->total_time_ms, c.total);
    EXPECT_LE(plan->total_workspace_bytes, c.budget);
    EXPECT_EQ(plan->ilp.status, "optimal");
    // The baseline is within the budget: the fast algorithm whenever 100 bytes fit.
    EXPECT_EQ(plan->kernels[0].undivided->algo, 1);
  }

  // Below one kernel's smallest workspace: that kernel is infeasible on its own, with the DP's
  // reason, and leaves no room for the other either.
  net.request.workspace_bytes = 59;
  plan = PlanNetwork(net.request, net.pointers());
  ASSERT_TRUE(plan.ok());
  EXPECT_THAT(plan->kernels[0].reason, ::testing::HasSubstr("nothing fits the workspace limit"));
  EXPECT_EQ(plan->ilp.status, "empty");
}

TEST(PlanNetwork, TotalsCompareTheSameKernels) {
  // Kernel 0 has an undivided timing; kernel 1 only micro-batches of 4: planned, no baseline.
  Network net = KernelsOfMiniBatch8(2);
  net.tables[0].entries = {Entry(8, 0, 5.0, 0), Entry(4, 1, 1.0, 50)};
  net.tables[1].entries = {Entry(4, 0, 2.0, 0)};
  net.request.policy = BatchPolicy::kPowerOfTwo;
  net.request.workspace_bytes = 1000;
  for (WorkspaceMode mode :
       {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalSum, WorkspaceMode::kTotalShared}) {
    net.request.workspace_mode = mode;
    Result<NetworkPlan> plan = PlanNetwork(net.request, net.pointers());
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(plan->complete);
    EXPECT_FALSE(plan->kernels[1].undivided.has_value());
    EXPECT_DOUBLE_EQ(plan->total_time_ms, 2.0 + 4.0);
    // Kernel 0's baseline alone (5 ms) over both kernels' 6 ms would read as a slowdown.
    EXPECT_EQ(plan->total_undivided_ms, 0.0);
  }
  net.tables[1].entries.push_back(Entry(8, 0, 7.0, 0));
  net.request.workspace_mode = WorkspaceMode::kPerKernel;
  Result<NetworkPlan> plan = PlanNetwork(net.request, net.pointers());
  ASSERT_TRUE(plan.ok());
  EXPECT_DOUBLE_EQ(plan->total_time_ms, 2.0 + 4.0);
  EXPECT_DOUBLE_EQ(plan->total_undivided_ms, 5.0 + 7.0);
}

TEST(PlanNetwork, TotalSumBaselinesUseTheWholeBudgetEach) {
  // Two kernels whose fast undivided algorithm needs 100 bytes; the budget is 150. The plan can
  // give only one of them that workspace; each baseline has the whole budget to itself, as cuDNN
  // alone with one shared 150-byte buffer would.
  Network net = KernelsOfMiniBatch8(2);
  for (TimingTable& table : net.tables) {
    table.entries = {Entry(8, 0, 5.0, 0), Entry(8, 1, 1.0, 100)};
  }
  net.request.workspace_mode = WorkspaceMode::kTotalSum;
  net.request.workspace_bytes = 150;
  Result<NetworkPlan> plan = PlanNetwork(net.request, net.pointers());
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(plan->complete);
  EXPECT_DOUBLE_EQ(plan->total_time_ms, 6.0);
  EXPECT_LE(plan->total_workspace_bytes, 150u);
  for (const KernelPlan& kp : plan->kernels) {
    ASSERT_TRUE(kp.undivided.has_value());
    EXPECT_EQ(kp.undivided->algo, 1);
    EXPECT_EQ(kp.undivided->workspace_bytes, 100u);
  }
  EXPECT_DOUBLE_EQ(plan->total_undivided_ms, 2.0);
}

TEST(PlanNetwork, TotalSharedIsEachKernelAtTheBudgetWithTheLargestWorkspace) {
  std::mt19937_64 rng(5);
  Network net = RandomNetwork(rng, 5);
  net.request.workspace_mode = WorkspaceMode::kTotalShared;
  net.request.policy = BatchPolicy::kPowerOfTwo;
  net.request.workspace_bytes = 2000;
  Result<NetworkPlan> plan = PlanNetwork(net.request, net.pointers());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->workspace_mode, WorkspaceMode::kTotalShared);
  EXPECT_FALSE(plan->ilp.used);
  uint64_t largest = 0;
  for (size_t i = 0; i < 5; ++i) {
    Result<KernelConfig> dp = SolveKernelDp(net.tables[i], 8, BatchPolicy::kPowerOfTwo, 2000);
    if (!dp.ok()) continue;
    EXPECT_EQ(plan->kernels[i].config, *dp);
    largest = std::max(largest, dp->workspace_bytes);
  }
  EXPECT_EQ(plan->total_workspace_bytes, largest);
}

TEST(PlanNetwork, IdenticalKernelsGetIdenticalPlans) {
  std::mt19937_64 rng(6);
  Network net = RandomNetwork(rng, 2);
  // Kernel 2 repeats kernel 0 (same problem, batch and table) under another name.
  Kernel copy = net.request.kernels[0];
  copy.name = "again/fwd";
  net.request.kernels.push_back(copy);
  std::vector<const TimingTable*> tables = net.pointers();
  tables.push_back(tables[0]);
  net.request.policy = BatchPolicy::kAll;
  for (WorkspaceMode mode : {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalShared}) {
    net.request.workspace_mode = mode;
    Result<NetworkPlan> plan = PlanNetwork(net.request, tables);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->kernels[2].config, plan->kernels[0].config);
    EXPECT_EQ(plan->kernels[2].kernel.name, "again/fwd");
  }
}

TEST(PlanNetwork, SameInputSamePlanByteForByte) {
  std::mt19937_64 rng(7);
  Network net = RandomNetwork(rng, 8, 16);
  for (WorkspaceMode mode :
       {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalSum, WorkspaceMode::kTotalShared}) {
    for (BatchPolicy policy :
         {BatchPolicy::kUndivided, BatchPolicy::kPowerOfTwo, BatchPolicy::kAll}) {
      net.request.workspace_mode = mode;
      net.request.policy = policy;
      net.request.workspace_bytes = mode == WorkspaceMode::kTotalSum ? 8000 : 1500;
      Result<NetworkPlan> a = PlanNetwork(net.request, net.pointers());
      // A copy of the tables at other addresses, entries in another order.
      std::vector<TimingTable> copies = net.tables;
      for (TimingTable& t : copies) std::reverse(t.entries.begin(), t.entries.end());
      std::vector<const TimingTable*> pointers;
      for (const TimingTable& t : copies) pointers.push_back(&t);
      Result<NetworkPlan> b = PlanNetwork(net.request, pointers);
      ASSERT_TRUE(a.ok());
      ASSERT_TRUE(b.ok());
      EXPECT_EQ(PlanText(*a), PlanText(*b));
      EXPECT_GT(a->total_time_ms, 0.0);
    }
  }
}

TEST(PlanNetwork, RejectsInvalidRequests) {
  std::mt19937_64 rng(8);
  Network net = RandomNetwork(rng, 2);
  Result<NetworkPlan> mismatch = PlanNetwork(net.request, {net.pointers()[0]});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.status().message(), ::testing::HasSubstr("tables"));

  PlanRequest empty;
  EXPECT_THAT(PlanNetwork(empty, {}).status().message(), ::testing::HasSubstr("kernels"));

  PlanRequest bad_batch = net.request;
  bad_batch.kernels[1].mini_batch = 0;
  Result<NetworkPlan> batch = PlanNetwork(bad_batch, net.pointers());
  EXPECT_EQ(batch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(batch.status().message(), ::testing::HasSubstr("kernels[1].mini_batch"));

  PlanRequest bad_problem = net.request;
  bad_problem.kernels[0].problem.c = 0;
  EXPECT_THAT(PlanNetwork(bad_problem, net.pointers()).status().message(),
              ::testing::HasSubstr("kernels[0].problem"));

  PlanRequest bad_limit = net.request;
  bad_limit.workspace_mode = WorkspaceMode::kTotalSum;
  bad_limit.ilp_time_limit_s = -1;
  EXPECT_THAT(PlanNetwork(bad_limit, net.pointers()).status().message(),
              ::testing::HasSubstr("ilp_time_limit_s"));

  PlanRequest bad_mode = net.request;
  bad_mode.workspace_mode = static_cast<WorkspaceMode>(9);
  EXPECT_THAT(PlanNetwork(bad_mode, net.pointers()).status().message(),
              ::testing::HasSubstr("workspace_mode"));
}

}  // namespace
}  // namespace ucudnn
