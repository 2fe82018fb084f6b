// Pareto fronts: exactly the non-dominated configurations, and each DP optimum lies on them.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "planner/planner_testing.h"
#include "ucudnn/core/dp.h"

namespace ucudnn {
namespace {

using testing_planner::AllConfigs;
using testing_planner::BruteConfig;
using testing_planner::CheckConfig;
using testing_planner::RandomTable;

// The non-dominated (workspace, time) points of all configurations, by workspace.
std::vector<BruteConfig> BruteFront(std::vector<BruteConfig> configs) {
  std::sort(configs.begin(), configs.end(), [](const BruteConfig& a, const BruteConfig& b) {
    if (a.workspace_bytes != b.workspace_bytes) return a.workspace_bytes < b.workspace_bytes;
    return a.time_ms < b.time_ms;
  });
  std::vector<BruteConfig> front;
  for (const BruteConfig& c : configs) {
    // Times differing only by summation order count as equal.
    if (!front.empty() && c.time_ms >= front.back().time_ms - 1e-9) continue;
    front.push_back(c);
  }
  return front;
}

TEST(ParetoFront, EqualsTheExhaustiveFrontOnRandomTables) {
  std::mt19937_64 rng(99);
  size_t points = 0;
  for (int round = 0; round < 200; ++round) {
    const int64_t mini_batch = 1 + static_cast<int64_t>(rng() % 8);
    const TimingTable table = RandomTable(rng, mini_batch, 1 + static_cast<int>(rng() % 3));
    for (BatchPolicy policy :
         {BatchPolicy::kUndivided, BatchPolicy::kPowerOfTwo, BatchPolicy::kAll}) {
      for (uint64_t cap : {uint64_t{700}, UINT64_MAX}) {
        SCOPED_TRACE("round " + std::to_string(round) + " policy " + std::string(ToString(policy)) +
                     " cap " + std::to_string(cap));
        const std::vector<KernelConfig> front = ParetoFront(table, mini_batch, policy, cap);
        const std::vector<BruteConfig> expected =
            BruteFront(AllConfigs(table, mini_batch, policy, cap));
        ASSERT_EQ(front.size(), expected.size());
        for (size_t i = 0; i < front.size(); ++i) {
          EXPECT_EQ(CheckConfig(front[i], table, mini_batch, policy, cap), "");
          EXPECT_EQ(front[i].workspace_bytes, expected[i].workspace_bytes);
          EXPECT_NEAR(front[i].time_ms, expected[i].time_ms, 1e-9);
          if (i > 0) {
            EXPECT_GT(front[i].workspace_bytes, front[i - 1].workspace_bytes);
            EXPECT_LT(front[i].time_ms, front[i - 1].time_ms);
          }
        }
        points += front.size();
      }
    }
  }
  EXPECT_GT(points, 1000u);
}

TEST(ParetoFront, EveryPointIsNonDominatedAndEveryDpOptimumIsOnIt) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 40; ++round) {
    const int64_t mini_batch = 8 + static_cast<int64_t>(rng() % 40);
    const TimingTable table = RandomTable(rng, mini_batch, 4);
    for (BatchPolicy policy : {BatchPolicy::kPowerOfTwo, BatchPolicy::kAll}) {
      const std::vector<KernelConfig> front = ParetoFront(table, mini_batch, policy);
      for (size_t i = 0; i < front.size(); ++i) {
        for (size_t j = 0; j < front.size(); ++j) {
          if (i == j) continue;
          const bool dominates = front[j].workspace_bytes <= front[i].workspace_bytes &&
                                 front[j].time_ms <= front[i].time_ms;
          EXPECT_FALSE(dominates) << j << " dominates " << i;
        }
      }
      // The DP at every workspace level of the table equals the front's point at that level.
      std::set<uint64_t> levels = {0};
      for (const Timing& t : table.entries) levels.insert(t.workspace_bytes);
      for (uint64_t level : levels) {
        Result<KernelConfig> dp = SolveKernelDp(table, mini_batch, policy, level);
        const KernelConfig* on_front = nullptr;
        for (const KernelConfig& point : front) {
          if (point.workspace_bytes <= level) on_front = &point;
        }
        if (!dp.ok()) {
          EXPECT_EQ(on_front, nullptr);
          continue;
        }
        ASSERT_NE(on_front, nullptr);
        EXPECT_NEAR(dp->time_ms, on_front->time_ms, 1e-9 * dp->time_ms);
        // A front point needs the least workspace of any configuration that fast, and the DP's
        // tie rule takes the least workspace among its time-optimal configurations: the same.
        EXPECT_EQ(dp->workspace_bytes, on_front->workspace_bytes);
        EXPECT_LE(dp->workspace_bytes, level);
      }
    }
  }
}

TEST(ParetoFront, IgnoresEntryOrderAndRespectsTheCap) {
  std::mt19937_64 rng(11);
  TimingTable table = RandomTable(rng, 32, 4);
  const std::vector<KernelConfig> a = ParetoFront(table, 32, BatchPolicy::kAll);
  std::reverse(table.entries.begin(), table.entries.end());
  EXPECT_EQ(a, ParetoFront(table, 32, BatchPolicy::kAll));
  ASSERT_GT(a.size(), 2u);
  const uint64_t cap = a[a.size() / 2].workspace_bytes;
  const std::vector<KernelConfig> capped = ParetoFront(table, 32, BatchPolicy::kAll, cap);
  ASSERT_EQ(capped.size(), a.size() / 2 + 1);
  for (size_t i = 0; i < capped.size(); ++i) EXPECT_NEAR(capped[i].time_ms, a[i].time_ms, 1e-9);
}

TEST(ParetoFront, EmptyWhenNothingIsUsable) {
  TimingTable table;
  EXPECT_TRUE(ParetoFront(table, 4, BatchPolicy::kAll).empty());
  Timing t;
  t.micro_batch = 4;
  t.time_ms = 1;
  t.workspace_bytes = 100;
  table.entries.push_back(t);
  EXPECT_TRUE(ParetoFront(table, 4, BatchPolicy::kAll, 99).empty());
  EXPECT_EQ(ParetoFront(table, 4, BatchPolicy::kAll, 100).size(), 1u);
  EXPECT_TRUE(ParetoFront(table, 0, BatchPolicy::kAll).empty());
}

}  // namespace
}  // namespace ucudnn
