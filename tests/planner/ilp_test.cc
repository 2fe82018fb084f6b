// The network-wide ILP against exhaustive search: random networks, infeasible budgets, budgets
// at exact boundaries, repeated kernels, determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>

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

// The exact optimum by merging the kernels' (workspace, time) fronts one kernel at a time: every
// combination's non-dominated (workspace, time) pairs survive, so it equals exhaustive search
// but stays fast for networks too large to enumerate.
Brute ExactByFronts(const std::vector<std::vector<IlpOption>>& options, uint64_t budget) {
  std::vector<std::pair<uint64_t, double>> front = {{0, 0.0}};
  for (const auto& kernel : options) {
    std::vector<std::pair<uint64_t, double>> next;
    for (const auto& [ws, time] : front) {
      for (const IlpOption& o : kernel) {
        if (ws + o.workspace_bytes <= budget)
          next.emplace_back(ws + o.workspace_bytes, time + o.time_ms);
      }
    }
    std::sort(next.begin(), next.end());
    front.clear();
    for (const auto& point : next) {
      if (front.empty() || point.second < front.back().second) front.push_back(point);
    }
  }
  Brute best;
  for (const auto& point : front) {
    best.feasible = true;
    best.time_ms = std::min(best.time_ms, point.second);
  }
  return best;
}

