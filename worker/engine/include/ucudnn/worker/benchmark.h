// The benchmark engine: one problem's timing table (every algorithm at every micro-batch size of
// a policy) measured on any ConvBackend, the way DESIGN.md asks: non-zero data, warm-up, device
// clock, median of several runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

struct BenchmarkOptions {
  // Untimed runs before the first timed one of each (micro-batch, algorithm).
  int warmup_runs = 2;
  // Timed runs per configuration: at least min_runs (unless the configuration is slower than the
  // time budget allows), more while the spread is above target, at most max_runs.
  int min_runs = 5;
  int max_runs = 25;
  // Interquartile range / median above which more samples are taken.
  double target_relative_spread = 0.05;
  // Algorithms asking for more workspace are recorded kUnsupported ("workspace ... exceeds cap").
  uint64_t workspace_cap_bytes = uint64_t{2} << 30;
  // Wall time allowed per configuration for timed runs. A configuration whose single run takes
  // longer than budget / min_runs gets fewer samples (at least one); extra samples for a large
  // spread stop when the budget is spent.
  double config_time_budget_ms = 250;
  // Seed of the operand data (FillRandom); inputs differ per tensor.
  uint64_t seed = 1;
  // When set and true, the benchmark stops before its next configuration and returns
  // kUnavailable ("benchmark cancelled"); e.g. a worker shutting down.
  const std::atomic<bool>* cancel = nullptr;
};

Status Validate(const BenchmarkOptions& options);

struct BenchmarkProgress {
  int64_t done = 0;   // configurations finished (measured or recorded unsupported/failed)
  int64_t total = 0;  // configurations of the table
  const Timing* latest = nullptr;
};
using BenchmarkProgressFn = std::function<void(const BenchmarkProgress&)>;

// Measures `problem` (its op) for each micro-batch size of MicroBatchSizes(policy,
// max_micro_batch) and each algorithm of backend.Algorithms(problem.op): the table has exactly
// sizes x algorithms entries. Per entry: kOk with median, IQR spread, samples and workspace;
// kUnsupported with the backend's reason or "workspace X exceeds cap Y"; kFailed with the error
// of a run or an allocation. Errors of the whole call: invalid arguments, operands that cannot
// be allocated or filled, cancellation.
Result<TimingTable> BenchmarkProblem(ConvBackend& backend, const ConvProblem& problem,
                                     int64_t max_micro_batch, BatchPolicy policy,
                                     const BenchmarkOptions& options = {},
                                     const BenchmarkProgressFn& progress = nullptr);

// Median and interquartile range (linear interpolation between order statistics, as numpy's
// default) of timing samples; zeros for an empty input.
struct SampleSummary {
  double median_ms = 0;
  double spread_ms = 0;
};
SampleSummary Summarize(std::vector<double> samples);

}  // namespace ucudnn
