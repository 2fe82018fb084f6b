// The search prior (engine/search_prior.h): which problems are nearby, which configurations lost
// on every one of them, and the benchmark leaving those out at large micro-batch sizes only. No
// GPU, no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ucudnn/engine/benchmark.h"
#include "ucudnn/engine/search_prior.h"
#include "worker/worker_test_util.h"

namespace ucudnn {
namespace {

using ::testing::HasSubstr;
using worker::testing::FastBenchmarkOptions;
using worker::testing::MeasuredEntry;
using worker::testing::TinyProblem;

ConvProblem Shape(int64_t c, int64_t k, int64_t hw) {
  ConvProblem p = TinyProblem(ConvOp::kForward, c);
  p.k = k;
  p.h = p.w = hw;
  return p;
}

// Algorithm 2 at `slow` times algorithm 0's time at sizes 16 and 32; algorithm 1 close behind.
KnownTable Known(const ConvProblem& p, double slow, uint64_t slow_workspace = 0) {
  KnownTable k{p, {}};
  for (int64_t b : {8, 16, 32}) {
    k.table.entries.push_back(MeasuredEntry(b, 0, 1.0 * b));
    k.table.entries.push_back(MeasuredEntry(b, 1, 1.2 * b));
    k.table.entries.push_back(MeasuredEntry(b, 2, slow * b, slow_workspace));
  }
  return k;
}

TEST(SearchPriorTest, NearbyMeansTheSameKindOfConvolutionWithSimilarChannels) {
  const ConvProblem p = Shape(64, 64, 56);
  EXPECT_TRUE(Nearby(p, Shape(128, 128, 28)));  // another stage: channels x2, spatial / 2
  EXPECT_TRUE(Nearby(p, Shape(32, 64, 7)));
  EXPECT_FALSE(Nearby(p, p));                   // itself is no evidence
  EXPECT_FALSE(Nearby(p, Shape(256, 64, 56)));  // channels x4
  ConvProblem other_op = Shape(64, 64, 28);
  other_op.op = ConvOp::kBackwardData;
  EXPECT_FALSE(Nearby(p, other_op));
  ConvProblem other_filter = Shape(64, 64, 28);
  other_filter.r = other_filter.s = 1;
  other_filter.pad_h = other_filter.pad_w = 0;
  EXPECT_FALSE(Nearby(p, other_filter));
  ConvProblem other_type = Shape(64, 64, 28);
  other_type.data_type = DataType::kFloat16;
  EXPECT_FALSE(Nearby(p, other_type));
}

TEST(SearchPriorTest, OnlyALossByTheFactorOnEveryNearbyProblemCounts) {
  const ConvProblem p = Shape(64, 64, 56);
  const ConvProblem a = Shape(128, 128, 28), b = Shape(32, 32, 112), far = Shape(512, 512, 7);
  // Lost by 4x on both nearby problems: left out, with a reason.
  auto losers = PriorLosers(p, {Known(a, 4.0), Known(b, 4.0), Known(far, 1.0)});
  ASSERT_EQ(losers.size(), 1u);
  EXPECT_THAT(losers.at("2"), HasSubstr("not measured"));
  // One nearby problem is not enough evidence.
  EXPECT_TRUE(PriorLosers(p, {Known(a, 4.0)}).empty());
  // 2.5x is within the factor on one of them: kept.
  EXPECT_TRUE(PriorLosers(p, {Known(a, 4.0), Known(b, 2.5)}).empty());
  // Slow but the only one with its (smaller) workspace... here the others need more: nothing
  // with at most its workspace beats it, so it did not lose.
  KnownTable lean_a = Known(a, 4.0), lean_b = Known(b, 4.0);
  for (KnownTable* k : {&lean_a, &lean_b}) {
    for (Timing& t : k->table.entries) t.workspace_bytes = t.algo == 2 ? 0 : 1024;
  }
  EXPECT_TRUE(PriorLosers(p, {lean_a, lean_b}).empty());
  // Counter-evidence at one large size of one table keeps it.
  KnownTable mixed = Known(b, 4.0);
  for (Timing& t : mixed.table.entries) {
    if (t.algo == 2 && t.micro_batch == 32) t.time_ms = 33;
  }
  EXPECT_TRUE(PriorLosers(p, {Known(a, 4.0), mixed}).empty());
  // Failed or unmeasured entries are no evidence either way.
  KnownTable failed = Known(b, 4.0);
  for (Timing& t : failed.table.entries) {
    if (t.algo == 2) t.status = TimingStatus::kFailed;
  }
  EXPECT_TRUE(PriorLosers(p, {Known(a, 4.0), failed}).empty());
}

TEST(SearchPriorTest, TheBenchmarkLeavesPriorLosersOutAtLargeSizesOnly) {
  auto backend = std::move(MakeBackend("cpu")).value();
  BenchmarkOptions options = FastBenchmarkOptions();
  options.prune_margin = 0.10;  // the prior works with the probes
  options.skip_factor = 0;
  const std::map<std::string, std::string> prior = {{"1", "not measured: test prior"}};
  options.prior = &prior;
  auto table = BenchmarkProblem(*backend, TinyProblem(ConvOp::kForward, 2), 32,
                                BatchPolicy::kPowerOfTwo, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  int left_out = 0;
  for (const Timing& t : table->entries) {
    if (t.algo == 1 && t.micro_batch >= kPriorFromMicroBatch) {
      EXPECT_TRUE(IsWorkerLimit(t));
      EXPECT_THAT(t.error, HasSubstr("test prior"));
      ++left_out;
    } else {
      EXPECT_EQ(t.status, TimingStatus::kOk) << t.micro_batch << " " << t.algo << " " << t.error;
    }
  }
  EXPECT_EQ(left_out, 2);  // sizes 16 and 32
}

}  // namespace
}  // namespace ucudnn