// The report's documented invariants against the true optimum: the raw bound is a lower bound,
// the objective an upper one, the gap their relative difference, and the status matches it.
void ExpectHonestReport(const IlpReport& report, double optimum, double relative_gap) {
  const double tolerance = 1e-9 * std::max(1.0, optimum);
  EXPECT_LE(report.bound_ms, optimum + tolerance);
  EXPECT_GE(report.objective_ms, optimum - tolerance);
  if (report.objective_ms > 0) {
    EXPECT_DOUBLE_EQ(report.gap, (report.objective_ms - report.bound_ms) / report.objective_ms);
  }
  const double excess = report.objective_ms - report.bound_ms;
  const double slack = std::max(kIlpOptimalAbsoluteMs, kIlpOptimalRelative * report.objective_ms);
  if (report.status == "optimal") {
    EXPECT_LE(excess, slack);
    EXPECT_NEAR(report.objective_ms, optimum, tolerance);
  } else if (report.status == "gap_limit") {
    EXPECT_GT(excess, slack);
    EXPECT_LE(excess, relative_gap * report.objective_ms + slack);
  } else {
    ADD_FAILURE() << "status " << report.status << " without a time limit";
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
    ExpectHonestReport(solution->report, expected.time_ms, 0);
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
  // The bound is the sum of the fastest options, a bound of any choice.
  EXPECT_DOUBLE_EQ(solution->report.bound_ms, 3.0);
}

// Larger random networks solved with a relative gap: the bound CBC and the LP proved is below
// the true optimum, the objective above it, and "optimal" / "gap_limit" say which holds.
TEST(SolveNetworkIlp, ReportsTheRealBoundAndGapOnRandomNetworks) {
  std::mt19937_64 rng(2025);
  std::map<std::string, int> statuses;
  for (int round = 0; round < 60; ++round) {
    const int kernels = 8 + static_cast<int>(rng() % 12);
    std::vector<std::vector<IlpOption>> options(static_cast<size_t>(kernels));
    uint64_t fastest = 0, smallest = 0;
    for (auto& kernel : options) {
      double time = 5.0 + static_cast<double>(rng() % 1000) / 100.0;
      uint64_t ws = rng() % 4096;
      smallest += ws;
      const int count = 2 + static_cast<int>(rng() % 6);
      for (int j = 0; j < count; ++j) {
        kernel.push_back({time, ws});
        time *= 0.55 + 0.4 * static_cast<double>(rng() % 1000) / 1000.0;
        ws += 1 + rng() % (8ull << 20);
      }
      fastest += kernel.back().workspace_bytes;
    }
    const uint64_t budget = smallest + (fastest - smallest) * (1 + rng() % 8) / 10;
    for (double gap : {0.0, 1e-4, 0.02}) {
      SCOPED_TRACE("round " + std::to_string(round) + " gap " + std::to_string(gap));
      IlpOptions settings;
      settings.relative_gap = gap;
      settings.time_limit_s = 60;
      Result<IlpSolution> solution = SolveNetworkIlp(options, budget, settings);
      ASSERT_TRUE(solution.ok()) << solution.status().ToString();
      const Brute expected = ExactByFronts(options, budget);
      ASSERT_TRUE(expected.feasible);
      ExpectValid(*solution, options, budget);
      ExpectHonestReport(solution->report, expected.time_ms, gap);
      if (gap == 0) {
        EXPECT_EQ(solution->report.status, "optimal");
      }
      ++statuses[solution->report.status];
    }
  }
  // Both outcomes occur: a proof, and a stop at the requested gap.
  EXPECT_GT(statuses["optimal"], 60);
  EXPECT_GT(statuses["gap_limit"], 10);
}

// Several equally fast answers: the tie rules of ilp.h pick one, and it is this one.
TEST(SolveNetworkIlp, BreaksTiesByTheDocumentedRule) {
  // Each kernel gains 4 ms from its fast option; the budget fits any one of them, not two.
  // Rule 2: of the three equally fast answers, the smallest total workspace (kernel 1's 60).
  const std::vector<std::vector<IlpOption>> three = {
      {{10.0, 0}, {6.0, 100}},
      {{12.0, 0}, {8.0, 60}},
      {{9.0, 0}, {5.0, 80}},
  };
  for (double gap : {0.0, 1e-4}) {
    IlpOptions settings;
    settings.relative_gap = gap;
    Result<IlpSolution> solution = SolveNetworkIlp(three, 100, settings);
    ASSERT_TRUE(solution.ok());
    EXPECT_EQ(solution->choice, std::vector<int>({0, 1, 0}));
    EXPECT_DOUBLE_EQ(solution->total_time_ms, 27.0);
    EXPECT_EQ(solution->total_workspace_bytes, 60u);
  }

  // Rule 3: kernels 0, 2 and 3 have identical options and two of them can run fast (kernel 1
  // gains less per byte): the earlier kernel takes the smaller workspace, so kernels 2 and 3 run
  // fast. Rule 1, with room for all: kernel 1's equal options 1 and 2 report the lower index.
  const std::vector<IlpOption> repeated = {{10.0, 0}, {6.0, 100}};
  const std::vector<std::vector<IlpOption>> layers = {
      repeated,
      {{10.0, 0}, {9.0, 100}, {9.0, 100}},
      repeated,
      repeated,
  };
  Result<IlpSolution> two = SolveNetworkIlp(layers, 200, Exact());
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->choice, std::vector<int>({0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(two->total_time_ms, 32.0);
  Result<IlpSolution> all = SolveNetworkIlp(layers, 400, Exact());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->choice, std::vector<int>({1, 1, 1, 1}));

  // Rule 2 across several option steps: three equally fast answers, (7 + 8) at 130 bytes,
  // (6 + 9) at 150 and (9 + 6) at 80; exchanges reach the last from either of the others.
  const std::vector<std::vector<IlpOption>> steps = {
      {{9.0, 0}, {7.0, 100}, {6.0, 150}},
      {{9.0, 0}, {8.0, 30}, {6.0, 80}},
  };
  for (uint64_t budget : {130, 150, 160}) {
    Result<IlpSolution> stepped = SolveNetworkIlp(steps, budget, Exact());
    ASSERT_TRUE(stepped.ok());
    EXPECT_DOUBLE_EQ(stepped->total_time_ms, 15.0);
    EXPECT_EQ(stepped->choice, std::vector<int>({0, 2})) << budget;
    EXPECT_EQ(stepped->total_workspace_bytes, 80u);
  }
}

// The tie rules on random networks with coarse times (ties everywhere): no exchange between two
// kernels keeps the time and frees workspace, and identical kernels hold their options by
// increasing workspace in kernel order.
TEST(SolveNetworkIlp, NoPairExchangeFreesWorkspaceAtEqualTime) {
  std::mt19937_64 rng(4711);
  int exchanged_somewhere = 0;
  for (int round = 0; round < 80; ++round) {
    std::vector<std::vector<IlpOption>> base(3);
    for (auto& kernel : base) {
      double time = static_cast<double>(6 + rng() % 6);
      uint64_t ws = 0;
      const int count = 2 + static_cast<int>(rng() % 3);
      for (int j = 0; j < count; ++j) {
        kernel.push_back({time, ws});
        time -= static_cast<double>(1 + rng() % 2);
        ws += 10 * (1 + rng() % 6);
      }
    }
    std::vector<std::vector<IlpOption>> options;
    for (size_t i : {0, 1, 2, 0, 1, 0}) options.push_back(base[i]);
    uint64_t most = 0;
    for (const auto& k : options) most += k.back().workspace_bytes;
    const uint64_t budget = rng() % (most + 1);
    Result<IlpSolution> solution = SolveNetworkIlp(options, budget, Exact());
    ASSERT_TRUE(solution.ok());
    if (solution->choice.empty()) continue;
    ExpectValid(*solution, options, budget);
    EXPECT_NEAR(solution->total_time_ms, Exhaustive(options, budget).time_ms, 1e-9);
    const std::vector<int>& c = solution->choice;
    for (size_t i = 0; i < options.size(); ++i) {
      for (size_t j = 0; j < options.size(); ++j) {
        if (i == j) continue;
        const IlpOption& a = options[i][static_cast<size_t>(c[i])];
        const IlpOption& b = options[j][static_cast<size_t>(c[j])];
        for (const IlpOption& a2 : options[i]) {
          for (const IlpOption& b2 : options[j]) {
            if (a2.time_ms + b2.time_ms != a.time_ms + b.time_ms) continue;
            EXPECT_GE(a2.workspace_bytes + b2.workspace_bytes,
                      a.workspace_bytes + b.workspace_bytes)
                << "round " << round << ": kernels " << i << " and " << j;
            if (a2.workspace_bytes + b2.workspace_bytes < a.workspace_bytes + b.workspace_bytes) {
              ++exchanged_somewhere;
            }
          }
        }
      }
    }
    // Kernels 0, 3, 5 and 1, 4 are identical: workspaces never decrease along them.
    for (const std::vector<size_t>& same : {std::vector<size_t>{0, 3, 5}, {1, 4}}) {
      for (size_t n = 1; n < same.size(); ++n) {
        EXPECT_LE(options[same[n - 1]][static_cast<size_t>(c[same[n - 1]])].workspace_bytes,
                  options[same[n]][static_cast<size_t>(c[same[n]])].workspace_bytes);
      }
    }
  }
  EXPECT_EQ(exchanged_somewhere, 0);
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

TEST(SolveNetworkIlp, LargeNetworkSolvesToTheRequestedGap) {
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
  // The default relative gap, 1e-4: proven optimal, or stopped within that gap.
  EXPECT_THAT(solution->report.status, ::testing::AnyOf("optimal", "gap_limit"));
  EXPECT_LE(solution->report.gap, IlpOptions().relative_gap + 1e-9);
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
  EXPECT_EQ(solution->report.status, "time_limit");
  ExpectValid(*solution, options, fastest / 3);
  // Whatever was proven before the limit is a real bound: below the optimum, so below this
  // answer, and the gap is what those numbers say.
  EXPECT_LT(solution->report.bound_ms, solution->report.objective_ms);
  EXPECT_GT(solution->report.gap, 1e-3);
  EXPECT_DOUBLE_EQ(
      solution->report.gap,
      (solution->report.objective_ms - solution->report.bound_ms) / solution->report.objective_ms);
}

// The time limit covers the whole solve, the LP relaxation and the heuristics before CBC
// included: on a model where those alone take seconds, a short limit ends the solve soon after.
TEST(SolveNetworkIlp, TheTimeLimitCoversTheWholeSolve) {
  std::mt19937_64 rng(10);
  std::vector<std::vector<IlpOption>> options;
  uint64_t fastest = 0;
  for (int k = 0; k < 3000; ++k) {
    std::vector<IlpOption> front;
    double time = 50.0 + static_cast<double>(rng() % 50);
    uint64_t ws = 0;
    for (int j = 0; j < 60; ++j) {
      front.push_back({time, ws});
      time *= 0.9 + 0.09 * static_cast<double>(rng() % 100) / 100.0;
      ws += 1 + rng() % (32ull << 20);
    }
    fastest += front.back().workspace_bytes;
    options.push_back(std::move(front));
  }
  IlpOptions hurry;
  hurry.time_limit_s = 0.1;
  Result<IlpSolution> solution = SolveNetworkIlp(options, fastest / 3, hurry);
  ASSERT_TRUE(solution.ok());
  ExpectValid(*solution, options, fastest / 3);
  EXPECT_EQ(solution->report.status, "time_limit");
  // Generous against a loaded machine; uncut, the LP and the heuristics take seconds here.
  EXPECT_LT(solution->report.solve_seconds, 1.0);
  EXPECT_LE(solution->report.bound_ms, solution->report.objective_ms);
}

}  // namespace
}  // namespace ucudnn
