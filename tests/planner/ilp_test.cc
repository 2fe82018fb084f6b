// The network-wide ILP against exhaustive search: random networks, infeasible budgets, budgets
// at exact boundaries, repeated kernels, determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "ucudnn/planner/ilp.h"

namespace ucudnn {
namespace {

struct Brute {
  bool feasible = false;
  double time_ms = std::numeric_limits<double>::infinity();
};

Brute Exhaustive(const std::vector<std::vector<IlpOption>>& options, uint64_t budget) {
  Brute best;
  std::vector<size_t> pick(options.size(), 0);
  while (true) {
    double time = 0;
    uint64_t ws = 0;
    for (size_t k = 0; k < options.size(); ++k) {
      time += options[k][pick[k]].time_ms;
      ws += options[k][pick[k]].workspace_bytes;
    }
    if (ws <= budget && time < best.time_ms) {
      best.feasible = true;
      best.time_ms = time;
    }
    size_t k = 0;
    while (k < options.size() && ++pick[k] == options[k].size()) pick[k++] = 0;
    if (k == options.size()) return best;
  }
}

// Random options per kernel, not necessarily Pareto-optimal.
std::vector<std::vector<IlpOption>> RandomNetwork(std::mt19937_64& rng, int kernels) {
  std::vector<std::vector<IlpOption>> options(static_cast<size_t>(kernels));
  for (auto& kernel : options) {
    const int count = 1 + static_cast<int>(rng() % 4);
    for (int j = 0; j < count; ++j) {
      IlpOption o;
      o.time_ms = 0.5 + static_cast<double>(rng() % 1000) / 100.0;
      o.workspace_bytes = (rng() % 8) * (1ull << 20) + (rng() % 3) * 4096;
      kernel.push_back(o);
    }
  }
  return options;
}

void ExpectValid(const IlpSolution& solution, const std::vector<std::vector<IlpOption>>& options,
                 uint64_t budget) {
  ASSERT_EQ(solution.choice.size(), options.size());
  double time = 0;
  uint64_t ws = 0;
  for (size_t k = 0; k < options.size(); ++k) {
    ASSERT_GE(solution.choice[k], 0);
    ASSERT_LT(static_cast<size_t>(solution.choice[k]), options[k].size());
    time += options[k][static_cast<size_t>(solution.choice[k])].time_ms;
    ws += options[k][static_cast<size_t>(solution.choice[k])].workspace_bytes;
  }
  EXPECT_LE(ws, budget);
  EXPECT_EQ(ws, solution.total_workspace_bytes);
  EXPECT_NEAR(time, solution.total_time_ms, 1e-9);
  EXPECT_NEAR(solution.report.objective_ms, solution.total_time_ms, 1e-9);
}

IlpOptions Exact() {
  IlpOptions o;
  o.relative_gap = 0;
  o.time_limit_s = 60;
  return o;
}

TEST(SolveNetworkIlp, MatchesExhaustiveSearchOnRandomNetworks) {
  std::mt19937_64 rng(1234);
  int infeasible = 0, searched = 0;
  for (int round = 0; round < 150; ++round) {
    const auto options = RandomNetwork(rng, 2 + static_cast<int>(rng() % 4));
    uint64_t max_total = 0;
    for (const auto& k : options) {
      uint64_t most = 0;
      for (const IlpOption& o : k) most = std::max(most, o.workspace_bytes);
      max_total += most;
    }
    const uint64_t budget = max_total == 0 ? 0 : rng() % (max_total + 1);
    SCOPED_TRACE("round " + std::to_string(round) + " budget " + std::to_string(budget));
    Result<IlpSolution> solution = SolveNetworkIlp(options, budget, Exact());
    ASSERT_TRUE(solution.ok()) << solution.status().ToString();
    const Brute expected = Exhaustive(options, budget);
    EXPECT_TRUE(solution->report.used);
    if (!expected.feasible) {
      EXPECT_EQ(solution->report.status, "infeasible");
      EXPECT_TRUE(solution->choice.empty());
      ++infeasible;
      continue;
    }
    EXPECT_EQ(solution->report.status, "optimal");
    ExpectValid(*solution, options, budget);
    EXPECT_NEAR(solution->total_time_ms, expected.time_ms, 1e-9);
    EXPECT_LE(solution->report.bound_ms, solution->report.objective_ms);
    EXPECT_LE(solution->report.gap, 1e-9);
    if (solution->report.variables > 0) ++searched;
  }
  EXPECT_GT(infeasible, 5);
  EXPECT_GT(searched, 50);
}

TEST(SolveNetworkIlp, BudgetsAtExactBoundaries) {
  // Two kernels; the fast pair needs exactly 3 MiB + 1 byte.
  const std::vector<std::vector<IlpOption>> options = {
      {{10.0, 0}, {4.0, (1ull << 20) + 1}},
      {{8.0, 1ull << 20}, {3.0, 2ull << 20}},
  };
  const uint64_t both_fast = (3ull << 20) + 1;
  Result<IlpSolution> at = SolveNetworkIlp(options, both_fast, Exact());
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at->choice, std::vector<int>({1, 1}));
  EXPECT_DOUBLE_EQ(at->total_time_ms, 7.0);
  EXPECT_EQ(at->total_workspace_bytes, both_fast);

