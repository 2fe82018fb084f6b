// Planning over both candidate spaces: the DP, the Pareto front and the ILP take legacy
// algorithms and graph-API engine configurations alike; a request for one space plans as if the
// other had never been measured; and a plan over both is never predicted slower than a plan over
// either space alone.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "planner_testing.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

Timing Legacy(int64_t b, int algo, double ms, uint64_t ws) {
  Timing t;
  t.micro_batch = b;
  t.algo = algo;
  t.time_ms = ms;
  t.workspace_bytes = ws;
  t.samples = 5;
  return t;
}

Timing Engine(int64_t b, const std::string& key, double ms, uint64_t ws) {
  Timing t = Legacy(b, kEngineAlgo, ms, ws);
  t.engine_config = key;
  return t;
}

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A kernel of batch 4 (sizes 1, 2, 4): the fastest undivided candidate is an engine that needs
// more than the limit; at size 2 an engine fits and beats every legacy algorithm.
TimingTable MixedTable() {
  TimingTable t;
  t.entries = {
      Legacy(4, 0, 10.0, 0),         Legacy(4, 1, 6.0, 80 * kMiB),
      Engine(4, "eng9{k2=1}", 4.0, 128 * kMiB),
      Legacy(2, 0, 5.0, 0),          Legacy(2, 1, 3.2, 40 * kMiB),
      Engine(2, "eng7", 2.5, 30 * kMiB), Engine(2, "eng9{k2=1}", 2.1, 64 * kMiB + 1),
      Legacy(1, 0, 2.6, 0),          Engine(1, "eng7", 1.4, 15 * kMiB),
  };
  return t;
}

TEST(EnginePlanningTest, DpChoosesTheFastestCandidateOfEitherSpaceWithinTheLimit) {
  const TimingTable table = MixedTable();
  Result<KernelConfig> config = SolveKernelDp(table, 4, BatchPolicy::kPowerOfTwo, 64 * kMiB);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  // 2 x (size 2 with eng7, 2.5 ms) = 5.0 ms beats 4 x eng7@1 (5.6) and every legacy choice
  // within the limit (legacy 1 undivided needs 80 MiB).
  ASSERT_EQ(config->segments.size(), 2u);
  for (const Segment& s : config->segments) {
    EXPECT_EQ(s.micro_batch, 2);
    EXPECT_EQ(s.algo, kEngineAlgo);
    EXPECT_EQ(s.engine_config, "eng7");
  }
  EXPECT_DOUBLE_EQ(config->time_ms, 5.0);
  // With room for the large engine, undivided engine 9 wins.
  Result<KernelConfig> roomy = SolveKernelDp(table, 4, BatchPolicy::kPowerOfTwo, 256 * kMiB);
  ASSERT_TRUE(roomy.ok());
  ASSERT_EQ(roomy->segments.size(), 1u);
  EXPECT_EQ(roomy->segments[0].engine_config, "eng9{k2=1}");
  // The undivided baseline within 64 MiB is legacy algorithm 0 (the others need more).
  Result<Segment> undivided = FastestUndivided(table, 4, 64 * kMiB);
  ASSERT_TRUE(undivided.ok());
  EXPECT_EQ(undivided->algo, 0);
  EXPECT_TRUE(undivided->engine_config.empty());
}

TEST(EnginePlanningTest, ParetoFrontMixesBothSpaces) {
  const std::vector<KernelConfig> front =
      ParetoFront(MixedTable(), 4, BatchPolicy::kPowerOfTwo, 1024 * kMiB);
  ASSERT_GE(front.size(), 3u);
  bool engine = false, legacy = false;
  for (size_t i = 0; i < front.size(); ++i) {
    for (const Segment& s : front[i].segments) {
      (s.engine_config.empty() ? legacy : engine) = true;
    }
    if (i > 0) {
      EXPECT_GT(front[i].workspace_bytes, front[i - 1].workspace_bytes);
      EXPECT_LT(front[i].time_ms, front[i - 1].time_ms);
    }
  }
  EXPECT_TRUE(engine);
  EXPECT_TRUE(legacy);  // the zero-workspace end is legacy algorithm 0
}

