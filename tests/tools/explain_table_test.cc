// What `ucudnn explain` adds to the plan (cli/src/explain_table.h): each kernel's Pareto front,
// computed from a real timing table by the real DP, with the chosen point marked and the reason
// each other point lost.
#include "explain_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ucudnn/core/dp.h"

namespace ucudnn::cli {
namespace {

using ::testing::HasSubstr;

// Algo 0 needs no workspace and is slow; algo 1 is fast and needs 1 MiB per sample.
TimingTable Table() {
  TimingTable table;
  for (int64_t b : {1, 2, 4, 8}) {
    table.entries.push_back(
        {b, 0, 1.0 * static_cast<double>(b), 0.01, 5, 0, TimingStatus::kOk, "", {}, {}});
    table.entries.push_back({b,
                             1,
                             0.25 * static_cast<double>(b) + 0.1,
                             0.01,
                             5,
                             static_cast<uint64_t>(b) << 20,
                             TimingStatus::kOk,
                             "",
                             {},
                             {}});
  }
  return table;
}

KernelPlan PlannedUnder(uint64_t limit) {
  KernelPlan kernel;
  kernel.kernel.name = "conv1/fwd";
  kernel.kernel.mini_batch = 8;
  kernel.kernel.problem.c = 3;
  kernel.kernel.problem.h = kernel.kernel.problem.w = 8;
  kernel.kernel.problem.k = 4;
  kernel.kernel.problem.r = kernel.kernel.problem.s = 3;
  auto config = SolveKernelDp(Table(), 8, BatchPolicy::kPowerOfTwo, limit);
  EXPECT_TRUE(config.ok());
  kernel.status = KernelPlanStatus::kPlanned;
  kernel.config = *config;
  return kernel;
}

TEST(ExplainTableTest, MarksTheChosenPointAndSaysWhyTheFasterOnesLost) {
  const std::vector<KernelConfig> front = ParetoFront(Table(), 8, BatchPolicy::kPowerOfTwo);
  ASSERT_GE(front.size(), 3u);  // none, 1..4 MiB, 8 MiB of workspace
  const uint64_t limit = 2 << 20;
  const KernelPlan kernel = PlannedUnder(limit);
  const auto alternatives = ExplainAlternatives(kernel, front, WorkspaceMode::kPerKernel, limit);
  ASSERT_EQ(alternatives.size(), front.size());
  int chosen = 0;
  for (const Alternative& a : alternatives) {
    if (a.chosen) {
      ++chosen;
      EXPECT_LE(a.config.workspace_bytes, limit);
      EXPECT_THAT(a.why, HasSubstr("the fastest that fits the limit of 2 MiB"));
    } else if (a.config.workspace_bytes > limit) {
      EXPECT_LT(a.config.time_ms, kernel.config.time_ms);  // faster, but too big
      EXPECT_THAT(a.why, HasSubstr("over the limit"));
    } else {
      EXPECT_GT(a.config.time_ms, kernel.config.time_ms);
      EXPECT_THAT(a.why, HasSubstr("slower"));
    }
  }
  EXPECT_EQ(chosen, 1);

  const std::string text = FormatAlternatives(kernel, alternatives, {});
  EXPECT_THAT(text, HasSubstr("conv1/fwd"));
  EXPECT_THAT(text, HasSubstr(std::to_string(front.size()) + " Pareto-optimal configurations"));
  EXPECT_THAT(text, HasSubstr("  * "));
  EXPECT_THAT(text, HasSubstr("@algo1"));
}

TEST(ExplainTableTest, AnUnplannedKernelHasNoChosenPoint) {
  KernelPlan kernel = PlannedUnder(UINT64_MAX);
  kernel.status = KernelPlanStatus::kInfeasible;
  kernel.reason = "nothing fits";
  const std::vector<KernelConfig> front = ParetoFront(Table(), 8, BatchPolicy::kPowerOfTwo);
  const auto alternatives = ExplainAlternatives(kernel, front, WorkspaceMode::kPerKernel, 0);
  for (const Alternative& a : alternatives) EXPECT_FALSE(a.chosen);
  EXPECT_THAT(FormatAlternatives(kernel, alternatives), HasSubstr("not planned: nothing fits"));
}

}  // namespace
}  // namespace ucudnn::cli
