// The human-readable plan table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ucudnn/planner/plan_table.h"

namespace ucudnn {
namespace {

using ::testing::HasSubstr;

Kernel MakeKernel(const std::string& name) {
  Kernel k;
  k.name = name;
  k.mini_batch = 256;
  k.problem.c = 64;
  k.problem.h = 56;
  k.problem.w = 56;
  k.problem.k = 64;
  k.problem.r = 3;
  k.problem.s = 3;
  k.problem.pad_h = 1;
  k.problem.pad_w = 1;
  return k;
}

TEST(FormatSegments, GroupsRunsOfEqualSegments) {
  EXPECT_EQ(
      FormatSegments(
          {{64, 1, 0.1, 10, {}}, {64, 1, 0.1, 10, {}}, {64, 1, 0.1, 10, {}}, {64, 1, 0.1, 10, {}}}),
      "4x64@algo1");
  EXPECT_EQ(FormatSegments({{128, 6, 1, 0, {}}, {64, 1, 1, 0, {}}, {64, 1, 1, 0, {}}}),
            "1x128@algo6 + 2x64@algo1");
  EXPECT_EQ(FormatSegments({}), "");
}

TEST(FormatShape, SummarisesTheProblem) {
  Kernel k = MakeKernel("x");
  EXPECT_EQ(FormatShape(k), "n256 c64 56x56 k64 3x3 s1 p1");
  k.problem.stride_w = 2;
  k.problem.pad_h = 0;
  k.problem.groups = 32;
  k.problem.dilation_h = 2;
  EXPECT_EQ(FormatShape(k), "n256 c64 56x56 k64 3x3 s1x2 p0x1 d2x1 g32");
}

TEST(FormatPlanTable, ShowsSegmentsBaselinesTotalsAndReasons) {
  NetworkPlan plan;
  plan.workspace_mode = WorkspaceMode::kTotalSum;
  plan.policy = BatchPolicy::kPowerOfTwo;
  plan.workspace_budget_bytes = 64ull << 20;
  KernelPlan planned;
  planned.kernel = MakeKernel("layer1.0.conv2/fwd");
  planned.status = KernelPlanStatus::kPlanned;
  for (int i = 0; i < 4; ++i) planned.config.segments.push_back({64, 1, 0.25, 3ull << 20, {}});
  planned.config.time_ms = 1.0;
  planned.config.workspace_bytes = 3ull << 20;
  planned.undivided = Segment{256, 0, 2.5, 0, {}};
  KernelPlan missing;
  missing.kernel = MakeKernel("layer1.0.conv2/bwd_data");
  missing.status = KernelPlanStatus::kMissing;
  missing.reason = "no timings for this problem on this device";
  plan.kernels = {planned, missing};
  plan.total_time_ms = 1.0;
  plan.total_undivided_ms = 2.5;
  plan.total_workspace_bytes = 3ull << 20;
  plan.ilp.used = true;
  plan.ilp.status = "optimal";
  plan.ilp.objective_ms = 1.0;
  plan.ilp.bound_ms = 1.0;
  plan.ilp.variables = 7;
  plan.ilp.constraints = 2;

  const std::string table = FormatPlanTable(plan);
  EXPECT_THAT(table, HasSubstr("2 kernels (fp32 nchw), policy power_of_two, workspace 64 MiB in "
                               "total"));
  EXPECT_THAT(table, HasSubstr("layer1.0.conv2/fwd"));
  EXPECT_THAT(table, HasSubstr("n256 c64 56x56 k64 3x3 s1 p1"));
  EXPECT_THAT(table, HasSubstr("4x64@algo1"));
  EXPECT_THAT(table, HasSubstr("3.0"));    // MiB
  EXPECT_THAT(table, HasSubstr("2.50x"));  // speedup
  EXPECT_THAT(table, HasSubstr("MISSING: no timings"));
  EXPECT_THAT(table, HasSubstr("total (1 planned)"));
  EXPECT_THAT(table, HasSubstr("1 missing, 0 infeasible"));
  EXPECT_THAT(table, HasSubstr("ILP (COIN-OR CBC): optimal"));
  EXPECT_THAT(table, HasSubstr("7 variables"));

  // Columns line up: the numbers of the planned row and the totals row end at the same place.
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < table.size()) {
    const size_t end = table.find('\n', start);
    lines.push_back(table.substr(start, end - start));
    start = end + 1;
  }
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines[1].size(), lines[2].size());  // header and planned row
  EXPECT_EQ(lines[2].size(), lines[4].size());  // planned row and totals
}

TEST(FormatPlanTable, SaysNotApplicableWithoutABaselineAndComparesTheSameKernels) {
  NetworkPlan plan;
  plan.workspace_mode = WorkspaceMode::kPerKernel;
  plan.workspace_budget_bytes = 64ull << 20;
  KernelPlan with;
  with.kernel = MakeKernel("a/fwd");
  with.status = KernelPlanStatus::kPlanned;
  with.config.segments = {{256, 1, 1.0, 0, {}}};
  with.config.time_ms = 1.0;
  with.undivided = Segment{256, 0, 2.5, 0, {}};
  KernelPlan without = with;
  without.kernel = MakeKernel("b/fwd");
  without.config.time_ms = 3.0;
  without.undivided.reset();
  plan.kernels = {with, without};
  plan.complete = true;
  plan.total_time_ms = 4.0;
  plan.total_undivided_ms = 0;  // as PlanNetwork leaves it: a baseline is missing

  const std::string table = FormatPlanTable(plan);
  std::vector<std::string> lines;
  for (size_t start = 0, end; (end = table.find('\n', start)) != std::string::npos;
       start = end + 1) {
    lines.push_back(table.substr(start, end - start));
  }
  ASSERT_GE(lines.size(), 6u);
  EXPECT_THAT(lines[2], HasSubstr("2.50x"));
  EXPECT_THAT(lines[3], ::testing::MatchesRegex(".*3\\.000 +n/a +n/a"));
  EXPECT_THAT(lines[4], ::testing::MatchesRegex("total .*4\\.000 +n/a +n/a"));
  EXPECT_THAT(table, HasSubstr("1 of 2 planned kernels have no undivided configuration"));
  EXPECT_THAT(table, HasSubstr("The other 1: 1.000 ms planned vs 2.500 ms undivided (2.50x)"));
  EXPECT_THAT(table, HasSubstr("within the per-kernel limit"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("Not planned")));

  // Every baseline present: the totals compare the same kernels.
  plan.kernels[1].undivided = Segment{256, 0, 6.0, 0, {}};
  plan.total_undivided_ms = 8.5;
  const std::string full = FormatPlanTable(plan);
  EXPECT_THAT(full, ::testing::ContainsRegex("total .*4\\.000 +8\\.500 +2\\.12x"));
  EXPECT_THAT(full, ::testing::Not(HasSubstr("n/a")));

  plan.workspace_mode = WorkspaceMode::kTotalSum;
  EXPECT_THAT(FormatPlanTable(plan),
              HasSubstr("what cuDNN alone would do with the whole budget as one shared workspace "
                        "buffer"));
}

}  // namespace
}  // namespace ucudnn
