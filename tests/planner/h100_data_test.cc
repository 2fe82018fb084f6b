// Plans ResNet-50 from the measured H100 tables (data/h100) and checks the totals against the
// numbers its README gives, computed independently of this code.
#include <gtest/gtest.h>

#include <cmath>

#include "ucudnn/core/networks.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/planner/plan_table.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

struct Loaded {
  TimingTables tables;
  PlanRequest request;
  std::vector<const TimingTable*> pointers;
};

// ResNet-50's kernels (distinct ones only, or all of them) with their measured tables.
Loaded Load(const std::string& file, DataType dtype, Layout layout, bool distinct_only) {
  Loaded loaded;
  Result<TimingTables> tables =
      ReadTimingCsvFile(std::string(UCUDNN_SOURCE_DIR) + "/data/h100/" + file);
  EXPECT_TRUE(tables.ok()) << tables.status().ToString();
  if (!tables.ok()) return loaded;
  loaded.tables = std::move(tables).value();
  Result<std::vector<Kernel>> kernels = NetworkKernels("resnet50", 256, dtype, layout);
  EXPECT_TRUE(kernels.ok());
  if (!kernels.ok()) return loaded;
  loaded.request.kernels = distinct_only ? UniqueKernels(*kernels) : *kernels;
  loaded.request.policy = BatchPolicy::kPowerOfTwo;
  loaded.request.workspace_mode = WorkspaceMode::kPerKernel;
  loaded.request.workspace_bytes = 64ull << 20;
  for (const Kernel& k : loaded.request.kernels) {
    loaded.pointers.push_back(FindTimings(loaded.tables, k.problem));
  }
  return loaded;
}

void ExpectReadmeTotals(const std::string& file, DataType dtype, Layout layout, double undivided_ms,
                        double planned_ms) {
  Loaded loaded = Load(file, dtype, layout, /*distinct_only=*/true);
  ASSERT_EQ(loaded.request.kernels.size(), 69u);
  for (size_t i = 0; i < loaded.pointers.size(); ++i) {
    // Our network definition and the measured shapes agree on every distinct kernel.
    ASSERT_NE(loaded.pointers[i], nullptr) << loaded.request.kernels[i].name;
  }
  Result<NetworkPlan> plan = PlanNetwork(loaded.request, loaded.pointers);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->complete);
  // The README rounds to 0.1 ms.
  EXPECT_NEAR(plan->total_undivided_ms, undivided_ms, 0.05) << FormatPlanTable(*plan);
  EXPECT_NEAR(plan->total_time_ms, planned_ms, 0.05) << FormatPlanTable(*plan);
  for (const KernelPlan& kp : plan->kernels) {
    EXPECT_LE(kp.config.workspace_bytes, 64ull << 20);
    ASSERT_TRUE(kp.undivided.has_value()) << kp.kernel.name;
    EXPECT_LE(kp.config.time_ms, kp.undivided->time_ms + 1e-12) << kp.kernel.name;
  }
}

TEST(H100Data, ResNet50Fp32MatchesTheReadme) {
  ExpectReadmeTotals("h100-cudnn91400-resnet50-fp32-nchw.csv", DataType::kFloat32, Layout::kNCHW,
                     115.8, 61.3);
}

TEST(H100Data, ResNet50Fp16MatchesTheReadme) {
  ExpectReadmeTotals("h100-cudnn91400-resnet50-fp16-nhwc.csv", DataType::kFloat16, Layout::kNHWC,
                     168.4, 21.5);
}

TEST(H100Data, WholeResNet50UnderATotalBudget) {
  Loaded loaded = Load("h100-cudnn91400-resnet50-fp32-nchw.csv", DataType::kFloat32, Layout::kNCHW,
                       /*distinct_only=*/false);
  ASSERT_EQ(loaded.request.kernels.size(), 159u);
  Result<NetworkPlan> per_kernel = PlanNetwork(loaded.request, loaded.pointers);
  ASSERT_TRUE(per_kernel.ok());
  ASSERT_TRUE(per_kernel->complete);

  // The same total workspace as the per-kernel plan, but shared out by the ILP: never slower.
  loaded.request.workspace_mode = WorkspaceMode::kTotalSum;
  loaded.request.workspace_bytes = per_kernel->total_workspace_bytes;
  Result<NetworkPlan> total = PlanNetwork(loaded.request, loaded.pointers);
  ASSERT_TRUE(total.ok()) << total.status().ToString();
  ASSERT_TRUE(total->complete);
  EXPECT_TRUE(total->ilp.used);
  EXPECT_EQ(total->ilp.status, "optimal");
  EXPECT_LE(total->total_workspace_bytes, loaded.request.workspace_bytes);
  EXPECT_LE(total->total_time_ms, per_kernel->total_time_ms * (1 + 1e-6));
  EXPECT_LE(total->ilp.gap, 1e-3);

  // Shared workspace of 64 MiB: the same per-kernel choices, the largest as the total.
  loaded.request.workspace_mode = WorkspaceMode::kTotalShared;
  loaded.request.workspace_bytes = 64ull << 20;
  Result<NetworkPlan> shared = PlanNetwork(loaded.request, loaded.pointers);
  ASSERT_TRUE(shared.ok());
  EXPECT_DOUBLE_EQ(shared->total_time_ms, per_kernel->total_time_ms);
  EXPECT_LE(shared->total_workspace_bytes, 64ull << 20);
}

}  // namespace
}  // namespace ucudnn
