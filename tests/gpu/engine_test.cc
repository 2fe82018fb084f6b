// The benchmark engine on both backends: on the CPU backend everywhere (never skipped), on cuDNN
// where a GPU is.
#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "gpu/gpu_test_util.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/engine/benchmark.h"

namespace ucudnn::gputest {
namespace {

BenchmarkOptions QuickOptions() {
  BenchmarkOptions o;
  o.warmup_runs = 1;
  o.min_runs = 3;
  o.max_runs = 6;
  // Generous: on a busy 2-core machine no configuration may fall short of min_runs.
  o.config_time_budget_ms = 60'000;
  // The full protocol for every configuration (probe pruning has its own test).
  o.prune_margin = -1;
  return o;
}

ConvProblem SmallProblem(ConvOp op) {
  ConvProblem p = MakeConv(4, 10, 6, 3, 1, 1);
  p.op = op;
  return p;
}

// Every (size, legacy algorithm) pair appears exactly once; on cuDNN the engine configurations
// proposed for each size follow, each (size, configuration) once.
void ExpectComplete(const TimingTable& table, const std::vector<int64_t>& sizes,
                    const std::vector<AlgorithmInfo>& algos) {
  size_t legacy = 0;
  std::set<std::pair<int64_t, std::string>> engines;
  for (const Timing& t : table.entries) {
    if (t.engine_config.empty()) {
      ++legacy;
    } else {
      EXPECT_EQ(t.algo, kEngineAlgo);
      EXPECT_TRUE(engines.insert({t.micro_batch, t.engine_config}).second)
          << t.micro_batch << "/" << t.engine_config << " twice";
    }
  }
  ASSERT_EQ(legacy, sizes.size() * algos.size());
  std::set<std::pair<int64_t, int>> seen;
  for (const Timing& t : table.entries) {
    if (t.engine_config.empty()) seen.insert({t.micro_batch, t.algo});
  }
  for (int64_t size : sizes) {
    for (const AlgorithmInfo& a : algos)
      EXPECT_TRUE(seen.count({size, a.id})) << size << "/" << a.id;
  }
}

TEST(SummarizeTest, MedianAndInterquartileRange) {
  const SampleSummary odd = Summarize({3.0, 1.0, 2.0});
  EXPECT_DOUBLE_EQ(odd.median_ms, 2.0);
  EXPECT_DOUBLE_EQ(odd.spread_ms, 1.0);  // 2.5 - 1.5
  const SampleSummary even = Summarize({4.0, 1.0, 3.0, 2.0});
  EXPECT_DOUBLE_EQ(even.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(even.spread_ms, 1.5);  // 3.25 - 1.75
  const SampleSummary one = Summarize({7.0});
  EXPECT_DOUBLE_EQ(one.median_ms, 7.0);
  EXPECT_DOUBLE_EQ(one.spread_ms, 0.0);
  EXPECT_DOUBLE_EQ(Summarize({}).median_ms, 0.0);
}

TEST(BenchmarkOptionsTest, RejectsNonsenseNamingTheField) {
  BenchmarkOptions o;
  o.min_runs = 0;
  Status s = Validate(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("min_runs"), std::string::npos) << s.message();
  o = {};
  o.max_runs = 2;
  o.min_runs = 3;
  EXPECT_NE(Validate(o).message().find("max_runs"), std::string::npos);
  o = {};
  o.config_time_budget_ms = 0;
  EXPECT_NE(Validate(o).message().find("config_time_budget_ms"), std::string::npos);
  EXPECT_TRUE(Validate(BenchmarkOptions{}).ok());
}

class CpuEngineTest : public ::testing::TestWithParam<ConvOp> {};

TEST_P(CpuEngineTest, MeasuresEveryAlgorithmAtEverySize) {
  CpuBackend cpu;
  const ConvProblem p = SmallProblem(GetParam());
  const BenchmarkOptions options = QuickOptions();
  int64_t last_done = 0, calls = 0;
  Result<TimingTable> table = BenchmarkProblem(cpu, p, 4, BatchPolicy::kPowerOfTwo, options,
                                               [&](const BenchmarkProgress& progress) {
                                                 EXPECT_EQ(progress.done, last_done + 1);
                                                 EXPECT_EQ(progress.total, 9);
                                                 ASSERT_NE(progress.latest, nullptr);
                                                 last_done = progress.done;
                                                 ++calls;
                                               });
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ExpectComplete(*table, MicroBatchSizes(BatchPolicy::kPowerOfTwo, 4), cpu.Algorithms(p.op));
  EXPECT_EQ(calls, 9);
  for (const Timing& t : table->entries) {
    SCOPED_TRACE("b=" + std::to_string(t.micro_batch) + " algo=" + AlgorithmText(AlgorithmOf(t)));
    EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
    EXPECT_GT(t.time_ms, 0.0);
    EXPECT_GE(t.spread_ms, 0.0);
    EXPECT_GE(t.samples, options.min_runs);
    EXPECT_LE(t.samples, options.max_runs);
    Result<size_t> ws = cpu.WorkspaceSize(p, t.micro_batch, t.algo);
    ASSERT_TRUE(ws.ok());
    EXPECT_EQ(t.workspace_bytes, *ws);
  }
}

// With probe pruning (the default), a configuration that another of the same micro-batch size
// beats by more than the margin with at most its workspace keeps its probe as its only sample;
// every other configuration gets the full protocol.
TEST_P(CpuEngineTest, DominatedConfigurationsKeepTheirProbeOnly) {
  CpuBackend cpu;
  ConvProblem p = MakeConv(16, 12, 16, 3, 1, 1);
  p.op = GetParam();
  BenchmarkOptions options = QuickOptions();
  options.prune_margin = 0.10;
  Result<TimingTable> table = BenchmarkProblem(cpu, p, 4, BatchPolicy::kPowerOfTwo, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ExpectComplete(*table, MicroBatchSizes(BatchPolicy::kPowerOfTwo, 4), cpu.Algorithms(p.op));
  int full = 0;
  for (const Timing& t : table->entries) {
    if (t.status == TimingStatus::kFailed) {
      // Far behind at the size before: not run, recorded as this worker's choice, never a time.
      EXPECT_TRUE(IsWorkerLimit(t)) << t.error;
      EXPECT_NE(t.error.find("not measured"), std::string::npos) << t.error;
      EXPECT_EQ(t.samples, 0);
      continue;
    }
    ASSERT_EQ(t.status, TimingStatus::kOk) << t.error;
    if (t.samples >= options.min_runs) {
      ++full;
      continue;
    }
    EXPECT_EQ(t.samples, 1) << "b=" << t.micro_batch << " algo=" << t.algo;
    EXPECT_GT(t.time_ms, 0.0);
  }
  // The fastest configuration of each size is never pruned.
  for (int64_t size : MicroBatchSizes(BatchPolicy::kPowerOfTwo, 4)) {
    const Timing* fastest = nullptr;
    for (const Timing& t : table->entries) {
      if (t.status != TimingStatus::kOk) continue;
      if (t.micro_batch == size && (fastest == nullptr || t.time_ms < fastest->time_ms)) {
        fastest = &t;
      }
    }
    ASSERT_NE(fastest, nullptr);
    if (fastest->samples == 1) {
      // Only if a kept configuration's full measurement came out slower than its probe.
      bool kept_same_size = false;
      for (const Timing& t : table->entries) {
        kept_same_size |= t.micro_batch == size && t.samples >= options.min_runs;
      }
      EXPECT_TRUE(kept_same_size) << size;
    }
  }
  EXPECT_GE(full, 3);
}

// fp16 data in NHWC is measured (on fp32 NCHW copies); an fp16 compute type the CPU backend
// cannot do.
TEST_P(CpuEngineTest, Fp16ComputeIsRecordedUnsupportedNotSkipped) {
  CpuBackend cpu;
  ConvProblem p = SmallProblem(GetParam());
  p.data_type = DataType::kFloat16;
  p.compute_type = DataType::kFloat16;
  p.layout = Layout::kNHWC;
  Result<TimingTable> table = BenchmarkProblem(cpu, p, 2, BatchPolicy::kPowerOfTwo, QuickOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ExpectComplete(*table, {1, 2}, cpu.Algorithms(p.op));
  for (const Timing& t : table->entries) {
    EXPECT_EQ(t.status, TimingStatus::kUnsupported);
    EXPECT_FALSE(t.error.empty());
    EXPECT_EQ(t.samples, 0);
  }
}

// This worker's cap, not the backend's verdict: recorded failed with a "worker limit" reason, so
// no client takes it for a fact about the device (the planner chooses neither).
TEST_P(CpuEngineTest, WorkspaceAboveCapIsAWorkerLimitNotUnsupported) {
  CpuBackend cpu;
  const ConvProblem p = SmallProblem(GetParam());
  BenchmarkOptions options = QuickOptions();
  options.workspace_cap_bytes = 0;
  Result<TimingTable> table = BenchmarkProblem(cpu, p, 2, BatchPolicy::kPowerOfTwo, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  int ok = 0, capped = 0;
  for (const Timing& t : table->entries) {
    Result<size_t> ws = cpu.WorkspaceSize(p, t.micro_batch, t.algo);
    ASSERT_TRUE(ws.ok());
    if (*ws == 0) {
      EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
      ++ok;
    } else {
      EXPECT_EQ(t.status, TimingStatus::kFailed);
      EXPECT_TRUE(IsWorkerLimit(t)) << t.error;
      EXPECT_NE(t.error.find("over this worker's cap"), std::string::npos) << t.error;
      EXPECT_EQ(t.workspace_bytes, *ws);
      ++capped;
    }
  }
  EXPECT_GT(ok, 0);      // direct needs no workspace
  EXPECT_GT(capped, 0);  // im2col does
}

INSTANTIATE_TEST_SUITE_P(Ops, CpuEngineTest,
                         ::testing::Values(ConvOp::kForward, ConvOp::kBackwardData,
                                           ConvOp::kBackwardFilter),
                         [](const ::testing::TestParamInfo<ConvOp>& info) {
                           return std::string(ToString(info.param));
                         });

// Every math mode, fma included, is a problem the CPU backend computes in fp32.
TEST(CpuEngineArgsTest, EveryMathModeRunsOnTheCpu) {
  CpuBackend cpu;
  for (MathMode math : {MathMode::kDefault, MathMode::kTensorOp, MathMode::kTensorOpAllowConversion,
                        MathMode::kFma}) {
    ConvProblem p = SmallProblem(ConvOp::kForward);
    p.math = math;
    Result<TimingTable> table =
        BenchmarkProblem(cpu, p, 2, BatchPolicy::kPowerOfTwo, QuickOptions());
    ASSERT_TRUE(table.ok()) << ToString(math) << ": " << table.status().ToString();
    for (const Timing& t : table->entries) {
      EXPECT_EQ(t.status, TimingStatus::kOk) << ToString(math) << ": " << t.error;
    }
  }
}

TEST(CpuEngineArgsTest, CancelStopsTheBenchmark) {
  CpuBackend cpu;
  std::atomic<bool> cancel{true};
  BenchmarkOptions options = QuickOptions();
  options.cancel = &cancel;
  Result<TimingTable> table =
      BenchmarkProblem(cpu, SmallProblem(ConvOp::kForward), 2, BatchPolicy::kAll, options);
  EXPECT_EQ(table.status().code(), StatusCode::kUnavailable);
}

TEST(CpuEngineArgsTest, InvalidInputsAreRejected) {
  CpuBackend cpu;
  ConvProblem bad = SmallProblem(ConvOp::kForward);
  bad.c = 0;
  EXPECT_EQ(BenchmarkProblem(cpu, bad, 2, BatchPolicy::kAll).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      BenchmarkProblem(cpu, SmallProblem(ConvOp::kForward), 0, BatchPolicy::kAll).status().code(),
      StatusCode::kInvalidArgument);
}

// ---- on the GPU -------------------------------------------------------------------------------

class GpuEngineTest : public GpuTest {};

TEST_F(GpuEngineTest, ProducesACompleteTableForOneProblem) {
  ConvProblem p = MakeConv(256, 14, 256, 3, 1, 1);  // ResNet-50 layer 3, 3x3
  p.op = ConvOp::kForward;
  const BenchmarkOptions options = QuickOptions();
  Result<TimingTable> table = BenchmarkProblem(*gpu(), p, 16, BatchPolicy::kPowerOfTwo, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  const std::vector<int64_t> sizes = MicroBatchSizes(BatchPolicy::kPowerOfTwo, 16);
  ExpectComplete(*table, sizes, gpu()->Algorithms(p.op));
  std::map<int64_t, int> ok_per_size;
  for (const Timing& t : table->entries) {
    SCOPED_TRACE("b=" + std::to_string(t.micro_batch) + " algo=" + AlgorithmText(AlgorithmOf(t)));
    EXPECT_NE(t.status, TimingStatus::kFailed) << t.error;
    if (t.status != TimingStatus::kOk) {
      EXPECT_FALSE(t.error.empty());
      continue;
    }
    ++ok_per_size[t.micro_batch];
    EXPECT_GT(t.time_ms, 0.0);
    EXPECT_GE(t.spread_ms, 0.0);
    EXPECT_GE(t.samples, 1);
    std::printf("  b=%-3lld algo=%d %.4f ms (iqr %.4f, n=%d) ws=%llu\n",
                static_cast<long long>(t.micro_batch), t.algo, t.time_ms, t.spread_ms, t.samples,
                static_cast<unsigned long long>(t.workspace_bytes));
  }
  for (int64_t size : sizes) EXPECT_GE(ok_per_size[size], 2) << "micro-batch " << size;
}

// The mixed-precision training setup (fp16 NHWC, fp32 accumulation, tensor cores) for the three
// ops: a complete table with nothing failed, and at least one algorithm measured at every size.
TEST_F(GpuEngineTest, Fp16NhwcTablesAreCompleteForEveryOp) {
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    ConvProblem p = MakeConv(128, 28, 128, 3, 1, 1);  // ResNet-50 layer 2, 3x3
    p.op = op;
    p.data_type = DataType::kFloat16;
    p.compute_type = DataType::kFloat32;
    p.layout = Layout::kNHWC;
    p.math = MathMode::kTensorOp;
    const BenchmarkOptions options = QuickOptions();
    Result<TimingTable> table = BenchmarkProblem(*gpu(), p, 32, BatchPolicy::kPowerOfTwo, options);
    ASSERT_TRUE(table.ok()) << ToString(op) << ": " << table.status().ToString();
    const std::vector<int64_t> sizes = MicroBatchSizes(BatchPolicy::kPowerOfTwo, 32);
    ExpectComplete(*table, sizes, gpu()->Algorithms(p.op));
    std::map<int64_t, int> ok_per_size;
    for (const Timing& t : table->entries) {
      SCOPED_TRACE(std::string(ToString(op)) + " b=" + std::to_string(t.micro_batch) +
                   " algo=" + std::to_string(t.algo));
      EXPECT_NE(t.status, TimingStatus::kFailed) << t.error;
      if (t.status != TimingStatus::kOk) continue;
      ++ok_per_size[t.micro_batch];
      EXPECT_GT(t.time_ms, 0.0);
      EXPECT_GE(t.samples, 1);
      std::printf("  %s b=%-3lld algo=%d %.4f ms (iqr %.4f, n=%d) ws=%llu\n",
                  std::string(ToString(op)).c_str(), static_cast<long long>(t.micro_batch), t.algo,
                  t.time_ms, t.spread_ms, t.samples,
                  static_cast<unsigned long long>(t.workspace_bytes));
    }
    for (int64_t size : sizes) {
      EXPECT_GE(ok_per_size[size], 1) << ToString(op) << " micro-batch " << size;
    }
  }
}

TEST_F(GpuEngineTest, WorkspaceQueriesAgreeWithTheCap) {
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    ConvProblem p = MakeConv(64, 28, 64, 3, 1, 1);
    p.op = op;
    BenchmarkOptions options = QuickOptions();
    options.workspace_cap_bytes = 256 << 10;
    Result<TimingTable> table = BenchmarkProblem(*gpu(), p, 8, BatchPolicy::kPowerOfTwo, options);
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    int ok = 0;
    for (const Timing& t : table->entries) {
      SCOPED_TRACE(std::string(ToString(op)) + " b=" + std::to_string(t.micro_batch) +
                   " algo=" + AlgorithmText(AlgorithmOf(t)));
      Result<size_t> ws = gpu()->WorkspaceSize(p, t.micro_batch, AlgorithmOf(t));
      if (!ws.ok()) {
        EXPECT_EQ(t.status, TimingStatus::kUnsupported) << ws.status().ToString();
        continue;
      }
      EXPECT_EQ(t.workspace_bytes, *ws);  // the same answer as a direct query, every time
      if (*ws > options.workspace_cap_bytes) {
        EXPECT_EQ(t.status, TimingStatus::kFailed);
        EXPECT_TRUE(IsWorkerLimit(t)) << t.error;
      } else if (t.status == TimingStatus::kOk) {
        ++ok;
      } else {
        EXPECT_EQ(t.status, TimingStatus::kUnsupported) << t.error;  // declined at run time
      }
    }
    EXPECT_GT(ok, 0) << ToString(op) << ": no algorithm fits 256 KiB (algorithm 0 needs none)";
  }
}

// Prepare() builds on helper threads, each with a handle of its own, what Candidates() and
// WorkspaceSize() otherwise find one size at a time: the same configurations with the same
// workspaces, and plans (run on the helper handle they were built on) that compute the op.
TEST_F(GpuEngineTest, PreparedCandidatesAreThoseFoundOneSizeAtATime) {
  Result<std::unique_ptr<ConvBackend>> prepared = MakeBackend("cudnn", 0);
  Result<std::unique_ptr<ConvBackend>> lazy = MakeBackend("cudnn", 0);
  ASSERT_TRUE(prepared.ok() && lazy.ok());
  const std::vector<int64_t> sizes = {1, 2, 4, 8};
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    ConvProblem p = MakeConv(64, 28, 64, 3, 1, 1);
    p.op = op;
    (*prepared)->Prepare(p, sizes, 4);
    for (int64_t size : sizes) {
      SCOPED_TRACE(std::string(ToString(op)) + " b=" + std::to_string(size));
      std::map<std::string, size_t> with, without;
      for (const Timing& t : (*prepared)->Candidates(p, size)) {
        Result<size_t> ws = (*prepared)->WorkspaceSize(p, size, AlgorithmOf(t));
        with[AlgorithmText(AlgorithmOf(t))] = ws.ok() ? *ws : SIZE_MAX;
        // The timed runs' (beta 0) workspace is part of what every call needs.
        Result<size_t> overwriting = (*prepared)->OverwritingWorkspaceSize(p, size, AlgorithmOf(t));
        ASSERT_EQ(overwriting.ok(), ws.ok()) << t.engine_config;
        if (ws.ok()) {
          EXPECT_LE(*overwriting, *ws) << t.engine_config;
        }
      }
      for (const Timing& t : (*lazy)->Candidates(p, size)) {
        Result<size_t> ws = (*lazy)->WorkspaceSize(p, size, AlgorithmOf(t));
        without[AlgorithmText(AlgorithmOf(t))] = ws.ok() ? *ws : SIZE_MAX;
      }
      EXPECT_EQ(with, without);
      EXPECT_GT(with.size(), (*prepared)->Algorithms(op).size()) << "no engine configurations";
    }
    const int64_t batch = 4;
    HostTensors host = RandomTensors(p, batch, /*seed=*/77);
    Result<std::vector<float>> ref = CpuReference(p, batch, host);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    int ran = 0;
    for (const Timing& t : (*prepared)->Candidates(p, batch)) {
      if (t.engine_config.empty()) continue;
      Result<std::vector<float>> out = RunAlgorithm(**prepared, p, batch, AlgorithmOf(t), host);
      if (!out.ok() && out.status().code() == StatusCode::kUnsupported) continue;
      ASSERT_TRUE(out.ok()) << t.engine_config << ": " << out.status().ToString();
      EXPECT_LT(RelativeL2(*out, *ref), 1e-2) << ToString(op) << " " << t.engine_config;
      ++ran;
    }
    EXPECT_GT(ran, 0) << ToString(op);
  }
}

}  // namespace
}  // namespace ucudnn::gputest
