// The limit-aware size rule (core/size_rule.h): which micro-batch sizes a workspace limit can
// use. No GPU, no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/size_rule.h"
#include "worker/worker_test_util.h"

namespace ucudnn {
namespace {

using ::testing::ElementsAre;
using worker::testing::MeasuredEntry;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// At every power-of-two size up to 64: algorithm 0 needs no workspace and takes 1 ms a sample;
// algorithm 1 is twice as fast and needs 1 MiB a sample.
TimingTable LinearTable(int64_t largest) {
  TimingTable table;
  for (int64_t b = 1; b <= largest; b *= 2) {
    table.entries.push_back(MeasuredEntry(b, 0, 1.0 * b, 0));
    table.entries.push_back(MeasuredEntry(b, 1, 0.5 * b, kMiB * b));
  }
  return table;
}

TEST(SmallerSizesCanHelp, OnlyWhereTheFastestConfigurationNeedsMoreThanTheLimit) {
  const TimingTable table = LinearTable(64);
  EXPECT_FALSE(SmallerSizesCanHelp(table, 64, 64 * kMiB));  // the fastest fits
  EXPECT_TRUE(SmallerSizesCanHelp(table, 64, 63 * kMiB));
  EXPECT_FALSE(SmallerSizesCanHelp(table, 8, 8 * kMiB));
  // A size nothing ran at (not measured, or every configuration failed): smaller ones may.
  EXPECT_TRUE(SmallerSizesCanHelp(table, 128, 1 << 30));
  TimingTable failed;
  failed.entries.push_back(MeasuredEntry(4, 0, 1.0, 0, TimingStatus::kFailed));
  EXPECT_TRUE(SmallerSizesCanHelp(failed, 4, 1 << 30));
}

TEST(SmallerSizesCanHelp, TheFrameworksTimeAndSlowerConfigurationsDoNotCount) {
  TimingTable table = LinearTable(16);
  // PyTorch's own, faster and without workspace: not a configuration the plans can run.
  table.entries.push_back(MeasuredEntry(16, kFrameworkAlgo, 1.0, 0));
  EXPECT_TRUE(SmallerSizesCanHelp(table, 16, kMiB));
  // A tie with the fastest that fits: no smaller size can do better.
  table.entries.push_back(MeasuredEntry(16, 2, 8.0, 0));
  EXPECT_FALSE(SmallerSizesCanHelp(table, 16, kMiB));
}

TEST(SizesForLimit, SplitsTwiceThenOnlyWhereTheWorkspaceOrTheRunsAskForIt) {
  const TimingTable table = LinearTable(64);
  const std::vector<int64_t> sizes = MicroBatchSizes(BatchPolicy::kPowerOfTwo, 64);
  ASSERT_EQ(kSplitsAlwaysTimed, 2);
  // 1 GiB: the fastest fits everywhere and no size runs faster per sample: the mini-batch and
  // its two splits.
  EXPECT_THAT(SizesForLimit(table, sizes, 64, 1 << 30), ElementsAre(64, 32, 16));
  // 16 MiB: the fast algorithm fits from 16 down, so 16 runs twice as fast per sample as 32
  // within the limit: 8 is timed too, where the split pays no more.
  EXPECT_THAT(SizesForLimit(table, sizes, 64, 16 * kMiB), ElementsAre(64, 32, 16, 8));
  // No workspace: the fastest never fits: every size.
  EXPECT_THAT(SizesForLimit(table, sizes, 64, 0), ElementsAre(64, 32, 16, 8, 4, 2, 1));
}

TEST(SizesForLimit, ASplitThatRunsFasterPerSampleIsSplitAgain) {
  // One algorithm without workspace, 1 ms a sample from 32 up and 0.25 ms at 16 and below (a
  // kernel that suits small sizes).
  TimingTable table;
  for (int64_t b = 1; b <= 64; b *= 2)
    table.entries.push_back(MeasuredEntry(b, 0, (b > 16 ? 1.0 : 0.25) * b, 0));
  const std::vector<int64_t> sizes = MicroBatchSizes(BatchPolicy::kPowerOfTwo, 64);
  EXPECT_THAT(SizesForLimit(table, sizes, 64, 1 << 30), ElementsAre(64, 32, 16, 8));
}

TEST(SizesForLimit, AMiniBatchThatIsNoPowerOfTwoKeepsTheSizesThatMakeIt) {
  TimingTable table = LinearTable(64);
  table.entries.push_back(MeasuredEntry(96, 0, 96.0, 0));
  table.entries.push_back(MeasuredEntry(96, 1, 48.0, 96 * kMiB));
  const std::vector<int64_t> sizes = MicroBatchSizes(BatchPolicy::kPowerOfTwo, 96);
  // 96 = 64 + 32, and 64 is split once more: nothing below pays.
  EXPECT_THAT(SizesForLimit(table, sizes, 96, 1 << 30), ElementsAre(96, 64, 32));
  // Under 64 MiB the fastest at 96 does not fit: 32 runs twice as fast per sample within the
  // limit as 96, so it is split, down to 16, where that pays no more.
  EXPECT_THAT(SizesForLimit(table, sizes, 96, 64 * kMiB), ElementsAre(96, 64, 32, 16));
  // Sizes without the mini-batch itself (a table of the offline mode's sizes): its sum.
  EXPECT_THAT(SizesForLimit(table, {1, 2, 4, 8, 16, 32, 64}, 96, 1 << 30), ElementsAre(64, 32));
}

// The full table's entries at `sizes`, as a search in rounds would have timed them.
void TimeSizes(const TimingTable& full, const std::vector<int64_t>& sizes, TimingTable* so_far) {
  for (const Timing& t : full.entries) {
    if (std::find(sizes.begin(), sizes.end(), t.micro_batch) != sizes.end()) {
      so_far->entries.push_back(t);
    }
  }
}

// The rounds of a search (NextSizesForLimit until it asks nothing) over `full`'s times: the
// sizes of each round.
std::vector<std::vector<int64_t>> Rounds(const TimingTable& full, int64_t mini_batch,
                                         uint64_t limit) {
  const std::vector<int64_t> sizes = MicroBatchSizes(BatchPolicy::kPowerOfTwo, mini_batch);
  TimingTable so_far;
  std::vector<std::vector<int64_t>> rounds;
  for (std::vector<int64_t> next = NextSizesForLimit(so_far, sizes, mini_batch, limit);
       !next.empty(); next = NextSizesForLimit(so_far, sizes, mini_batch, limit)) {
    rounds.push_back(next);
    TimeSizes(full, next, &so_far);
    if (rounds.size() > sizes.size()) break;  // never: each round times a new size
  }
  return rounds;
}

TEST(NextSizesForLimit, RoundsTimeWhatTheRuleAsksOfTheWholeTableAndNoMore) {
  const TimingTable table = LinearTable(64);
  // The always-timed sizes first, at once; below them one size per round, each decided by the
  // times of the round before.
  EXPECT_THAT(Rounds(table, 64, 1 << 30), ElementsAre(ElementsAre(64, 32, 16)));
  EXPECT_THAT(Rounds(table, 64, 16 * kMiB), ElementsAre(ElementsAre(64, 32, 16), ElementsAre(8)));
  EXPECT_THAT(Rounds(table, 64, 0), ElementsAre(ElementsAre(64, 32, 16), ElementsAre(8),
                                                ElementsAre(4), ElementsAre(2), ElementsAre(1)));
  for (uint64_t limit : {uint64_t{0}, 4 * kMiB, 16 * kMiB, uint64_t{1} << 30}) {
    std::vector<int64_t> timed;
    for (const std::vector<int64_t>& round : Rounds(table, 64, limit)) {
      timed.insert(timed.end(), round.begin(), round.end());
    }
    std::sort(timed.begin(), timed.end(), std::greater<>());
    EXPECT_EQ(timed, SizesForLimit(table, MicroBatchSizes(BatchPolicy::kPowerOfTwo, 64), 64, limit))
        << "limit " << limit;
  }
}

TEST(NextSizesForLimit, ATableThatHoldsTheRulesSizesAsksNothing) {
  const TimingTable table = LinearTable(64);
  const std::vector<int64_t> sizes = MicroBatchSizes(BatchPolicy::kPowerOfTwo, 64);
  EXPECT_THAT(NextSizesForLimit(table, sizes, 64, 0), ElementsAre());
  TimingTable covered;
  TimeSizes(table, {64, 32, 16}, &covered);
  EXPECT_THAT(NextSizesForLimit(covered, sizes, 64, 1 << 30), ElementsAre());
  // A smaller limit asks more of the same table (a job for it widens the table).
  EXPECT_THAT(NextSizesForLimit(covered, sizes, 64, 16 * kMiB), ElementsAre(8));
  // A size whose every configuration failed counts as timed, and smaller ones may help there.
  TimingTable failed = covered;
  failed.entries.push_back(MeasuredEntry(8, 0, 1.0, 0, TimingStatus::kFailed));
  EXPECT_THAT(NextSizesForLimit(failed, sizes, 64, 16 * kMiB), ElementsAre(4));
  // PyTorch's own time at the mini-batch (a job's) does not make the mini-batch timed.
  TimingTable framework_only;
  framework_only.entries.push_back(MeasuredEntry(64, kFrameworkAlgo, 1.0, 0));
  EXPECT_THAT(NextSizesForLimit(framework_only, sizes, 64, 1 << 30), ElementsAre(64, 32, 16));
}

// Mini-batch 4. No workspace: A takes 1.0 ms at 4, 0.6 at 2, 0.5 at 1. C takes 0.2 ms at 2 with 50
// bytes, B 0.55 ms at 4 with 100; at limits of 50 bytes and more, two micro-batches of C (0.4 ms)
// are the fastest plan. A failed entry and the framework's own are never usable.
TEST(UsableEntries, ThoseThatWouldBeInAFastestPlanWereTheyMarginFaster) {
  TimingTable table;
  table.entries = {MeasuredEntry(4, 0, 1.0, 0), MeasuredEntry(4, 1, 0.55, 100),
                   MeasuredEntry(2, 0, 0.6, 0), MeasuredEntry(2, 2, 0.2, 50),
                   MeasuredEntry(1, 0, 0.5, 0), MeasuredEntry(1, 3, 0.01, 0),
                   MeasuredEntry(4, 4, 0.01, 0)};
  table.entries[5].status = TimingStatus::kFailed;
  table.entries[6].algo = kFrameworkAlgo;
  // Without workspace A at 4 is the fastest plan (1.0 ms). A at 2 read 25% fast (0.48 + 0.6 ms)
  // does not beat it; read 100% fast (0.3 + 0.6 ms) it does. A at 1 would need 0.5 / 3 ms, B
  // (0.55 ms) 0.4 ms, against C's split; no speed makes A at 1 usable: the 3 samples left take
  // 1.1 ms without workspace.
  EXPECT_THAT(UsableEntries(table, 4, 0.25),
              ElementsAre(true, false, false, true, false, false, false));
  EXPECT_THAT(UsableEntries(table, 4, 1.0),
              ElementsAre(true, true, true, true, false, false, false));
  EXPECT_THAT(UsableEntries(table, 4, 100.0),
              ElementsAre(true, true, true, true, false, false, false));
  EXPECT_THAT(UsableEntries(TimingTable{}, 4, 0.25), ElementsAre());
}

}  // namespace
}  // namespace ucudnn