  // One byte less: the best is kernel 0 slow, kernel 1 fast (10 + 3 = 13) vs fast+slow (4 + 8).
  Result<IlpSolution> below = SolveNetworkIlp(options, both_fast - 1, Exact());
  ASSERT_TRUE(below.ok());
  EXPECT_EQ(below->choice, std::vector<int>({1, 0}));
  EXPECT_DOUBLE_EQ(below->total_time_ms, 12.0);
  EXPECT_EQ(below->report.status, "optimal");

  // Exactly the smallest workspaces: feasible; one byte less: infeasible.
  Result<IlpSolution> smallest = SolveNetworkIlp(options, 1ull << 20, Exact());
  ASSERT_TRUE(smallest.ok());
  EXPECT_EQ(smallest->choice, std::vector<int>({0, 0}));
  Result<IlpSolution> none = SolveNetworkIlp(options, (1ull << 20) - 1, Exact());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->report.status, "infeasible");
  EXPECT_TRUE(none->choice.empty());
}

TEST(SolveNetworkIlp, BoundaryBudgetsOnRandomNetworks) {
  // Budgets equal to the workspace of some combination, and one byte below it.
  std::mt19937_64 rng(77);
  for (int round = 0; round < 60; ++round) {
    const auto options = RandomNetwork(rng, 3 + static_cast<int>(rng() % 3));
    uint64_t combination = 0;
    for (const auto& k : options) combination += k[rng() % k.size()].workspace_bytes;
    for (uint64_t budget : {combination, combination == 0 ? 0 : combination - 1}) {
      Result<IlpSolution> solution = SolveNetworkIlp(options, budget, Exact());
      ASSERT_TRUE(solution.ok());
      const Brute expected = Exhaustive(options, budget);
      ASSERT_EQ(expected.feasible, !solution->choice.empty());
      if (!expected.feasible) continue;
      ExpectValid(*solution, options, budget);
      EXPECT_NEAR(solution->total_time_ms, expected.time_ms, 1e-9);
    }
  }
}

TEST(SolveNetworkIlp, RepeatedKernelsShareCountsAndMatchExhaustiveSearch) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 30; ++round) {
    auto base = RandomNetwork(rng, 2);
    std::vector<std::vector<IlpOption>> options;
    // Kernel pattern A B A A B A: identical lists must be grouped but handled per kernel.
    for (int i : {0, 1, 0, 0, 1, 0}) options.push_back(base[static_cast<size_t>(i)]);
    uint64_t max_total = 0;
    for (const auto& k : options) {
      uint64_t most = 0;
      for (const IlpOption& o : k) most = std::max(most, o.workspace_bytes);
      max_total += most;
    }
    const uint64_t budget = rng() % (max_total + 1);
    Result<IlpSolution> solution = SolveNetworkIlp(options, budget, Exact());
    ASSERT_TRUE(solution.ok());
    const Brute expected = Exhaustive(options, budget);
    ASSERT_EQ(expected.feasible, !solution->choice.empty());
    if (!expected.feasible) continue;
    ExpectValid(*solution, options, budget);
    EXPECT_NEAR(solution->total_time_ms, expected.time_ms, 1e-9);
    if (solution->report.variables > 0) {
      // Two groups, whatever the number of kernels.
      EXPECT_EQ(solution->report.constraints, 3);
    }
  }
}

TEST(SolveNetworkIlp, IsDeterministic) {
  std::mt19937_64 rng(42);
  const auto base = RandomNetwork(rng, 30);
  std::vector<std::vector<IlpOption>> options;
  for (int copy = 0; copy < 4; ++copy) options.insert(options.end(), base.begin(), base.end());
  uint64_t max_total = 0;
  for (const auto& k : options) {
    for (const IlpOption& o : k) max_total = std::max(max_total, o.workspace_bytes);
  }
  const uint64_t budget = max_total * options.size() / 3;
  Result<IlpSolution> a = SolveNetworkIlp(options, budget);
  Result<IlpSolution> b = SolveNetworkIlp(options, budget);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->choice, b->choice);
  EXPECT_EQ(a->report.status, b->report.status);
  EXPECT_EQ(a->report.bound_ms, b->report.bound_ms);
  EXPECT_EQ(a->total_time_ms, b->total_time_ms);
}

