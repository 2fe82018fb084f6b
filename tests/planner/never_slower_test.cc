// Issue 11 item 6: a total-budget plan is never predicted slower than the undivided plan at the
// same budget. total_shared: each kernel's plan against its fastest undivided algorithm within
// the budget; total_sum: against the ILP over undivided options under the same sum constraint
// (NetworkPlan::undivided_sum_ms), checked exhaustively. Property tests over seeded random
// timing tables, with missing tables, kernels without an undivided option and near-ties.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

#include "planner/planner_testing.h"
#include "support/problems.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

using testing_planner::RandomTable;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Network {
  PlanRequest request;
  std::vector<TimingTable> tables;
  std::vector<bool> missing;  // kernel i has no table at all
  std::vector<const TimingTable*> pointers() const {
    std::vector<const TimingTable*> out;
    for (size_t i = 0; i < tables.size(); ++i) out.push_back(missing[i] ? nullptr : &tables[i]);
    return out;
  }
};

ConvProblem ProblemNumber(int i) {
  return test_support::SquareConv(ConvOp::kForward, 16 + i, 14, 32);
}

// `count` kernels with random tables (RandomTable leaves some undivided entries unmeasured or
// unsupported, so some kernels have no undivided option); about one in ten has no table.
Network RandomNetwork(std::mt19937_64& rng, int count, int64_t mini_batch) {
  Network net;
  for (int i = 0; i < count; ++i) {
    Kernel kernel;
    kernel.problem = ProblemNumber(i);
    kernel.mini_batch = mini_batch;
    kernel.name = "conv" + std::to_string(i) + "/fwd";
    net.request.kernels.push_back(kernel);
    net.tables.push_back(RandomTable(rng, mini_batch, 3));
    net.missing.push_back(rng() % 10 == 0);
  }
  return net;
}

BatchPolicy PolicyOfRound(int round) {
  const BatchPolicy policies[] = {BatchPolicy::kPowerOfTwo, BatchPolicy::kAll,
                                  BatchPolicy::kUndivided};
  return policies[round % 3];
}

TEST(NeverSlower, TotalSharedKernelsAndTotalsAreNeverSlowerThanUndivided) {
  std::mt19937_64 rng(11);
  int compared = 0;
  for (int round = 0; round < 300; ++round) {
    Network net = RandomNetwork(rng, 4, 1 + static_cast<int64_t>(rng() % 12));
    net.request.policy = PolicyOfRound(round);
    net.request.workspace_mode = WorkspaceMode::kTotalShared;
    net.request.workspace_bytes = rng() % 3000;
    Result<NetworkPlan> plan = PlanNetwork(net.request, net.pointers());
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    bool every_baseline = true;
    for (size_t i = 0; i < plan->kernels.size(); ++i) {
      const KernelPlan& kp = plan->kernels[i];
      // The baseline is what the table says: the fastest usable entry at the full mini-batch.
      double fastest = kInfinity;
      if (!net.missing[i]) {
        for (const Timing& t : net.tables[i].entries) {
          if (t.status == TimingStatus::kOk && t.micro_batch == kp.kernel.mini_batch &&
              t.workspace_bytes <= net.request.workspace_bytes) {
            fastest = std::min(fastest, t.time_ms);
          }
        }
      }
      if (fastest == kInfinity) {
        EXPECT_FALSE(kp.undivided.has_value()) << "round " << round << " kernel " << i;
      } else {
        ASSERT_TRUE(kp.undivided.has_value()) << "round " << round << " kernel " << i;
        EXPECT_EQ(kp.undivided->time_ms, fastest);
        // An undivided option exists, so the kernel is planned and no slower than it.
        ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned) << "round " << round;
        EXPECT_LE(kp.config.time_ms, kp.undivided->time_ms) << "round " << round;
        EXPECT_LE(kp.config.workspace_bytes, net.request.workspace_bytes);
        ++compared;
      }
      if (kp.status == KernelPlanStatus::kPlanned && !kp.undivided) every_baseline = false;
    }
    if (every_baseline) {
      EXPECT_LE(plan->total_time_ms, plan->total_undivided_ms) << "round " << round;
    } else {
      EXPECT_EQ(plan->total_undivided_ms, 0.0);
    }
    EXPECT_EQ(plan->undivided_sum_ms, 0.0);  // a total_sum baseline only
  }
  EXPECT_GT(compared, 500);  // the property was exercised, not skipped
}

// A micro-batched configuration slower than the undivided one by less than the DP's tie
// tolerance (1e-12 relative) but with a smaller workspace: the DP's tie rule prefers it, the
// plan must not.
TEST(NeverSlower, NearTieInTheDpDoesNotBeatTheBaseline) {
  const auto entry = testing_planner::MakeTiming;
  TimingTable table;
  table.entries = {entry(2, 1, 1.0, 1000), entry(1, 0, 0.5 * (1 + 4e-13), 0)};
  Result<KernelConfig> dp = SolveKernelDp(table, 2, BatchPolicy::kPowerOfTwo, 4096);
  ASSERT_TRUE(dp.ok());
  ASSERT_GT(dp->time_ms, 1.0);  // the premise: the DP took the tie with the smaller workspace

  for (WorkspaceMode mode :
       {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalShared, WorkspaceMode::kTotalSum}) {
    PlanRequest request;
    Kernel kernel;
    kernel.problem = ProblemNumber(0);
    kernel.mini_batch = 2;
    request.kernels = {kernel};
    request.workspace_mode = mode;
    request.workspace_bytes = 4096;
    Result<NetworkPlan> plan = PlanNetwork(request, {&table});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_EQ(plan->kernels[0].status, KernelPlanStatus::kPlanned);
    EXPECT_LE(plan->kernels[0].config.time_ms, 1.0) << ToString(mode);
    EXPECT_LE(plan->total_time_ms, plan->total_undivided_ms) << ToString(mode);
  }
}

