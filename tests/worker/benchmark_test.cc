// The benchmark engine's handling of a device in trouble, on a CPU backend that plays one
// (RenamedCpuBackend): a device lost mid-table, an out-of-memory device (operands and workspace
// that do not fit), runs that fail on a sound device; and its sampling rules (warm-up required,
// short runs timed in groups). No GPU, no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/size_rule.h"
#include "ucudnn/engine/benchmark.h"
#include "worker/worker_test_util.h"

namespace ucudnn::worker {
namespace {

using namespace ucudnn::worker::testing;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

// One sample per configuration, each run timed on its own: the number of runs per configuration
// is then fixed (the probe after one warm-up: 2 runs), which the device-loss tests count on.
BenchmarkOptions CountableOptions() {
  BenchmarkOptions o = FastBenchmarkOptions();
  o.short_run_ms = 0;
  o.config_time_budget_ms = 60'000;
  return o;
}

// CountableOptions() with the probes and skips on, as a worker runs.
BenchmarkOptions ProbingOptions() {
  BenchmarkOptions o = CountableOptions();
  o.prune_margin = 0.10;
  o.skip_factor = 2.0;
  return o;
}

void ExpectComplete(const TimingTable& table, ConvBackend& backend, const ConvProblem& p,
                    int64_t max_micro_batch, BatchPolicy policy) {
  ASSERT_EQ(table.entries.size(), ExpectedTimings(backend, p, max_micro_batch, policy));
  std::set<std::pair<int64_t, int>> seen;
  for (const Timing& t : table.entries) seen.insert({t.micro_batch, t.algo});
  EXPECT_EQ(seen.size(), table.entries.size());
}

TEST(BenchmarkOptionsTest, WarmUpIsRequired) {
  BenchmarkOptions o;
  o.warmup_runs = 0;
  const Status s = Validate(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("warmup_runs"));
  o.warmup_runs = 1;
  EXPECT_TRUE(Validate(o).ok());
  o.max_group = 0;
  EXPECT_THAT(Validate(o).message(), HasSubstr("max_group"));
  o = {};
  o.short_run_ms = -1;
  EXPECT_THAT(Validate(o).message(), HasSubstr("short_run_ms"));
  RenamedCpuBackend cpu("cpu");
  BenchmarkOptions cold = FastBenchmarkOptions();
  cold.warmup_runs = 0;
  EXPECT_EQ(BenchmarkProblem(cpu, TinyProblem(ConvOp::kForward, 4), 2, BatchPolicy::kAll, cold)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(BenchmarkSizesTest, ExactlyTheMicroBatchesGivenAndOnlyIncreasingOnes) {
  RenamedCpuBackend cpu("cpu");
  const ConvProblem p = TinyProblem(ConvOp::kForward, 4);
  const std::vector<int64_t> sizes = {1, 3, 4};  // not the sizes of any one policy
  auto table = BenchmarkMicroBatches(cpu, p, sizes, FastBenchmarkOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  std::set<int64_t> measured;
  for (const Timing& t : table->entries) {
    measured.insert(t.micro_batch);
    EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
    EXPECT_GT(t.time_ms, 0);
  }
  EXPECT_EQ(measured, (std::set<int64_t>{1, 3, 4}));
  EXPECT_EQ(table->entries.size(), sizes.size() * cpu.Algorithms(p.op).size());

  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{}, {2, 2}, {3, 1}, {0, 1}, {1, -4}}) {
    const Status s = BenchmarkMicroBatches(cpu, p, bad, FastBenchmarkOptions()).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << ::testing::PrintToString(bad);
  }
  EXPECT_THAT(BenchmarkMicroBatches(cpu, p, {2, 2}, FastBenchmarkOptions()).status().message(),
              HasSubstr("strictly increasing"));
}

// A search for one workspace limit in rounds (BenchmarkForLimit): the always-timed sizes, then
// what the size rule asks of their times, until the table covers the limit; nothing where what
// is known covers it already.
TEST(BenchmarkForLimitTest, TimesTheSizesTheRuleAsksUntilTheTableCoversTheLimit) {
  RenamedCpuBackend cpu("cpu");
  const ConvProblem p = TinyProblem(ConvOp::kForward, 4);
  const std::vector<int64_t> sizes = MicroBatchSizes(BatchPolicy::kPowerOfTwo, 16);
  for (uint64_t limit : {uint64_t{0}, uint64_t{1} << 40}) {
    int64_t last_done = 0, last_total = 0;
    auto table = BenchmarkForLimit(cpu, p, 16, BatchPolicy::kPowerOfTwo, limit, {},
                                   FastBenchmarkOptions(), [&](const BenchmarkProgress& progress) {
                                     EXPECT_GE(progress.done, last_done);
                                     last_done = progress.done;
                                     last_total = progress.total;
                                   });
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    std::set<int64_t> measured;
    for (const Timing& t : table->entries) measured.insert(t.micro_batch);
    // The mini-batch and its first two splits, whatever the times; each size once.
    EXPECT_TRUE(measured.count(16) && measured.count(8) && measured.count(4)) << limit;
    EXPECT_EQ(table->entries.size(), measured.size() * cpu.Algorithms(p.op).size());
    // Covered: the rule asks nothing more of what was measured.
    EXPECT_THAT(NextSizesForLimit(*table, sizes, 16, limit), ::testing::IsEmpty()) << limit;
    // The progress counted over every round, to the end.
    EXPECT_EQ(last_done, static_cast<int64_t>(table->entries.size()));
    EXPECT_EQ(last_total, last_done);
  }
  // What is stored already covers every limit: nothing runs.
  auto full = BenchmarkProblem(cpu, p, 16, BatchPolicy::kPowerOfTwo, FastBenchmarkOptions());
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  auto none =
      BenchmarkForLimit(cpu, p, 16, BatchPolicy::kPowerOfTwo, 0, *full, FastBenchmarkOptions());
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_THAT(none->entries, ::testing::IsEmpty());
  // What is stored counts: the always-timed sizes known, a round times only below them.
  TimingTable known;
  for (const Timing& t : full->entries) {
    if (t.micro_batch >= 4) known.entries.push_back(t);
  }
  auto below =
      BenchmarkForLimit(cpu, p, 16, BatchPolicy::kPowerOfTwo, 0, known, FastBenchmarkOptions());
  ASSERT_TRUE(below.ok()) << below.status().ToString();
  for (const Timing& t : below->entries) EXPECT_LT(t.micro_batch, 4);
  // A known size missing a candidate (a partial table, given back by a busy GPU) is timed again
  // whole; the complete ones are not.
  TimingTable partial = known;
  for (auto it = partial.entries.begin(); it != partial.entries.end(); ++it) {
    if (it->micro_batch == 8) {
      partial.entries.erase(it);
      break;
    }
  }
  auto again =
      BenchmarkForLimit(cpu, p, 16, BatchPolicy::kPowerOfTwo, 0, partial, FastBenchmarkOptions());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  std::set<int64_t> again_sizes;
  for (const Timing& t : again->entries) again_sizes.insert(t.micro_batch);
  EXPECT_EQ(again_sizes.count(8), 1u);
  EXPECT_EQ(again_sizes.count(16), 0u);
  EXPECT_EQ(again_sizes.count(4), 0u);
  EXPECT_EQ(BenchmarkForLimit(cpu, p, 0, BatchPolicy::kPowerOfTwo, 0, {}).status().code(),
            StatusCode::kInvalidArgument);
}

// The backend is asked once, before anything is measured, to prepare every size on the threads
// the options allow; with one thread it prepares nothing ahead and the table is the same.
class PrepareRecordingBackend : public RenamedCpuBackend {
 public:
  PrepareRecordingBackend() : RenamedCpuBackend("cpu") {}
  void Prepare(const ConvProblem& p, const std::vector<int64_t>& batches, int threads) override {
    calls.push_back({CanonicalKey(p), batches, threads, queries});
  }
  Result<size_t> WorkspaceSize(const ConvProblem& p, int64_t batch,
                               const Algorithm& algo) override {
    ++queries;
    return RenamedCpuBackend::WorkspaceSize(p, batch, algo);
  }
  struct Call {
    std::string problem;
    std::vector<int64_t> batches;
    int threads = 0;
    int queries_before = 0;  // workspace queries (the first thing measured) before Prepare
  };
  std::vector<Call> calls;
  int queries = 0;
};

TEST(BenchmarkPrepareTest, EverySizeIsPreparedOnceBeforeAnyRun) {
  const ConvProblem p = TinyProblem(ConvOp::kBackwardData, 4);
  const std::vector<int64_t> sizes = {1, 2, 4};
  PrepareRecordingBackend backend;
  BenchmarkOptions options = FastBenchmarkOptions();
  options.prepare_threads = 6;
  auto table = BenchmarkMicroBatches(backend, p, sizes, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_EQ(backend.calls.size(), 1u);
  EXPECT_EQ(backend.calls[0].problem, CanonicalKey(p));
  EXPECT_EQ(backend.calls[0].batches, sizes);
  EXPECT_EQ(backend.calls[0].threads, 6);
  EXPECT_EQ(backend.calls[0].queries_before, 0);
  EXPECT_GT(backend.queries, 0);
  EXPECT_EQ(table->entries.size(), sizes.size() * backend.Algorithms(p.op).size());

  PrepareRecordingBackend serial;
  options.prepare_threads = 1;
  ASSERT_TRUE(BenchmarkMicroBatches(serial, p, sizes, options).ok());
  EXPECT_TRUE(serial.calls.empty());

  options.prepare_threads = 0;
  EXPECT_THAT(Validate(options).message(), HasSubstr("prepare_threads"));
}

// Scripted times (ms) per algorithm and micro-batch b: 0 "fast" (1 MiB of workspace);
// 1 "saturated" (10 b: its time per sample never falls) and 2 "improving" (15 sqrt(b)), no
// workspace; 3 "saturated_short" (0.5 b, runs under the 10 ms the saturation rule looks at;
// 512 KiB, so that it does not rule 1 and 2 out as faster with at most their workspace).
class ScriptedTimesBackend : public RenamedCpuBackend {
 public:
  ScriptedTimesBackend() : RenamedCpuBackend("scripted") {}
  std::vector<AlgorithmInfo> Algorithms(ConvOp) const override {
    return {{0, "fast"}, {1, "saturated"}, {2, "improving"}, {3, "saturated_short"}};
  }
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t b, const Algorithm& algo) override {
    ++asked[{algo.id, b}];
    return algo.id == 0 ? size_t{1} << 20 : algo.id == 3 ? size_t{1} << 19 : 0;
  }
  Result<std::vector<double>> TimeRunGroups(const ConvProblem&, int64_t b, const Algorithm& algo,
                                            const ConvOperands&, void*, size_t, int, int samples,
                                            int, bool) override {
    ++runs[{algo.id, b}];
    const double x = static_cast<double>(b);
    const double ms = algo.id == 0   ? 0.01 + 0.001 * x
                      : algo.id == 1 ? 10 * x
                      : algo.id == 2 ? 15 * std::sqrt(x)
                                     : 0.5 * x;
    return std::vector<double>(static_cast<size_t>(samples), ms);
  }
  std::map<std::pair<int, int64_t>, int> runs;   // (algorithm, micro-batch) -> calls
  std::map<std::pair<int, int64_t>, int> asked;  // ... -> workspace queries (a plan each on cuDNN)
};

TEST(BenchmarkSkipTest, ASlowConfigurationWhoseTimePerSampleStoppedFallingStopsGrowing) {
  const ConvProblem p = TinyProblem(ConvOp::kForward, 4);
  const std::vector<int64_t> sizes = {1, 2, 4, 8};
  BenchmarkOptions options = ProbingOptions();
  ScriptedTimesBackend backend;
  auto table = BenchmarkMicroBatches(backend, p, sizes, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  for (const Timing& t : table->entries) {
    SCOPED_TRACE("algo " + std::to_string(t.algo) + " b=" + std::to_string(t.micro_batch));
    if (t.algo == 1 && t.micro_batch > 2) {
      // At 2 its time per sample was that at 1, and the fastest was over 2x faster: larger
      // micro-batches of it are worth no more than micro-batches of 2.
      EXPECT_EQ(t.status, TimingStatus::kFailed);
      EXPECT_TRUE(IsWorkerLimit(t)) << t.error;
      EXPECT_THAT(t.error, HasSubstr("time per sample stopped falling"));
      EXPECT_EQ(backend.runs.count({1, t.micro_batch}), 0u);
      // Nor was its workspace asked there: on cuDNN that builds a plan, for runtime-compiled
      // engines a compilation, for nothing.
      EXPECT_EQ(backend.asked.count({1, t.micro_batch}), 0u);
    } else {
      // Measured: the fastest, the one that still gains from larger micro-batches (although
      // slow), the saturated one until its saturation showed, and the saturated one whose runs
      // are short.
      EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
    }
  }
  // skip_factor 0 measures everything (complete tables).
  options.skip_factor = 0;
  ScriptedTimesBackend complete;
  auto full = BenchmarkMicroBatches(complete, p, sizes, options);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  for (const Timing& t : full->entries) EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
}

// Three configurations, no workspace: 0 "winner" (0.01 b ms); 1 "flat" (2 ms at every size, like
// an engine looping over a depthwise layer's groups: 200x behind at 1, ahead at 256); 2 "short"
// (0.3 ms at every size: too short a probe to judge from; 1 MiB of workspace, so that it rules
// out neither of the others).
class FlatTimesBackend : public RenamedCpuBackend {
 public:
  FlatTimesBackend() : RenamedCpuBackend("flat") {}
  std::vector<AlgorithmInfo> Algorithms(ConvOp) const override {
    return {{0, "winner"}, {1, "flat"}, {2, "short"}};
  }
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t, const Algorithm& algo) override {
    return algo.id == 2 ? size_t{1} << 20 : 0;
  }
  Result<std::vector<double>> TimeRunGroups(const ConvProblem&, int64_t b, const Algorithm& algo,
                                            const ConvOperands&, void*, size_t, int, int samples,
                                            int, bool) override {
    ++runs[{algo.id, b}];
    const double ms = algo.id == 0 ? 0.01 * static_cast<double>(b) : algo.id == 1 ? 2.0 : 0.3;
    return std::vector<double>(static_cast<size_t>(samples), ms);
  }
  void WillNotRun(const ConvProblem&, int64_t b, const std::vector<Algorithm>& algos) override {
    for (const Algorithm& algo : algos) {
      released.push_back({algo.id, b});
      // Said before the size is reached: nothing of it ran yet.
      EXPECT_EQ(runs.count({algo.id, b}), 0u) << "algo " << algo.id << " b=" << b;
    }
  }
  std::map<std::pair<int, int64_t>, int> runs;    // (algorithm, micro-batch) -> calls
  std::vector<std::pair<int, int64_t>> released;  // WillNotRun's, in order
};

TEST(BenchmarkSkipTest, AConfigurationIsNotRunWhereMicroBatchesOfASmallerSizeDoBetter) {
  ConvProblem p = TinyProblem(ConvOp::kForward, 4);
  p.groups = 2;  // grouped problems only
  const std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  BenchmarkOptions options = ProbingOptions();
  ASSERT_EQ(options.split_skip_factor, 2.0);
  FlatTimesBackend backend;
  auto table = BenchmarkMicroBatches(backend, p, sizes, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  // "flat" took 2 ms at 1, where "winner" took 0.01 ms: micro-batches of 1 do up to 100 samples
  // in half its time, and no larger micro-batch of it runs faster than one of 1. Not run up to
  // 64; probed again at 128, beyond that reach, and measured at 256, where it is the fastest.
  EXPECT_EQ(backend.runs.count({1, 1}), 1u);
  for (int64_t b : {2, 4, 8, 16, 32, 64}) EXPECT_EQ(backend.runs.count({1, b}), 0u) << "b=" << b;
  EXPECT_EQ(backend.runs.count({1, 128}), 1u);
  for (const Timing& t : table->entries) {
    SCOPED_TRACE("algo " + std::to_string(t.algo) + " b=" + std::to_string(t.micro_batch));
    // (At 2, right after the probe, the next size's skip says why first.)
    if (t.algo == 1 && t.micro_batch >= 4 && t.micro_batch <= 64) {
      EXPECT_EQ(t.status, TimingStatus::kFailed);
      EXPECT_TRUE(IsWorkerLimit(t)) << t.error;
      EXPECT_THAT(t.error,
                  HasSubstr("2 ms at micro-batch 1 is over 2x what micro-batches of 1 of 0"));
      EXPECT_THAT(t.error, HasSubstr("up to 100 samples"));
    }
    if (t.micro_batch == 256 && t.algo == 1) {
      EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
      EXPECT_EQ(t.time_ms, 2.0);  // "winner" took 2.56 ms
    }
  }
  // "short" was 30x behind at 1, but its 0.3 ms probe is too short to judge from: only the next
  // size's skip (2x) applies, and it is probed at 4.
  EXPECT_EQ(backend.runs.count({2, 4}), 1u);
  // The backend heard of each size a configuration was left out at, once, before it came (the
  // compile helpers drop those plans); never of a size it ran at.
  std::set<std::pair<int, int64_t>> released(backend.released.begin(), backend.released.end());
  EXPECT_EQ(released.size(), backend.released.size()) << "a size said twice";
  for (int64_t b : {2, 4, 8, 16, 32, 64}) EXPECT_EQ(released.count({1, b}), 1u) << "b=" << b;
  for (const auto& [algo, b] : released) {
    EXPECT_EQ(backend.runs.count({algo, b}), 0u) << "algo " << algo << " ran at " << b;
  }

  // Off (<= 0), and in a dense problem (where the saturation rule needs the probes this leaves
  // out): only the next size is skipped, and "flat" is probed at 4.
  options.split_skip_factor = 0;
  FlatTimesBackend off;
  ASSERT_TRUE(BenchmarkMicroBatches(off, p, sizes, options).ok());
  EXPECT_EQ(off.runs.count({1, 4}), 1u);
  options.split_skip_factor = 2.0;
  FlatTimesBackend dense;
  ASSERT_TRUE(BenchmarkMicroBatches(dense, TinyProblem(ConvOp::kForward, 4), sizes, options).ok());
  EXPECT_EQ(dense.runs.count({1, 4}), 1u);
}

// Every size is probed before any is measured, and the full protocol goes only to entries a plan
// of the largest size could use: "fast" (0.011 ms at 1, 0.018 ms at 8) at 1 costs a plan of 8
// over four times the 0.018 ms of one micro-batch of 8, and keeps its probe there.
TEST(BenchmarkProbeTest, OnlyEntriesAPlanOfTheLargestSizeCouldUseAreMeasured) {
  const ConvProblem p = TinyProblem(ConvOp::kForward, 8);
  const std::vector<int64_t> sizes = {1, 2, 4, 8};
  BenchmarkOptions options = ProbingOptions();
  options.min_runs = 3;
  options.max_runs = 3;
  auto samples_of = [&](double usable_margin) {
    options.usable_margin = usable_margin;
    ScriptedTimesBackend backend;
    Result<TimingTable> table = BenchmarkMicroBatches(backend, p, sizes, options);
    EXPECT_TRUE(table.ok()) << table.status().ToString();
    std::map<std::pair<int, int64_t>, int> samples;
    for (const Timing& t : table.ok() ? table->entries : std::vector<Timing>{}) {
      if (t.status == TimingStatus::kOk) samples[{t.algo, t.micro_batch}] = t.samples;
    }
    return samples;
  };
  const auto usable = samples_of(0.25);
  EXPECT_EQ(usable.at({0, 1}), 1);  // its probe
  EXPECT_EQ(usable.at({0, 8}), 3);  // the plan's
  const auto every_size = samples_of(-1);
  EXPECT_EQ(every_size.at({0, 1}), 3);
  EXPECT_EQ(every_size.at({0, 8}), 3);
  options.usable_margin = std::nan("");
  EXPECT_THAT(Validate(options).message(), HasSubstr("usable_margin"));
}

// The CPU backend recording each timed call: (size, algorithm, warm-ups, samples, group).
class RecordingBackend : public RenamedCpuBackend {
 public:
  RecordingBackend() : RenamedCpuBackend("gpu") {}
  Result<std::vector<double>> TimeRunGroups(const ConvProblem& p, int64_t batch,
                                            const Algorithm& algo, const ConvOperands& operands,
                                            void* workspace, size_t workspace_bytes, int warmup,
                                            int samples, int group,
                                            bool device_time_only) override {
    calls.push_back({batch, algo.id, warmup, samples, group});
    return RenamedCpuBackend::TimeRunGroups(p, batch, algo, operands, workspace, workspace_bytes,
                                            warmup, samples, group, device_time_only);
  }
  std::vector<std::array<int64_t, 5>> calls;
};

// Two configurations; "compiled" is twice as fast as "steady" but, like a runtime-compiled cuDNN
// engine, runs code built for each batch size: its first run at a size, unless warmed up, takes
// 1 ms more (the code loading) where runs take 0.01-0.02 ms, 10 ms more where they take 2 ms
// (`long_runs`).
class CodePerSizeBackend : public RenamedCpuBackend {
 public:
  explicit CodePerSizeBackend(bool says_so, bool long_runs = false)
      : RenamedCpuBackend("per-size"), says_so_(says_so), long_runs_(long_runs) {}
  std::vector<AlgorithmInfo> Algorithms(ConvOp) const override {
    return {{0, "steady"}, {1, "compiled"}};
  }
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t, const Algorithm&) override {
    return size_t{0};
  }
  bool BuildsCodePerSize(const ConvProblem&, int64_t, const Algorithm& algo) override {
    return says_so_ && algo.id == 1;
  }
  Result<std::vector<double>> TimeRunGroups(const ConvProblem&, int64_t b, const Algorithm& algo,
                                            const ConvOperands&, void*, size_t, int warmup,
                                            int samples, int, bool) override {
    const double steady_ms = (long_runs_ ? 4.0 : 0.01) + 0.001 * static_cast<double>(b);
    std::vector<double> ms(static_cast<size_t>(samples), algo.id == 1 ? steady_ms / 2 : steady_ms);
    if (algo.id == 1 && loaded_.insert(b).second && warmup == 0) {
      ms.front() += long_runs_ ? 10.0 : 1.0;
    }
    return ms;
  }

 private:
  bool says_so_;
  bool long_runs_;
  std::set<int64_t> loaded_;  // sizes whose code "compiled" has run
};

TEST(BenchmarkProbeTest, CodeBuiltPerSizeIsWarmedUpBeforeItsProbeAtEverySize) {
  const ConvProblem p = TinyProblem(ConvOp::kForward, 8);
  const std::vector<int64_t> sizes = {1, 2, 4, 8};
  const BenchmarkOptions options = ProbingOptions();
  CodePerSizeBackend backend(/*says_so=*/true);
  auto table = BenchmarkMicroBatches(backend, p, sizes, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  int compiled = 0;
  for (const Timing& t : table->entries) {
    if (t.algo != 1) continue;
    SCOPED_TRACE("micro-batch " + std::to_string(t.micro_batch));
    ++compiled;
    EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
    EXPECT_LT(t.time_ms, 0.01 + 0.001 * static_cast<double>(t.micro_batch)) << "not the fastest";
  }
  EXPECT_EQ(compiled, 4);

  // Without the backend saying so, short runs are still warmed up before their probe (a run of
  // them costs little: kWarmProbeMs); long ones are not, and there the cold probe at each new size
  // makes the fastest configuration look 6x slower: pruned to its one slow sample, then skipped at
  // the next size.
  auto skipped_compiled = [&](bool long_runs) {
    CodePerSizeBackend silent(/*says_so=*/false, long_runs);
    auto fooled = BenchmarkMicroBatches(silent, p, sizes, options);
    EXPECT_TRUE(fooled.ok()) << fooled.status().ToString();
    int skipped = 0;
    for (const Timing& t : fooled.ok() ? fooled->entries : std::vector<Timing>{}) {
      if (t.algo == 1 && t.status == TimingStatus::kFailed && IsWorkerLimit(t)) ++skipped;
    }
    return skipped;
  };
  EXPECT_EQ(skipped_compiled(/*long_runs=*/false), 0);
  EXPECT_GT(skipped_compiled(/*long_runs=*/true), 0);
}

// A short run's probe is a group of back-to-back runs after a warm-up, as its samples are: a
// single run per pair of clock readings read short kernels 1.6-2.1x slow on an H200. The probe's
// group is as long as probe_group_target_ms asks, the samples' as group_target_ms does. Probed one
// configuration at a time, the single run right before is the group's warm-up; in a batch of
// probes, other configurations ran in between, and the group gets one of its own.
TEST(BenchmarkProbeTest, AShortRunIsProbedAsAGroupAfterAWarmUp) {
  for (const double batch_ms : {0.0, 50.0}) {
    SCOPED_TRACE("probe_batch_ms " + std::to_string(batch_ms));
    BenchmarkOptions options = ProbingOptions();
    options.short_run_ms = 1e6;  // every run counts as short
    options.group_target_ms = 1e6;
    options.probe_group_target_ms = 1e-9;  // the shortest group: 2 runs
    options.max_group = 4;
    options.probe_batch_ms = batch_ms;
    RecordingBackend backend;
    Result<TimingTable> table =
        BenchmarkProblem(backend, TinyProblem(ConvOp::kForward, 4), 2, BatchPolicy::kAll, options);
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    std::map<std::pair<int64_t, int64_t>, std::vector<std::array<int64_t, 5>>> calls;
    for (const auto& call : backend.calls) calls[{call[0], call[1]}].push_back(call);
    ASSERT_GT(calls.size(), 1u);
    int measured = 0;
    for (const auto& [config, made] : calls) {
      SCOPED_TRACE("micro-batch " + std::to_string(config.first) + " algo " +
                   std::to_string(config.second));
      ASSERT_GE(made.size(), 2u);
      EXPECT_EQ(made[0][2], 1);  // a warm-up (at every size: the runs are short), one run
      EXPECT_EQ(made[0][3], 1);
      EXPECT_EQ(made[0][4], 1);
      EXPECT_EQ(made[1][2], batch_ms > 0 ? 1 : 0);  // then one sample of a group of 2
      EXPECT_EQ(made[1][3], 1);
      EXPECT_EQ(made[1][4], 2);
      for (size_t i = 2; i < made.size(); ++i) EXPECT_EQ(made[i][4], 4);  // measured: groups of 4
      measured += made.size() > 2;
    }
    EXPECT_GT(measured, 0);
  }
}

// ScriptedTimesBackend recording each TimeRunBatch: (micro-batch, requests, warm-ups, groups).
class BatchRecordingBackend : public ScriptedTimesBackend {
 public:
  struct Batch {
    int64_t micro_batch = 0;
    std::vector<int> algos;
    std::vector<int> warmups;
    std::vector<int> groups;
  };
  std::vector<Result<std::vector<double>>> TimeRunBatch(
      const ConvProblem& p, int64_t b, const ConvOperands& operands,
      const std::vector<TimedRunRequest>& requests, bool device_time_only) override {
    Batch batch{b, {}, {}, {}};
    for (const TimedRunRequest& r : requests) {
      batch.algos.push_back(r.algo.id);
      batch.warmups.push_back(r.warmup);
      batch.groups.push_back(r.group);
    }
    batches.push_back(batch);
    return ScriptedTimesBackend::TimeRunBatch(p, b, operands, requests, device_time_only);
  }
  std::vector<Batch> batches;
};

// The probes of a size are queued together, up to about probe_batch_ms of device time by their
// probes at the smaller size (scaled by the samples, doubled by a warm-up): the slow ones
// ("saturated", 10 b ms; "improving", 15 sqrt(b) ms) end their batches. The table is the one
// probed one configuration at a time.
TEST(BenchmarkProbeTest, TheProbesOfASizeAreBatchedUpToTheirExpectedDeviceTime) {
  const ConvProblem p = TinyProblem(ConvOp::kForward, 8);
  const std::vector<int64_t> sizes = {1, 2, 4, 8};
  BenchmarkOptions options = ProbingOptions();
  options.skip_factor = 0;  // every configuration probed at every size
  options.prune_margin = 0.10;
  options.short_run_ms = 0.05;  // "fast" is probed again as a group
  options.probe_batch_ms = 60;
  BatchRecordingBackend batched;
  Result<TimingTable> table = BenchmarkMicroBatches(batched, p, sizes, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();

  options.probe_batch_ms = 0;
  BatchRecordingBackend single;
  Result<TimingTable> one_by_one = BenchmarkMicroBatches(single, p, sizes, options);
  ASSERT_TRUE(one_by_one.ok()) << one_by_one.status().ToString();
  ASSERT_EQ(table->entries.size(), one_by_one->entries.size());
  for (size_t i = 0; i < table->entries.size(); ++i) {
    const Timing& a = table->entries[i];
    const Timing& b = one_by_one->entries[i];
    SCOPED_TRACE("algo " + std::to_string(a.algo) + " b=" + std::to_string(a.micro_batch));
    EXPECT_EQ(a.status, b.status);
    EXPECT_EQ(a.time_ms, b.time_ms);
    EXPECT_EQ(a.samples, b.samples);
  }
  for (const auto& batch : single.batches) EXPECT_EQ(batch.algos.size(), 1u);

  // Size 1: nothing probed before, each expected at 1 ms and its warm-up: one batch of all four,
  // then the groups of the short ones ("fast", 0.011 ms) in a second.
  ASSERT_GE(batched.batches.size(), 2u);
  EXPECT_EQ(batched.batches[0].micro_batch, 1);
  EXPECT_EQ(batched.batches[0].algos, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(batched.batches[0].warmups, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(batched.batches[1].algos, (std::vector<int>{0}));
  EXPECT_GT(batched.batches[1].groups[0], 1);
  EXPECT_EQ(batched.batches[1].warmups[0], 1);
  // Later sizes by their probes at the size before: at 2, 0.04 + 20 + 30 + 2 ms, one batch; at 4,
  // 0.05 + 40 ms, then 42 + 2 ms; at 8, 80 and 60 ms, each alone.
  std::map<int64_t, std::vector<std::vector<int>>> probed;  // size -> its single-run batches
  for (const auto& batch : batched.batches) {
    if (batch.groups[0] == 1) probed[batch.micro_batch].push_back(batch.algos);
  }
  EXPECT_EQ(probed[2], (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_EQ(probed[4], (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(probed[8], (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}}));
}

TEST(BenchmarkDeviceLossTest, ALostDeviceAbortsTheTableWithDeviceLost) {
  RenamedCpuBackend gpu("flaky gpu");
  // 2 runs per configuration: the device dies in the third configuration.
  gpu.LoseDeviceAfterRuns(5);
  const ConvProblem p = TinyProblem(ConvOp::kForward, 4);
  int64_t reported = 0;
  Result<TimingTable> table = BenchmarkProblem(
      gpu, p, 8, BatchPolicy::kPowerOfTwo, CountableOptions(),
      [&](const BenchmarkProgress& progress) {
        reported = progress.done;
        // Nothing after the loss is reported as measured (or as failed).
        EXPECT_EQ(progress.latest->status, TimingStatus::kOk) << progress.latest->error;
      });
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), StatusCode::kDeviceLost) << table.status().ToString();
  EXPECT_THAT(table.status().message(), HasSubstr("cudaErrorIllegalAddress"));
  // The run's own error (what cuDNN says after the fault) is kept for the log.
  EXPECT_THAT(table.status().message(), HasSubstr("CUDNN_STATUS_EXECUTION_FAILED"));
  EXPECT_EQ(reported, 2);
  EXPECT_GE(gpu.health_checks(), 1);
}

TEST(BenchmarkDeviceLossTest, ALossAfterTheLastRunIsCaughtBeforeTheTableIsReturned) {
  RenamedCpuBackend gpu("flaky gpu");
  const ConvProblem p = TinyProblem(ConvOp::kBackwardFilter, 4);
  const size_t total = ExpectedTimings(gpu, p, 2, BatchPolicy::kAll);
  Result<TimingTable> table = BenchmarkProblem(gpu, p, 2, BatchPolicy::kAll, CountableOptions(),
                                               [&](const BenchmarkProgress& progress) {
                                                 // E.g. an asynchronous fault of the last kernel:
                                                 // no call failed yet.
                                                 if (progress.done == static_cast<int64_t>(total))
                                                   gpu.LoseDeviceNow();
                                               });
  EXPECT_EQ(table.status().code(), StatusCode::kDeviceLost) << table.status().ToString();
}

TEST(BenchmarkDeviceLossTest, AHealthyDeviceGivesACompleteTableWithOneFinalCheck) {
  RenamedCpuBackend gpu("sound gpu");
  const ConvProblem p = TinyProblem(ConvOp::kBackwardData, 4);
  Result<TimingTable> table =
      BenchmarkProblem(gpu, p, 4, BatchPolicy::kPowerOfTwo, CountableOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ExpectComplete(*table, gpu, p, 4, BatchPolicy::kPowerOfTwo);
  for (const Timing& t : table->entries) EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
  EXPECT_EQ(gpu.health_checks(), 1);  // nothing failed: only the check at the end
}

// A backend whose runs of one algorithm fail on a sound device (cuDNN refusing at run time).
class OneAlgorithmFails : public RenamedCpuBackend {
 public:
  explicit OneAlgorithmFails(int algo) : RenamedCpuBackend("picky gpu"), algo_(algo) {}
  Result<std::vector<double>> TimeRuns(const ConvProblem& p, int64_t batch, const Algorithm& algo,
                                       const ConvOperands& operands, void* workspace,
                                       size_t workspace_bytes, int warmup, int runs) override {
    if (!algo.is_engine() && algo.id == algo_)
      return Internal("cudnnConvolutionForward failed: CUDNN_STATUS_BAD_PARAM");
    return RenamedCpuBackend::TimeRuns(p, batch, algo, operands, workspace, workspace_bytes, warmup,
                                       runs);
  }

 private:
  int algo_;
};

TEST(BenchmarkDeviceLossTest, AFailedRunOnASoundDeviceIsRecordedAndTheTableGoesOn) {
  OneAlgorithmFails gpu(kCpuAlgoIm2colGemm);
  const ConvProblem p = TinyProblem(ConvOp::kForward, 4);
  Result<TimingTable> table =
      BenchmarkProblem(gpu, p, 4, BatchPolicy::kPowerOfTwo, CountableOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ExpectComplete(*table, gpu, p, 4, BatchPolicy::kPowerOfTwo);
  int failed = 0;
  for (const Timing& t : table->entries) {
    if (t.algo == kCpuAlgoIm2colGemm) {
      EXPECT_EQ(t.status, TimingStatus::kFailed);
      EXPECT_THAT(t.error, HasSubstr("CUDNN_STATUS_BAD_PARAM"));
      EXPECT_FALSE(IsWorkerLimit(t));
      ++failed;
    } else {
      EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
    }
  }
  EXPECT_EQ(failed, 3);
  EXPECT_EQ(gpu.health_checks(), failed + 1);  // after each failure, and at the end
}

// Operands of micro-batch 8 (8 KiB per activation tensor) do not fit a device that allocates at
// most 4.5 KiB at once; those of micro-batch 4 do, and so does no im2col workspace.
TEST(BenchmarkMemoryTest, OperandsFallBackToTheLargestMicroBatchThatFits) {
  RenamedCpuBackend gpu("small gpu");
  const ConvProblem p = TinyProblem(ConvOp::kForward, 4);  // 4x8x8 in, 4x8x8 out, fp32
  constexpr size_t kLimit = 4608;
  gpu.FailAllocationsAbove(kLimit);
  Result<TimingTable> table =
      BenchmarkProblem(gpu, p, 8, BatchPolicy::kPowerOfTwo, CountableOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ExpectComplete(*table, gpu, p, 8, BatchPolicy::kPowerOfTwo);
  int ok = 0;
  for (const Timing& t : table->entries) {
    SCOPED_TRACE("b=" + std::to_string(t.micro_batch) + " algo=" + std::to_string(t.algo));
    Result<size_t> ws = gpu.WorkspaceSize(p, t.micro_batch, t.algo);
    ASSERT_TRUE(ws.ok());
    if (t.micro_batch == 8) {
      EXPECT_EQ(t.status, TimingStatus::kFailed);
      EXPECT_TRUE(IsWorkerLimit(t)) << t.error;
      EXPECT_THAT(t.error, HasSubstr("operands of micro-batch 8"));
      EXPECT_THAT(t.error, HasSubstr("measured up to micro-batch 4"));
    } else if (*ws > kLimit) {
      EXPECT_EQ(t.status, TimingStatus::kFailed);
      EXPECT_TRUE(IsWorkerLimit(t)) << t.error;
      EXPECT_THAT(t.error, HasSubstr("could not be allocated"));
      EXPECT_EQ(t.workspace_bytes, *ws);
    } else {
      EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
      EXPECT_GT(t.time_ms, 0);
      ++ok;
    }
  }
  EXPECT_GE(ok, 3);  // the direct algorithm (no workspace) at 1, 2 and 4
}

TEST(BenchmarkMemoryTest, OperandsThatFitNowhereFailTheCall) {
  RenamedCpuBackend gpu("full gpu");
  gpu.FailAllocationsAbove(512);  // not even one sample's 1 KiB input
  Result<TimingTable> table = BenchmarkProblem(gpu, TinyProblem(ConvOp::kForward, 4), 4,
                                               BatchPolicy::kPowerOfTwo, CountableOptions());
  EXPECT_EQ(table.status().code(), StatusCode::kResourceExhausted) << table.status().ToString();
  EXPECT_THAT(table.status().message(), HasSubstr("smallest micro-batch 1"));
}

TEST(BenchmarkMemoryTest, WorkspaceAboveTheCapIsThisWorkersLimitNotUnsupported) {
  RenamedCpuBackend gpu("capped gpu");
  const ConvProblem p = TinyProblem(ConvOp::kBackwardData, 4);
  BenchmarkOptions options = CountableOptions();
  options.workspace_cap_bytes = 1;
  Result<TimingTable> table = BenchmarkProblem(gpu, p, 2, BatchPolicy::kPowerOfTwo, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  int capped = 0;
  for (const Timing& t : table->entries) {
    EXPECT_NE(t.status, TimingStatus::kUnsupported) << t.error;
    if (t.status != TimingStatus::kFailed) continue;
    EXPECT_TRUE(IsWorkerLimit(t)) << t.error;
    EXPECT_THAT(t.error, HasSubstr("over this worker's cap"));
    EXPECT_GT(t.workspace_bytes, 1u);
    EXPECT_EQ(t.samples, 0);
    ++capped;
  }
  EXPECT_GT(capped, 0);
}

TEST(BenchmarkSamplingTest, ShortRunsAreTimedInGroups) {
  const ConvProblem p = TinyProblem(ConvOp::kForward, 4);
  BenchmarkOptions options = FastBenchmarkOptions();
  options.min_runs = 3;
  options.max_runs = 3;
  options.config_time_budget_ms = 60'000;
  options.short_run_ms = 1e6;  // every run counts as short
  options.group_target_ms = 1e6;
  options.max_group = 4;
  RenamedCpuBackend grouped("gpu");
  Result<TimingTable> table = BenchmarkProblem(grouped, p, 2, BatchPolicy::kAll, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(grouped.largest_group(), 4);
  for (const Timing& t : table->entries) {
    EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
    EXPECT_EQ(t.samples, 3);  // groups, the probe not among them
    EXPECT_GT(t.time_ms, 0);
  }
  options.short_run_ms = 0;
  RenamedCpuBackend single("gpu");
  ASSERT_TRUE(BenchmarkProblem(single, p, 2, BatchPolicy::kAll, options).ok());
  EXPECT_EQ(single.largest_group(), 1);
}

// A configuration measured in full after its size's probes keeps its probe as the first one
// (its code loaded, how slow it is): one warm-up right before its samples, no second probe.
TEST(BenchmarkSamplingTest, AMeasuredConfigurationIsNotProbedTwice) {
  BenchmarkOptions options = FastBenchmarkOptions();
  options.warmup_runs = 2;
  options.min_runs = 3;
  options.max_runs = 3;
  options.config_time_budget_ms = 60'000;
  options.short_run_ms = 0;    // one run per sample
  options.prune_margin = 1e9;  // probes on, nothing dominated: every configuration measured
  options.skip_factor = 0;
  RecordingBackend backend;
  Result<TimingTable> table =
      BenchmarkProblem(backend, TinyProblem(ConvOp::kForward, 4), 1, BatchPolicy::kAll, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  const size_t configurations = table->entries.size();
  ASSERT_GT(configurations, 1u);
  ASSERT_EQ(backend.calls.size(), 2 * configurations);
  for (size_t i = 0; i < configurations; ++i) {
    const auto probe = backend.calls[i];
    const auto measured = backend.calls[configurations + i];
    EXPECT_EQ(probe[3], 1);                    // one timed run after one warm-up
    EXPECT_EQ(measured[1], probe[1]);          // the same configuration, in order
    EXPECT_EQ(measured[2], 1);                 // one warm-up...
    EXPECT_EQ(measured[3], options.min_runs);  // ...then the samples
    EXPECT_EQ(table->entries[i].samples, options.min_runs);
  }
}

// Timed runs need no workspace (the overwriting call), every call of a plan more for algorithm 2
// (a backward filter's accumulating call: another plan in cuDNN's engines, built only to be
// asked). Algorithm 2 runs in 1 ms, 1 in 2 ms, 0 in 3 ms; which configurations were asked for
// their workspace in every call is recorded.
class AccumulatingWorkspaceBackend : public RenamedCpuBackend {
 public:
  static constexpr size_t kAccumulating = size_t{1} << 20;
  AccumulatingWorkspaceBackend() : RenamedCpuBackend("gpu") {}
  Result<size_t> OverwritingWorkspaceSize(const ConvProblem&, int64_t, const Algorithm&) override {
    return size_t{0};
  }
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t batch, const Algorithm& algo) override {
    asked.insert({batch, algo.id});
    return algo.id == 2 ? kAccumulating : size_t{0};
  }
  Result<std::vector<double>> TimeRuns(const ConvProblem&, int64_t, const Algorithm& algo,
                                       const ConvOperands&, void*, size_t, int, int runs) override {
    return std::vector<double>(runs, 3.0 - algo.id);
  }
  std::set<std::pair<int64_t, int>> asked;
};

// The workspace of every call is asked only of the configurations on a size's time/workspace
// front, until the front holds settled ones only: algorithm 2 (the fastest) needs more once
// settled, which puts algorithm 1 (no workspace) on the front, and it is asked in turn;
// algorithm 0, slower than 1 with as little workspace, never is.
TEST(BenchmarkWorkspaceTest, EveryCallsWorkspaceIsAskedOnlyOfTheFront) {
  AccumulatingWorkspaceBackend backend;
  Result<TimingTable> table = BenchmarkProblem(backend, TinyProblem(ConvOp::kBackwardFilter, 4), 4,
                                               BatchPolicy::kAll, FastBenchmarkOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  std::set<std::pair<int64_t, int>> expected;
  for (int64_t batch = 1; batch <= 4; ++batch) {
    expected.insert({batch, 1});
    expected.insert({batch, 2});
  }
  EXPECT_EQ(backend.asked, expected);
  for (const Timing& t : table->entries) {
    ASSERT_EQ(t.status, TimingStatus::kOk) << t.error;
    EXPECT_EQ(t.workspace_bytes, t.algo == 2 ? AccumulatingWorkspaceBackend::kAccumulating : 0u)
        << t.algo;
  }
}

// TimeRunGroups' default: the mean of each group of TimeRuns' samples, in order.
class FixedTimes final : public ConvBackend {
 public:
  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }
  std::vector<AlgorithmInfo> Algorithms(ConvOp) const override { return {{0, "only"}}; }
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t, const Algorithm&) override {
    return size_t{0};
  }
  Status Run(const ConvProblem&, int64_t, const Algorithm&, const ConvOperands&, void*, size_t,
             float, float) override {
    return Status::Ok();
  }
  Status Synchronize() override { return Status::Ok(); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t) override { return Internal("not used"); }
  Status CopyToDevice(void*, const void*, size_t) override { return Status::Ok(); }
  Status CopyToHost(void*, const void*, size_t) override { return Status::Ok(); }
  Result<std::vector<double>> TimeRuns(const ConvProblem&, int64_t, const Algorithm&,
                                       const ConvOperands&, void*, size_t, int warmup,
                                       int runs) override {
    last_warmup = warmup;
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) times.push_back(i + 1.0);
    return times;
  }
  int last_warmup = -1;

 private:
  DeviceFingerprint fingerprint_;
};

TEST(TimeRunGroupsTest, DefaultAveragesEachGroup) {
  FixedTimes backend;
  const ConvProblem p = TinyProblem(ConvOp::kForward, 1);
  Result<std::vector<double>> means = backend.TimeRunGroups(p, 1, 0, {}, nullptr, 0, 2, 3, 2);
  ASSERT_TRUE(means.ok()) << means.status().ToString();
  EXPECT_EQ(*means, (std::vector<double>{1.5, 3.5, 5.5}));
  EXPECT_EQ(backend.last_warmup, 2);
  EXPECT_EQ(*backend.TimeRunGroups(p, 1, 0, {}, nullptr, 0, 0, 2, 1),
            (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(backend.TimeRunGroups(p, 1, 0, {}, nullptr, 0, 0, 0, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend.Healthy().ok());  // the interface's default: nothing to lose
}

}  // namespace
}  // namespace ucudnn::worker
