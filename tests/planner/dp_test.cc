// The per-kernel DP against exhaustive search, its tie-breaking and its error reasons.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "planner/planner_testing.h"
#include "ucudnn/core/dp.h"

namespace ucudnn {
namespace {

using testing_planner::AllConfigs;
using testing_planner::BruteBestTime;
using testing_planner::BruteConfig;
using testing_planner::BruteTieWorkspace;
using testing_planner::CheckConfig;
using testing_planner::RandomTable;

TEST(MicroBatchSizes, FollowThePolicy) {
  EXPECT_EQ(MicroBatchSizes(BatchPolicy::kUndivided, 48), std::vector<int64_t>({48}));
  EXPECT_EQ(MicroBatchSizes(BatchPolicy::kPowerOfTwo, 48),
            std::vector<int64_t>({1, 2, 4, 8, 16, 32, 48}));
  EXPECT_EQ(MicroBatchSizes(BatchPolicy::kPowerOfTwo, 64),
            std::vector<int64_t>({1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(MicroBatchSizes(BatchPolicy::kAll, 5), std::vector<int64_t>({1, 2, 3, 4, 5}));
  EXPECT_TRUE(MicroBatchSizes(BatchPolicy::kAll, 0).empty());
}

// A measurement stored as contended (other work on the GPU while it was taken: kFailed with a
// "worker limit: contended:" reason, engine/measurement_gate.h) is never planned with, however
// fast it looks; the undisturbed configuration is.
TEST(SolveKernelDp, NeverPlansWithAContendedMeasurement) {
  TimingTable table;
  for (int64_t b : {1, 2}) {
    Timing clean;
    clean.micro_batch = b;
    clean.algo = 0;
    clean.time_ms = 1.0 * static_cast<double>(b);
    clean.samples = 5;
    table.entries.push_back(clean);
    Timing contended = clean;
    contended.algo = 1;
    contended.time_ms = 0.1;  // a lucky sample beside a training job
    contended.status = TimingStatus::kFailed;
    contended.error = std::string(kWorkerLimitError) + std::string(kContendedError) + "test";
    table.entries.push_back(contended);
  }
  Result<KernelConfig> config = SolveKernelDp(table, 2, BatchPolicy::kPowerOfTwo, 0);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_FALSE(config->segments.empty());
  for (const Segment& s : config->segments) EXPECT_EQ(s.algo, 0);
  EXPECT_DOUBLE_EQ(config->time_ms, 2.0);
}

TEST(PolicyNames, RoundTrip) {
  for (BatchPolicy p : {BatchPolicy::kUndivided, BatchPolicy::kPowerOfTwo, BatchPolicy::kAll}) {
    Result<BatchPolicy> parsed = ParseBatchPolicy(ToString(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  for (WorkspaceMode m :
       {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalSum, WorkspaceMode::kTotalShared}) {
    Result<WorkspaceMode> parsed = ParseWorkspaceMode(ToString(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_EQ(ParseBatchPolicy("ALL").value(), BatchPolicy::kAll);
  Result<BatchPolicy> bad = ParseBatchPolicy("some");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("policy"));
  EXPECT_FALSE(ParseWorkspaceMode("total").ok());
  EXPECT_EQ(ToString(TimingStatus::kFailed), "failed");
}

// What a user types: "total" is the sequential model (total_shared); the sum model only by name.
TEST(PolicyNames, WorkspaceModeChoices) {
  EXPECT_EQ(ParseWorkspaceModeChoice("--mode", "total").value(), WorkspaceMode::kTotalShared);
  EXPECT_EQ(ParseWorkspaceModeChoice("--mode", "shared").value(), WorkspaceMode::kTotalShared);
  EXPECT_EQ(ParseWorkspaceModeChoice("--mode", "Total-Shared").value(),
            WorkspaceMode::kTotalShared);
  EXPECT_EQ(ParseWorkspaceModeChoice("--mode", "total_sum").value(), WorkspaceMode::kTotalSum);
  EXPECT_EQ(ParseWorkspaceModeChoice("--mode", " per-kernel ").value(), WorkspaceMode::kPerKernel);
  Result<WorkspaceMode> bad = ParseWorkspaceModeChoice("--mode", "sum");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "--mode: expected per_kernel, total (= total_shared), total_shared or total_sum, got "
            "'sum'");
}

TEST(SolveKernelDp, MatchesExhaustiveSearchOnRandomTables) {
  std::mt19937_64 rng(20240601);
  int feasible = 0, infeasible = 0, split = 0;
  for (int round = 0; round < 300; ++round) {
    const int64_t mini_batch = 1 + static_cast<int64_t>(rng() % 9);
    const int algos = 1 + static_cast<int>(rng() % 3);
    const TimingTable table = RandomTable(rng, mini_batch, algos);
    const uint64_t limits[] = {0, 250, 600, 1500, UINT64_MAX};
    const uint64_t limit = limits[rng() % 5];
    for (BatchPolicy policy :
         {BatchPolicy::kUndivided, BatchPolicy::kPowerOfTwo, BatchPolicy::kAll}) {
      SCOPED_TRACE("round " + std::to_string(round) + " B=" + std::to_string(mini_batch) +
                   " policy " + std::string(ToString(policy)) + " limit " + std::to_string(limit));
      const std::vector<BruteConfig> configs = AllConfigs(table, mini_batch, policy, limit);
      const double expected = BruteBestTime(configs);
      Result<KernelConfig> dp = SolveKernelDp(table, mini_batch, policy, limit);
      if (expected == std::numeric_limits<double>::infinity()) {
        ASSERT_FALSE(dp.ok());
        EXPECT_EQ(dp.status().code(), StatusCode::kNotFound);
        EXPECT_FALSE(dp.status().message().empty());
        ++infeasible;
        continue;
      }
      ASSERT_TRUE(dp.ok()) << dp.status().ToString();
      EXPECT_EQ(CheckConfig(*dp, table, mini_batch, policy, limit), "");
      EXPECT_NEAR(dp->time_ms, expected, 1e-9 * expected);
      // The tie rule: of the time-optimal configurations, the smallest workspace.
      const uint64_t tie_workspace = BruteTieWorkspace(configs);
      EXPECT_EQ(dp->workspace_bytes, tie_workspace);
      ++feasible;
      if (dp->segments.size() > 1) ++split;
    }
  }
  // The random tables exercise every branch.
  EXPECT_GT(feasible, 200);
  EXPECT_GT(infeasible, 20);
  EXPECT_GT(split, 50);
}

TEST(SolveKernelDp, IgnoresEntryOrder) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    TimingTable table = RandomTable(rng, 16, 3);
    for (BatchPolicy policy : {BatchPolicy::kPowerOfTwo, BatchPolicy::kAll}) {
      Result<KernelConfig> a = SolveKernelDp(table, 16, policy, 800);
      std::shuffle(table.entries.begin(), table.entries.end(), rng);
      Result<KernelConfig> b = SolveKernelDp(table, 16, policy, 800);
      ASSERT_EQ(a.ok(), b.ok());
      if (a.ok()) {
        EXPECT_EQ(*a, *b);
      }
    }
  }
}

constexpr auto* Ok = testing_planner::MakeTiming;

// Times on a coarse grid, so that many configurations tie: the DP's choice among the
// time-optimal ones has the smallest workspace, as exhaustive search finds it. Odd rounds measure
// only a few sizes (fewer than a quarter of the mini-batch): the DP then takes its sparse path,
// even rounds mostly its dense one.
TEST(SolveKernelDp, TieRuleMatchesExhaustiveSearchOnCoarseTables) {
  std::mt19937_64 rng(31337);
  std::uniform_int_distribution<int> level(0, 5);
  int ties = 0;
  for (int round = 0; round < 400; ++round) {
    const bool sparse = round % 2 == 1;
    const int64_t mini_batch =
        sparse ? 9 + static_cast<int64_t>(rng() % 8) : 2 + static_cast<int64_t>(rng() % 8);
    std::vector<int64_t> sizes;
    for (int64_t b = sparse ? 2 : 1; b <= mini_batch; ++b) sizes.push_back(b);
    if (sparse) {
      // (mini_batch - 1) / 4 sizes, 1 among them so that some configurations exist.
      std::shuffle(sizes.begin(), sizes.end(), rng);
      sizes.resize(static_cast<size_t>((mini_batch - 1) / 4 - 1));
      sizes.push_back(1);
    }
    TimingTable table;
    for (int64_t b : sizes) {
      for (int a = 0; a < 3; ++a) {
        if (rng() % 5 == 0) continue;
        // Per-sample cost 1 or 2 half-milliseconds, a constant 0 or 1: sums tie often.
        const double time = 0.5 * static_cast<double>(b * (1 + rng() % 2) + rng() % 2);
        table.entries.push_back(
            Ok(b, a, time, a == 0 ? 0 : static_cast<uint64_t>(level(rng)) * 100 * b));
      }
    }
    const uint64_t limit = (rng() % 2) ? UINT64_MAX : 100 * static_cast<uint64_t>(rng() % 20);
    for (BatchPolicy policy : {BatchPolicy::kPowerOfTwo, BatchPolicy::kAll}) {
      SCOPED_TRACE("round " + std::to_string(round) + " policy " + std::string(ToString(policy)));
      const std::vector<BruteConfig> configs = AllConfigs(table, mini_batch, policy, limit);
      Result<KernelConfig> dp = SolveKernelDp(table, mini_batch, policy, limit);
      ASSERT_EQ(dp.ok(), !configs.empty());
      if (!dp.ok()) continue;
      const double best = BruteBestTime(configs);
      const uint64_t tie_workspace = BruteTieWorkspace(configs);
      EXPECT_NEAR(dp->time_ms, best, 1e-9 * best);
      EXPECT_EQ(dp->workspace_bytes, tie_workspace);
      // Count the cases where the rule matters: a time-optimal configuration with more workspace.
      for (const BruteConfig& c : configs) {
        if (c.time_ms <= best + 1e-9 * best && c.workspace_bytes > tie_workspace) {
          ++ties;
          break;
        }
      }
    }
  }
  EXPECT_GT(ties, 100);
}

TEST(SolveKernelDp, SplitsWhenTheFastAlgorithmOnlyFitsSmallBatches) {
  TimingTable table;
  table.entries = {Ok(4, 0, 10.0, 0),   Ok(2, 0, 5.0, 0),    Ok(1, 0, 2.5, 0),
                   Ok(4, 1, 2.0, 4000), Ok(2, 1, 1.0, 2000), Ok(1, 1, 0.6, 1000)};
  Result<KernelConfig> config = SolveKernelDp(table, 4, BatchPolicy::kPowerOfTwo, 2000);
  ASSERT_TRUE(config.ok());
  ASSERT_EQ(config->segments.size(), 2u);
  EXPECT_EQ(config->segments[0], (Segment{2, 1, 1.0, 2000, {}}));
  EXPECT_EQ(config->segments[1], (Segment{2, 1, 1.0, 2000, {}}));
  EXPECT_DOUBLE_EQ(config->time_ms, 2.0);
  EXPECT_EQ(config->workspace_bytes, 2000u);

  Result<KernelConfig> undivided = SolveKernelDp(table, 4, BatchPolicy::kUndivided, 2000);
  ASSERT_TRUE(undivided.ok());
  EXPECT_EQ(undivided->segments, std::vector<Segment>({Segment{4, 0, 10.0, 0, {}}}));

  Result<Segment> baseline = FastestUndivided(table, 4, 2000);
  ASSERT_TRUE(baseline.ok());
  EXPECT_EQ(*baseline, (Segment{4, 0, 10.0, 0, {}}));
  EXPECT_EQ(FastestUndivided(table, 4, 4000).value(), (Segment{4, 1, 2.0, 4000, {}}));
}

TEST(SolveKernelDp, BreaksTiesBySmallerWorkspaceThenLargerBatchThenLowerAlgo) {
  TimingTable table;
  // Equal times: algo 3 needs less workspace than algo 1; algo 0 and 2 tie fully -> algo 0.
  table.entries = {Ok(2, 1, 1.0, 500), Ok(2, 3, 1.0, 100), Ok(1, 2, 0.5, 0), Ok(1, 0, 0.5, 0)};
  Result<KernelConfig> config = SolveKernelDp(table, 2, BatchPolicy::kAll, 1000);
  ASSERT_TRUE(config.ok());
  // 2@algo3 (ws 100) and 2x1@algo0 (ws 0) both take 1.0 ms: the smaller workspace wins.
  EXPECT_EQ(config->segments,
            std::vector<Segment>({Segment{1, 0, 0.5, 0, {}}, Segment{1, 0, 0.5, 0, {}}}));

  TimingTable equal;
  equal.entries = {Ok(2, 0, 1.0, 0), Ok(1, 0, 0.5, 0)};
  Result<KernelConfig> larger = SolveKernelDp(equal, 2, BatchPolicy::kAll, 0);
  ASSERT_TRUE(larger.ok());
  EXPECT_EQ(larger->segments, std::vector<Segment>({Segment{2, 0, 1.0, 0, {}}}));
}

TEST(SolveKernelDp, NeverChoosesUnsupportedOrFailedTimings) {
  TimingTable table;
  table.entries = {Ok(2, 0, 4.0, 0), Ok(2, 1, 0.1, 0), Ok(2, 2, 0.2, 0)};
  table.entries[1].status = TimingStatus::kUnsupported;
  table.entries[2].status = TimingStatus::kFailed;
  Result<KernelConfig> config = SolveKernelDp(table, 2, BatchPolicy::kAll, 0);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->segments, std::vector<Segment>({Segment{2, 0, 4.0, 0, {}}}));
}

TEST(SolveKernelDp, ExplainsWhyNothingFits) {
  TimingTable empty;
  Result<KernelConfig> none = SolveKernelDp(empty, 8, BatchPolicy::kAll, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), ::testing::HasSubstr("no timings"));

  TimingTable failed;
  failed.entries = {Ok(8, 0, 1.0, 0)};
  failed.entries[0].status = TimingStatus::kFailed;
  EXPECT_THAT(SolveKernelDp(failed, 8, BatchPolicy::kAll, 0).status().message(),
              ::testing::HasSubstr("1 failed"));

  TimingTable big;
  big.entries = {Ok(8, 1, 1.0, 64ull << 20), Ok(4, 1, 0.5, 32ull << 20)};
  Result<KernelConfig> over = SolveKernelDp(big, 8, BatchPolicy::kPowerOfTwo, 16ull << 20);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), ::testing::HasSubstr("limit of 16 MiB"));
  EXPECT_THAT(over.status().message(), ::testing::HasSubstr("32 MiB"));

  TimingTable odd;  // only size 3 measured: cannot make 8
  odd.entries = {Ok(3, 0, 1.0, 0)};
  Result<KernelConfig> sum = SolveKernelDp(odd, 8, BatchPolicy::kAll, 0);
  ASSERT_FALSE(sum.ok());
  EXPECT_THAT(sum.status().message(), ::testing::HasSubstr("cannot sum to mini-batch 8"));

  TimingTable only_small;  // measured at 1, but policy undivided needs 8
  only_small.entries = {Ok(1, 0, 1.0, 0)};
  EXPECT_THAT(SolveKernelDp(only_small, 8, BatchPolicy::kUndivided, 0).status().message(),
              ::testing::HasSubstr("policy undivided"));
  EXPECT_FALSE(FastestUndivided(only_small, 8, 0).ok());

  Result<KernelConfig> bad = SolveKernelDp(only_small, 0, BatchPolicy::kAll, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("mini_batch"));
}

TEST(SolveKernelDp, WorkspaceLimitIsInclusive) {
  TimingTable table;
  table.entries = {Ok(4, 0, 9.0, 0), Ok(4, 1, 1.0, 4096)};
  EXPECT_EQ(SolveKernelDp(table, 4, BatchPolicy::kAll, 4096)->segments[0].algo, 1);
  EXPECT_EQ(SolveKernelDp(table, 4, BatchPolicy::kAll, 4095)->segments[0].algo, 0);
}

TEST(SolveKernelDp, HandlesTheLargestMiniBatch) {
  TimingTable table;
  table.entries = {Ok(1, 0, 0.001, 0), Ok(kMaxBatch, 0, 100.0, 0)};
  Result<KernelConfig> config = SolveKernelDp(table, kMaxBatch, BatchPolicy::kPowerOfTwo, 0);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->segments.size(), static_cast<size_t>(kMaxBatch));
  EXPECT_NEAR(config->time_ms, 0.001 * kMaxBatch, 1e-6);
}

}  // namespace
}  // namespace ucudnn