PlanRequest OneKernel(AlgorithmSpace space, WorkspaceMode mode, uint64_t bytes) {
  PlanRequest request;
  request.device.backend = "cudnn";
  request.device.name = "test gpu";
  ConvProblem p;
  p.c = p.k = 8;
  p.h = p.w = 8;
  p.r = p.s = 3;
  p.pad_h = p.pad_w = 1;
  request.kernels = {Kernel{p, 4, "k0"}, Kernel{p, 4, "k1"}};
  request.algorithms = space;
  request.workspace_mode = mode;
  request.workspace_bytes = bytes;
  return request;
}

TEST(EnginePlanningTest, ARequestForOneSpacePlansAsIfTheOtherWereNotMeasured) {
  const TimingTable table = MixedTable();
  const std::vector<const TimingTable*> tables = {&table, &table};
  Result<NetworkPlan> legacy =
      PlanNetwork(OneKernel(AlgorithmSpace::kLegacy, WorkspaceMode::kPerKernel, 64 * kMiB), tables);
  ASSERT_TRUE(legacy.ok()) << legacy.status().ToString();
  for (const KernelPlan& kp : legacy->kernels) {
    ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned);
    for (const Segment& s : kp.config.segments) EXPECT_TRUE(s.engine_config.empty());
    ASSERT_TRUE(kp.undivided.has_value());
    EXPECT_TRUE(kp.undivided->engine_config.empty());
  }
  Result<NetworkPlan> engines = PlanNetwork(
      OneKernel(AlgorithmSpace::kEngines, WorkspaceMode::kPerKernel, 64 * kMiB), tables);
  ASSERT_TRUE(engines.ok());
  for (const KernelPlan& kp : engines->kernels) {
    ASSERT_EQ(kp.status, KernelPlanStatus::kPlanned);
    for (const Segment& s : kp.config.segments) EXPECT_FALSE(s.engine_config.empty());
  }
  EXPECT_EQ(ParseAlgorithmSpace("legacy").value(), AlgorithmSpace::kLegacy);
  EXPECT_EQ(ParseAlgorithmSpace("ENGINES").value(), AlgorithmSpace::kEngines);
  EXPECT_EQ(ParseAlgorithmSpace("bogus").status().code(), StatusCode::kInvalidArgument);
}

// Over random tables whose candidates are split at random between the spaces, in every mode:
// the plan over both spaces is never predicted slower than either space's alone.
TEST(EnginePlanningTest, BothSpacesAreNeverPredictedSlowerThanEitherAlone) {
  std::mt19937_64 rng(20261125);
  const WorkspaceMode modes[] = {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalShared,
                                 WorkspaceMode::kTotalSum};
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    TimingTable table = testing_planner::RandomTable(rng, 8, 6);
    for (Timing& t : table.entries) {
      if (t.algo >= 3) {  // algorithms 3..5 become engine configurations
        t.engine_config = "eng" + std::to_string(t.algo);
        t.algo = kEngineAlgo;
      }
    }
    const std::vector<const TimingTable*> tables = {&table, &table};
    for (WorkspaceMode mode : modes) {
      const uint64_t budget = std::uniform_int_distribution<uint64_t>(0, 4000)(rng);
      auto plan = [&](AlgorithmSpace space) {
        PlanRequest request = OneKernel(space, mode, budget);
        request.kernels[0].mini_batch = request.kernels[1].mini_batch = 8;
        return PlanNetwork(request, tables);
      };
      Result<NetworkPlan> all = plan(AlgorithmSpace::kAll);
      ASSERT_TRUE(all.ok()) << all.status().ToString();
      for (AlgorithmSpace one : {AlgorithmSpace::kLegacy, AlgorithmSpace::kEngines}) {
        Result<NetworkPlan> alone = plan(one);
        ASSERT_TRUE(alone.ok());
        if (!alone->complete) continue;
        ASSERT_TRUE(all->complete) << "trial " << trial;
        // The ILP stops at its relative gap; the DP modes are exact.
        const double slack = mode == WorkspaceMode::kTotalSum ? 1e-3 : 1e-9;
        EXPECT_LE(all->total_time_ms, alone->total_time_ms * (1 + slack) + 1e-12)
            << "trial " << trial << " mode " << ToString(mode) << " vs " << ToString(one);
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 50);
}

}  // namespace
}  // namespace ucudnn