TEST(SolveNetworkIlp, DropsDominatedOptionsAndReportsOriginalIndices) {
  // Option 0 is dominated by option 2 (faster, smaller); option 1 is a duplicate of option 2.
  const std::vector<std::vector<IlpOption>> options = {
      {{5.0, 300}, {2.0, 100}, {2.0, 100}, {1.0, 1000}},
  };
  Result<IlpSolution> solution = SolveNetworkIlp(options, 500, Exact());
  ASSERT_TRUE(solution.ok());
  EXPECT_EQ(solution->choice, std::vector<int>({1}));  // the first of the equal pair
}

TEST(SolveNetworkIlp, TrivialWhenEverythingFits) {
  const std::vector<std::vector<IlpOption>> options = {{{3.0, 0}, {1.0, 10}}, {{2.0, 5}}};
  Result<IlpSolution> solution = SolveNetworkIlp(options, 15, Exact());
  ASSERT_TRUE(solution.ok());
  EXPECT_EQ(solution->report.status, "optimal");
  EXPECT_EQ(solution->choice, std::vector<int>({1, 0}));
  EXPECT_DOUBLE_EQ(solution->report.gap, 0.0);
  EXPECT_DOUBLE_EQ(solution->report.bound_ms, 3.0);
}

TEST(SolveNetworkIlp, RejectsInvalidInput) {
  Result<IlpSolution> empty_kernel = SolveNetworkIlp({{{1.0, 0}}, {}}, 10);
  ASSERT_FALSE(empty_kernel.ok());
  EXPECT_EQ(empty_kernel.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(empty_kernel.status().message(), ::testing::HasSubstr("options[1]"));
  Result<IlpSolution> nan = SolveNetworkIlp({{{std::nan(""), 0}}}, 10);
  EXPECT_EQ(nan.status().code(), StatusCode::kInvalidArgument);
  IlpOptions no_time;
  no_time.time_limit_s = 0;
  EXPECT_EQ(SolveNetworkIlp({{{1.0, 0}}}, 10, no_time).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(SolveNetworkIlp, LargeNetworkSolvesToOptimality) {
  // 300 kernels in 30 shapes with 12 options each: what a ResNet looks like to the ILP.
  std::mt19937_64 rng(8);
  std::vector<std::vector<IlpOption>> shapes(30);
  for (auto& shape : shapes) {
    double time = 20.0 + static_cast<double>(rng() % 100);
    uint64_t ws = rng() % 1000;
    for (int j = 0; j < 12; ++j) {
      shape.push_back({time, ws});
      time *= 0.6 + 0.35 * static_cast<double>(rng() % 100) / 100.0;
      ws += 1 + rng() % (64ull << 20);
    }
  }
  std::vector<std::vector<IlpOption>> options;
  uint64_t fastest = 0;
  for (int i = 0; i < 300; ++i) {
    options.push_back(shapes[rng() % shapes.size()]);
    fastest += options.back().back().workspace_bytes;
  }
  Result<IlpSolution> solution = SolveNetworkIlp(options, fastest / 4);
  ASSERT_TRUE(solution.ok());
  EXPECT_EQ(solution->report.status, "optimal");
  EXPECT_LE(solution->report.gap, 1e-3);
  ExpectValid(*solution, options, fastest / 4);
}

TEST(SolveNetworkIlp, ATinyTimeLimitStillGivesAFeasiblePlan) {
  std::mt19937_64 rng(9);
  std::vector<std::vector<IlpOption>> options;
  uint64_t fastest = 0;
  for (int k = 0; k < 200; ++k) {
    std::vector<IlpOption> front;
    double time = 50.0 + static_cast<double>(rng() % 50);
    uint64_t ws = 0;
    for (int j = 0; j < 20; ++j) {
      front.push_back({time, ws});
      time *= 0.8 + 0.15 * static_cast<double>(rng() % 100) / 100.0;
      ws += 1 + rng() % (32ull << 20);
    }
    fastest += front.back().workspace_bytes;
    options.push_back(std::move(front));
  }
  IlpOptions hurry;
  hurry.relative_gap = 0;
  hurry.time_limit_s = 1e-6;
  Result<IlpSolution> solution = SolveNetworkIlp(options, fastest / 3, hurry);
  ASSERT_TRUE(solution.ok());
  EXPECT_THAT(solution->report.status, ::testing::AnyOf("optimal", "time_limit"));
  ExpectValid(*solution, options, fastest / 3);
  EXPECT_LE(solution->report.bound_ms, solution->report.objective_ms);
  EXPECT_GE(solution->report.gap, 0.0);
}

}  // namespace
}  // namespace ucudnn