// Exhaustive: the fastest choice of one undivided option per kernel with the workspaces summing
// to at most the budget, over the kernels that `plan` planned; kInfinity when there is none.
double BruteUndividedSum(const Network& net, const NetworkPlan& plan) {
  std::vector<std::vector<KernelConfig>> fronts;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    if (plan.kernels[i].status != KernelPlanStatus::kPlanned) continue;
    fronts.push_back(ParetoFront(net.tables[i], plan.kernels[i].kernel.mini_batch,
                                 BatchPolicy::kUndivided, net.request.workspace_bytes));
  }
  double best = kInfinity;
  std::function<void(size_t, double, uint64_t)> walk = [&](size_t k, double time, uint64_t ws) {
    if (ws > net.request.workspace_bytes) return;
    if (k == fronts.size()) {
      best = std::min(best, time);
      return;
    }
    for (const KernelConfig& c : fronts[k]) walk(k + 1, time + c.time_ms, ws + c.workspace_bytes);
  };
  walk(0, 0.0, 0);
  return best;
}

// `time_limit_s` tiny: both ILPs stop at their first answers (the reported baseline is then not
// near the optimum, but the plan must still not be slower than it).
void CheckTotalSum(double relative_gap, int kernels, uint64_t seed, double time_limit_s = 60) {
  const bool solved = time_limit_s >= 60;
  std::mt19937_64 rng(seed);
  int compared = 0, unknown = 0;
  for (int round = 0; round < 120; ++round) {
    Network net = RandomNetwork(rng, kernels, 1 + static_cast<int64_t>(rng() % 8));
    net.request.policy = PolicyOfRound(round);
    net.request.workspace_mode = WorkspaceMode::kTotalSum;
    net.request.workspace_bytes = rng() % (2000 * static_cast<uint64_t>(kernels));
    Result<NetworkPlan> plan =
        PlanNetwork(net.request, net.pointers(), IlpOptions{time_limit_s, relative_gap});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const std::string where = "round " + std::to_string(round);
    uint64_t sum = 0;
    for (const KernelPlan& kp : plan->kernels) {
      if (kp.status == KernelPlanStatus::kPlanned) sum += kp.config.workspace_bytes;
    }
    EXPECT_LE(sum, net.request.workspace_bytes) << where;
    EXPECT_EQ(sum, plan->total_workspace_bytes) << where;
    const double brute = BruteUndividedSum(net, *plan);
    bool any_planned = false;
    for (const KernelPlan& kp : plan->kernels) {
      any_planned = any_planned || kp.status == KernelPlanStatus::kPlanned;
    }
    if (!any_planned) continue;
    if (brute == kInfinity) {
      // Some planned kernel has no undivided option that fits: no like-for-like baseline.
      EXPECT_EQ(plan->undivided_sum_ms, 0.0) << where;
      ++unknown;
      continue;
    }
    ASSERT_GT(plan->undivided_sum_ms, 0.0) << where;
    // The reported baseline is the undivided ILP's answer: optimal up to the gap asked for.
    EXPECT_GE(plan->undivided_sum_ms, brute - 1e-9) << where;
    if (solved) {
      EXPECT_LE(plan->undivided_sum_ms, brute * (1 + relative_gap) + 1e-9) << where;
    }
    // The guarantee: never slower than the reported baseline, whatever the gap.
    EXPECT_LE(plan->total_time_ms, plan->undivided_sum_ms) << where;
    if (solved && relative_gap == 0) {
      EXPECT_LE(plan->total_time_ms, brute + 1e-9) << where;
    }
    ++compared;
  }
  EXPECT_GT(compared, 30);
  EXPECT_GT(unknown, 0);
}

TEST(NeverSlower, TotalSumIsNeverSlowerThanTheUndividedIlpExactGap) { CheckTotalSum(0, 4, 12); }

// A loose gap lets the ILP stop at a rounded LP answer; the planner must still not return one
// slower than the undivided answer.
TEST(NeverSlower, TotalSumIsNeverSlowerThanTheUndividedIlpLooseGap) { CheckTotalSum(0.9, 6, 13); }

// Out of time at once: the main ILP's first answer (small workspaces, often many tiny
// micro-batches) can be slower than the undivided ILP's, and the plan must fall back.
TEST(NeverSlower, TotalSumIsNeverSlowerThanTheUndividedIlpOutOfTime) {
  CheckTotalSum(0, 6, 14, 1e-9);
}

}  // namespace
}  // namespace ucudnn
