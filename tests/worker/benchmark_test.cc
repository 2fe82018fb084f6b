// The benchmark engine's handling of a device in trouble, on a CPU backend that plays one
// (RenamedCpuBackend): a device lost mid-table, an out-of-memory device (operands and workspace
// that do not fit), runs that fail on a sound device; and its sampling rules (warm-up required,
// short runs timed in groups). No GPU, no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/dp.h"
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
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t, const Algorithm& algo) override {
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
  std::map<std::pair<int, int64_t>, int> runs;  // (algorithm, micro-batch) -> calls
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

// Two configurations; "compiled" is twice as fast as "steady" but, like a runtime-compiled cuDNN
// engine, runs code built for each batch size: its first run at a size, unless warmed up, takes
// 1 ms more (the code loading).
class CodePerSizeBackend : public RenamedCpuBackend {
 public:
  explicit CodePerSizeBackend(bool says_so) : RenamedCpuBackend("per-size"), says_so_(says_so) {}
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
    const double steady_ms = 0.01 + 0.001 * static_cast<double>(b);
    std::vector<double> ms(static_cast<size_t>(samples), algo.id == 1 ? steady_ms / 2 : steady_ms);
    if (algo.id == 1 && loaded_.insert(b).second && warmup == 0) ms.front() += 1.0;
    return ms;
  }

 private:
  bool says_so_;
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

  // Without the backend saying so, the cold probe at each new size makes the fastest
  // configuration look 20x slower: pruned to its one slow sample, then skipped at the next size.
  CodePerSizeBackend silent(/*says_so=*/false);
  auto fooled = BenchmarkMicroBatches(silent, p, sizes, options);
  ASSERT_TRUE(fooled.ok()) << fooled.status().ToString();
  int skipped = 0;
  for (const Timing& t : fooled->entries) {
    if (t.algo == 1 && t.status == TimingStatus::kFailed && IsWorkerLimit(t)) ++skipped;
  }
  EXPECT_GT(skipped, 0);
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
