// The benchmark engine: one problem's timing table (every algorithm at every micro-batch size of
// a policy) measured on any ConvBackend, the way docs/design.md ("The benchmark engine") says:
// non-zero data, warm-up, device clock, median of several runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"
#include "ucudnn/engine/measurement_gate.h"
#include "ucudnn/engine/search_prior.h"

namespace ucudnn {

struct BenchmarkOptions {
  // Untimed runs before the first timed one of each (micro-batch, algorithm); at least 1. The
  // first run of a configuration pays one-off costs (cuDNN loading and selecting its kernels,
  // FFT plans, cold caches and clocks), and the probe run that decides how to sample the
  // configuration must not be that run: it is timed after one warm-up, and is the only sample of
  // a configuration slower than the budget allows twice.
  int warmup_runs = 2;
  // Timed runs per configuration: at least min_runs (unless the configuration is slower than the
  // time budget allows), more while the spread is above target, at most max_runs.
  int min_runs = 5;
  int max_runs = 25;
  // Interquartile range / median above which more samples are taken.
  double target_relative_spread = 0.05;
  // This worker's limit on the workspace one configuration may use. A configuration asking for
  // more is not measured: kFailed with a kWorkerLimitError reason (not kUnsupported: cuDNN did not
  // decline it, and a worker with a larger cap may measure it).
  uint64_t workspace_cap_bytes = uint64_t{2} << 30;
  // Wall time allowed per configuration for timed runs. A configuration whose single run takes
  // longer than budget / min_runs gets fewer samples (at least one); extra samples for a large
  // spread stop when the budget is spent.
  double config_time_budget_ms = 250;
  // Short runs, timed in groups (ConvBackend::TimeRunGroups): a configuration whose probe run
  // took less than short_run_ms is sampled as groups of back-to-back runs, each sample the mean
  // of one group, with enough runs per group to last about group_target_ms (from 2 up to
  // max_group): what a run costs among a segment's micro-batches in a training step. Timed one
  // per pair of device-clock readings, a short run would include the device's wait for the host
  // to issue it, which a sequence of runs hides. 0 disables grouping.
  double short_run_ms = 0.05;
  // Groups timed as the device alone runs them (queued before they start), leaving out the host's
  // cost of issuing each run even where it exceeds the run. Off by default: a step issues its
  // micro-batches from the host, and on an H200 device-only times predicted a 1 GiB ResNet-50
  // step 12.6% too fast and chose a plan 3.6% slower than issued-group times did (docs/results.md).
  bool short_runs_device_time_only = false;
  double group_target_ms = 0.2;
  // A short run's probe (below) is one group lasting about this long: it only decides pruning
  // and skipping (within prune_margin and skip_factor), not a time a plan uses. On an H200 the
  // probes took 11.5 of a ResNet-50 batch-256 table's 26.5 s, most of them groups of short runs.
  double probe_group_target_ms = 0.1;
  int max_group = 64;
  // Pruning by a probe: every configuration of a micro-batch size is first run once (after one
  // warm-up), a run shorter than short_run_ms then once more as a group (as the samples are); one
  // that another configuration of the size beats by more than this fraction with at most its
  // workspace is recorded with that one sample (it is dominated: never chosen) instead of the full
  // protocol. Negative disables the probes (every configuration gets the full
  // protocol).
  double prune_margin = 0.10;
  // Skipping across sizes (with the probes on): a configuration whose probe at one micro-batch
  // size is more than skip_factor times slower than another's that needs at most its workspace is
  // not run at the next size; one whose run takes 10 ms or more, more than skip_factor times
  // slower than the size's fastest, while its time per sample no longer falls (against its probe
  // at half the size or less: micro-batches of this size then do as well as larger ones), is not
  // run at any larger size. Either is recorded kFailed with a kWorkerLimitError reason that says
  // so (never a time, never replacing a measurement). On the H100, VGG-16's fp16 backward-filter
  // problems spent 14-33 s each probing slow legacy algorithms at every size before the second
  // rule. <= 0 disables both (complete tables).
  double skip_factor = 2.0;
  // Skipping where micro-batches do better (with skip_factor > 0), in grouped and depthwise
  // problems: a configuration whose probe at one size took more than this many times what
  // micro-batches of an earlier or the same size take for N samples, with that size's fastest
  // configuration needing at most its workspace, is not run at the larger sizes up to N. A larger
  // micro-batch takes at least as long as a smaller one, so the configuration cannot beat that
  // split there, which a plan takes instead. Probes shorter than 0.5 ms are not used (they read
  // high). Where the skip above holds for the next size only, this one reaches as far as the
  // split's bound: in grouped problems cuDNN has engines 100x slower than the fastest at every
  // size (they loop over the groups: their time hardly grows, so the saturation rule never stops
  // them), which the 2x skip probed at every other size (an H200's cold MobileNetV3-L: 92 s to
  // know it without, 75 s with). Not in dense problems: there the saturation rule stops the slow
  // engines from the probes this would leave out, and with it a cold ResNet-50 took 29.0-30.0 s
  // to know without, 31.5-35.8 s with (docs/results.md). <= 0 disables it.
  double split_skip_factor = 2.0;
  // Probes of one size queued together (ConvBackend::TimeRunBatch: one wait for the device
  // instead of one per configuration), about this much device time a batch by the
  // configurations' probes at the smaller size, between two looks of the gate (as one
  // measurement's config_time_budget_ms is). The host's wait, wake-up and issue between two
  // probes otherwise leave the device idle: on an H200, a cold ResNet-50's 25,000 probes took
  // about 150 us of host time each, a third of their time. 0: one configuration at a time.
  double probe_batch_ms = 50;
  // With the probes on: every size is probed before any is measured, and only the entries a
  // plan of the largest size could use, judged on their probes, take the full protocol; the
  // others keep their probe, as dominated ones do. Usable (UsableEntries, core/size_rule.h): were
  // the entry this fraction faster than its probe read, a fastest plan at some workspace limit
  // could run it. On an H200 a cold ResNet-50 at 256 spent 3.5 of its 7-10 s of measurements on
  // micro-batches of 1 to 8, short runs timed in groups of twenty, five samples each, that no
  // plan of 256 used. Negative: every size measured as it is probed.
  double usable_margin = 0.5;
  // Host threads that prepare the candidates of all micro-batch sizes at once before the timed
  // runs (ConvBackend::Prepare: on cuDNN the heuristics and execution plans, 1-2 ms of host time
  // per configuration, about 40 configurations per size, which otherwise leave the GPU idle for
  // most of a cold benchmark). 1 prepares each size when it is reached, on the calling thread.
  int prepare_threads = 8;
  // Seed of the operand data (FillRandom); inputs differ per tensor.
  uint64_t seed = 1;
  // The results of the configurations a plan could use (each size's time/workspace Pareto front)
  // checked against the fp32 reference (result_check.h), each configuration once, at the largest
  // size where it is on a front; a wrong one is stored failed ("wrong result: ...") at every size
  // and never planned.
  bool check_results = true;
  // When set and true, the benchmark stops before its next configuration and returns
  // kUnavailable ("benchmark cancelled"); e.g. a worker shutting down.
  const std::atomic<bool>* cancel = nullptr;
  // When set, every probe and measurement waits until the device runs no other work
  // (MeasurementGate::WaitUntilIdle: a pause keeps what was measured), and one after which the
  // gate saw other work is taken again (at most kContentionRemeasures times) and, still
  // contended, recorded kFailed with a kContendedError reason: never a time the planner uses.
  MeasurementGate* gate = nullptr;
  // With the probes on: configurations not run at micro-batch sizes >= kPriorFromMicroBatch,
  // with the reason recorded in their place (kFailed, a worker limit): those that lost by a wide
  // margin on every nearby problem of the device (PriorLosers, search_prior.h). Null: none.
  const std::map<std::string, std::string>* prior = nullptr;
  // Spread (IQR / median) above which a measurement counts as contended (see
  // kContendedRelativeSpread); 0 judges by the gate alone. The worker sets it on GPUs.
  double contended_relative_spread = 0;
};

Status Validate(const BenchmarkOptions& options);

struct BenchmarkProgress {
  int64_t done = 0;   // configurations finished (measured or recorded unsupported/failed)
  int64_t total = 0;  // configurations of the table
  const Timing* latest = nullptr;
};
using BenchmarkProgressFn = std::function<void(const BenchmarkProgress&)>;

// Measures `problem` (its op) for each micro-batch size of MicroBatchSizes(policy,
// max_micro_batch) and each candidate of backend.Candidates(problem, size) (the legacy
// algorithms, and on cuDNN the engine configurations proposed for that size): one entry per
// (size, candidate). Per entry: kOk with median, IQR spread, samples and workspace;
// kUnsupported with the backend's reason when it declines the configuration; kFailed with the
// error of a query or a run, or with a kWorkerLimitError reason (workspace above the cap, or
// workspace or operands that could not be allocated: operands are allocated once at the largest
// micro-batch that fits, and only the larger micro-batches are recorded so).
// Errors of the whole call: invalid arguments, operands of even the smallest micro-batch that
// cannot be allocated or filled, cancellation (kUnavailable), and a lost device (kDeviceLost):
// after every failed query, allocation or run, and once at the end, the backend's Healthy() is
// asked, so a dead device stops the benchmark instead of recording every later configuration as
// failed.
Result<TimingTable> BenchmarkProblem(ConvBackend& backend, const ConvProblem& problem,
                                     int64_t max_micro_batch, BatchPolicy policy,
                                     const BenchmarkOptions& options = {},
                                     const BenchmarkProgressFn& progress = nullptr);
// The same for the micro-batch sizes given (strictly increasing): sizes x algorithms entries.
// For a table that must cover several mini-batches whose policy sizes are not nested (the
// power-of-two sizes of 3 are not among those of 6).
Result<TimingTable> BenchmarkMicroBatches(ConvBackend& backend, const ConvProblem& problem,
                                          const std::vector<int64_t>& sizes,
                                          const BenchmarkOptions& options = {},
                                          const BenchmarkProgressFn& progress = nullptr);

// A table measured for one per-kernel workspace limit (issue 40: the micro-batch sizes a planner
// can use under it, core/size_rule.h), in rounds: BenchmarkMicroBatches over the sizes
// NextSizesForLimit asks of `known` (what is already measured of the problem on this device; a
// size counts only where every candidate of the backend has an entry, else it is timed again)
// and of the rounds before, until it asks for none. Returns the entries measured (not `known`'s):
// empty where `known` covers the limit already. `progress` counts over all rounds.
Result<TimingTable> BenchmarkForLimit(ConvBackend& backend, const ConvProblem& problem,
                                      int64_t max_micro_batch, BatchPolicy policy,
                                      uint64_t workspace_limit, const TimingTable& known,
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
