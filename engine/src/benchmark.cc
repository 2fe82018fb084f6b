#include "ucudnn/engine/benchmark.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/random_fill.h"
#include "ucudnn/core/size_rule.h"
#include "ucudnn/core/units.h"
#include "ucudnn/engine/result_check.h"

namespace ucudnn {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double RelativeSpread(const std::vector<double>& samples) {
  const SampleSummary s = Summarize(samples);
  return s.median_ms > 0 ? s.spread_ms / s.median_ms : 0.0;
}

bool Cancelled(const BenchmarkOptions& options) {
  return options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed);
}

// Bytes of the three operand tensors of `p` at micro-batch `batch`.
uint64_t OperandBytes(const ConvProblem& p, int64_t batch) {
  const uint64_t elements = static_cast<uint64_t>(batch * p.input_elements_per_sample()) +
                            static_cast<uint64_t>(batch * p.output_elements_per_sample()) +
                            static_cast<uint64_t>(p.filter_elements());
  return elements * ElementSize(p.data_type);
}

// The operands of one problem at one micro-batch; smaller micro-batches walk their slices
// (ConvOperands::samples, TimedRunOperands).
struct Operands {
  std::unique_ptr<BackendBuffer> input;   // x or dx: c x h x w per sample
  std::unique_ptr<BackendBuffer> output;  // y or dy: k x out_h x out_w per sample
  std::unique_ptr<BackendBuffer> filter;  // w or dw
  ConvOperands view;
};

Result<Operands> MakeOperands(ConvBackend& backend, const ConvProblem& p, int64_t batch,
                              uint64_t seed) {
  const size_t elem = ElementSize(p.data_type);
  const size_t input_count = static_cast<size_t>(batch * p.input_elements_per_sample());
  const size_t output_count = static_cast<size_t>(batch * p.output_elements_per_sample());
  const size_t filter_count = static_cast<size_t>(p.filter_elements());
  Operands o;
  o.view.samples = batch;
  UCUDNN_ASSIGN_OR_RETURN(o.input, backend.Allocate(input_count * elem));
  UCUDNN_ASSIGN_OR_RETURN(o.output, backend.Allocate(output_count * elem));
  UCUDNN_ASSIGN_OR_RETURN(o.filter, backend.Allocate(filter_count * elem));
  // Only what the op reads gets data; with beta = 0 the written tensor is not read.
  switch (p.op) {
    case ConvOp::kForward:
      UCUDNN_RETURN_IF_ERROR(
          FillRandomTiled(backend, o.input->data(), input_count, p.data_type, seed));
      UCUDNN_RETURN_IF_ERROR(
          FillRandomTiled(backend, o.filter->data(), filter_count, p.data_type, seed + 1));
      o.view.x = o.input->data();
      o.view.w = o.filter->data();
      o.view.y = o.output->data();
      break;
    case ConvOp::kBackwardData:
      UCUDNN_RETURN_IF_ERROR(
          FillRandomTiled(backend, o.output->data(), output_count, p.data_type, seed + 2));
      UCUDNN_RETURN_IF_ERROR(
          FillRandomTiled(backend, o.filter->data(), filter_count, p.data_type, seed + 1));
      o.view.dy = o.output->data();
      o.view.w = o.filter->data();
      o.view.dx = o.input->data();
      break;
    case ConvOp::kBackwardFilter:
      UCUDNN_RETURN_IF_ERROR(
          FillRandomTiled(backend, o.input->data(), input_count, p.data_type, seed));
      UCUDNN_RETURN_IF_ERROR(
          FillRandomTiled(backend, o.output->data(), output_count, p.data_type, seed + 2));
      o.view.x = o.input->data();
      o.view.dy = o.output->data();
      o.view.dw = o.filter->data();
      break;
  }
  UCUDNN_RETURN_IF_ERROR(backend.Synchronize());
  return o;
}

// After `failure` (of a query, an allocation or a run): OK when the device is still usable, so the
// failure belongs to the configuration; otherwise the error that ends the whole benchmark,
// kDeviceLost when the device is gone. Without this, a sticky CUDA error (illegal address, launch
// failure, uncorrectable ECC error) would record every later configuration as failed and the
// table would look like a measurement.
Status EnsureHealthy(ConvBackend& backend, const std::string& after) {
  const Status health = backend.Healthy();
  if (health.ok()) return Status::Ok();
  return Status(health.code(),
                "device unusable: " + health.message() + " (noticed after " + after + ")");
}

Status CheckDevice(ConvBackend& backend, const Status& failure) {
  if (failure.code() == StatusCode::kDeviceLost) return failure;
  return EnsureHealthy(backend, failure.ToString());
}

std::string FormatRatio(double r) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2g", r);
  return text;
}

// Per-sample time at a micro-batch at least this fraction of that at half the size (or less):
// the configuration no longer gains from larger micro-batches (see SaturationReason).
constexpr double kSaturatedPerSampleRatio = 0.95;
// ... and only runs at least this long are skipped so: those are what a cold benchmark spends
// its time on (VGG-16's fp16 backward-filter probes on the H100), while the probes of single
// runs of short ones are too noisy to tell saturation. Without this bound the rule also skipped
// ResNet-50 fp16 configurations that later sizes would have used: the step came out 5% slower.
constexpr double kSaturatedMinRunMs = 10.0;

std::string WorkerLimit(const std::string& reason) {
  return std::string(kWorkerLimitError) + reason;
}

// Failed runs say what failed; cuDNN declining at run time is the same as declining at the query.
void RecordRunFailure(Timing& t, const Status& status) {
  t.status = status.code() == StatusCode::kUnsupported ? TimingStatus::kUnsupported
                                                       : TimingStatus::kFailed;
  t.error = status.ToString();
}

// Runs per sample of a configuration whose single run took `run_ms`: a group of back-to-back runs
// lasting about `target_ms` (2 to max_group) where the run is shorter than short_run_ms (one run
// per pair of clock readings would include the device's wait for the host to issue it), else one.
int RunsPerSample(double run_ms, const BenchmarkOptions& o, double target_ms) {
  if (!(run_ms < o.short_run_ms)) return 1;
  const double wanted = std::ceil(target_ms / std::max(run_ms, 1e-6));
  return static_cast<int>(std::min<double>(o.max_group, std::max(2.0, wanted)));
}

// A probe needs no warm-up of its own where the configuration's probe at a smaller size took at
// least this long: a plan's first call at a new size then costs little against the run. Shorter
// ones are warmed up (a run of them costs little): on an H200 (ResNet-50 fp16 batch 64), cold
// single-run probes read 1.6-2.1x the measured time of runs under 50 us and 1.28x of runs under
// 0.2 ms (their median), and pruning on them made plans 4.8% slower than the exhaustive search's.
constexpr double kWarmProbeMs = 1.0;

// BenchmarkOptions::split_skip_factor takes only probes at least this long as a configuration's
// time: short probes read high (1.28x the measured time below 0.2 ms on an H200, above), and a
// run that high would skip the configuration where it wins.
constexpr double kSplitSkipMinProbeMs = 0.5;

// A configuration's probe with no probe at a smaller size is expected to take this long when
// probes are batched (BenchmarkOptions::probe_batch_ms): most are far shorter, and one that is
// not ends its batch early by at most its own run.
constexpr double kUnknownProbeMs = 1.0;

struct Measurement {
  std::vector<double> samples;
  int group = 1;     // runs per sample
  int64_t runs = 0;  // issued, warm-ups included (for the summary line)
};

// Samples of one configuration; see BenchmarkOptions for the policy. `probed_ms` > 0: the
// configuration's probe at this size, just taken (ProbeSize), instead of taking one here.
Result<Measurement> Measure(ConvBackend& backend, const ConvProblem& problem, int64_t batch,
                            const Algorithm& algo, const ConvOperands& operands, void* workspace,
                            size_t workspace_bytes, const BenchmarkOptions& options,
                            double probed_ms) {
  const Clock::time_point start = Clock::now();
  Measurement m;
  const auto time_groups = [&](int warmup, int samples, int group) {
    m.runs += warmup + int64_t{samples} * group;
    return backend.TimeRunGroups(problem, batch, algo, operands, workspace, workspace_bytes, warmup,
                                 samples, group, options.short_runs_device_time_only);
  };
  const auto append = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };

  // One probe run, after one warm-up (Validate guarantees warmup_runs >= 1), tells how slow the
  // configuration is before committing to many runs. One taken before (its code loaded by then)
  // counts as that warm-up, but other configurations ran since: it is neither a sample nor the
  // runs' last warm-up.
  std::vector<double> probe = {probed_ms};
  if (probed_ms <= 0) {
    UCUDNN_ASSIGN_OR_RETURN(probe, time_groups(1, 1, 1));
  }
  const bool adjacent = probed_ms <= 0;  // the probe ran right before the samples
  int warmup_left = options.warmup_runs - 1;
  const double probe_ms = std::max(probe[0], 1e-6);
  const double budget = options.config_time_budget_ms;
  if (probe_ms * (warmup_left + options.min_runs) > budget) {
    // Too slow for the full protocol: skip the remaining warm-ups (the probe ran after one) and
    // take what the budget allows, at least the probe itself.
    const int affordable = std::clamp(static_cast<int>(budget / probe_ms), 1, options.min_runs);
    append(m.samples, probe);
    const int more = affordable - 1;
    if (more > 0) {
      UCUDNN_ASSIGN_OR_RETURN(std::vector<double> extra, time_groups(0, more, 1));
      append(m.samples, extra);
    }
    return m;
  }
  m.group = RunsPerSample(probe_ms, options, options.group_target_ms);
  if (!adjacent) {
    warmup_left = std::max(warmup_left, 1);
  } else if (warmup_left > 0) {
    --warmup_left;  // the probe was one more warm-up
  } else if (m.group == 1) {
    append(m.samples, probe);  // it ran after the warm-ups: a sample like the others
  }
  // (A grouped configuration drops its probe: one run per clock pair is what grouping avoids.)
  const int first_batch = options.min_runs - static_cast<int>(m.samples.size());
  if (first_batch > 0) {
    UCUDNN_ASSIGN_OR_RETURN(std::vector<double> first,
                            time_groups(warmup_left, first_batch, m.group));
    append(m.samples, first);
  }
  while (RelativeSpread(m.samples) > options.target_relative_spread &&
         static_cast<int>(m.samples.size()) < options.max_runs && MsSince(start) < budget) {
    const int chunk =
        std::min(options.min_runs, options.max_runs - static_cast<int>(m.samples.size()));
    UCUDNN_ASSIGN_OR_RETURN(std::vector<double> extra, time_groups(0, chunk, m.group));
    append(m.samples, extra);
  }
  return m;
}

}  // namespace

SampleSummary Summarize(std::vector<double> samples) {
  if (samples.empty()) return {};
  std::sort(samples.begin(), samples.end());
  return {Quantile(samples, 0.5), Quantile(samples, 0.75) - Quantile(samples, 0.25)};
}

Status Validate(const BenchmarkOptions& o) {
  if (o.warmup_runs < 1 || o.warmup_runs > 1000) {
    return InvalidArgument("warmup_runs: must be in [1, 1000], got " +
                           std::to_string(o.warmup_runs));
  }
  if (o.min_runs < 1 || o.min_runs > 10000) {
    return InvalidArgument("min_runs: must be in [1, 10000], got " + std::to_string(o.min_runs));
  }
  if (o.max_runs < o.min_runs || o.max_runs > 10000) {
    return InvalidArgument("max_runs: must be in [min_runs, 10000], got " +
                           std::to_string(o.max_runs));
  }
  if (!(o.target_relative_spread >= 0)) {
    return InvalidArgument("target_relative_spread: must be >= 0");
  }
  if (!(o.config_time_budget_ms > 0)) {
    return InvalidArgument("config_time_budget_ms: must be positive");
  }
  if (!(o.short_run_ms >= 0)) return InvalidArgument("short_run_ms: must be >= 0");
  if (std::isnan(o.prune_margin)) return InvalidArgument("prune_margin: must be a number");
  if (std::isnan(o.skip_factor)) return InvalidArgument("skip_factor: must be a number");
  if (std::isnan(o.split_skip_factor)) {
    return InvalidArgument("split_skip_factor: must be a number");
  }
  if (!(o.group_target_ms > 0)) return InvalidArgument("group_target_ms: must be positive");
  if (!(o.probe_group_target_ms > 0)) {
    return InvalidArgument("probe_group_target_ms: must be positive");
  }
  if (!(o.probe_batch_ms >= 0)) return InvalidArgument("probe_batch_ms: must be >= 0");
  if (std::isnan(o.usable_margin)) return InvalidArgument("usable_margin: must be a number");
  if (o.prepare_threads < 1 || o.prepare_threads > 256) {
    return InvalidArgument("prepare_threads: must be in [1, 256], got " +
                           std::to_string(o.prepare_threads));
  }
  if (o.max_group < 1 || o.max_group > 1024) {
    return InvalidArgument("max_group: must be in [1, 1024], got " + std::to_string(o.max_group));
  }
  return Status::Ok();
}

Result<TimingTable> BenchmarkProblem(ConvBackend& backend, const ConvProblem& problem,
                                     int64_t max_micro_batch, BatchPolicy policy,
                                     const BenchmarkOptions& options,
                                     const BenchmarkProgressFn& progress) {
  UCUDNN_RETURN_IF_ERROR(ValidateBatch(max_micro_batch).WithContext("max_micro_batch"));
  return BenchmarkMicroBatches(backend, problem, MicroBatchSizes(policy, max_micro_batch), options,
                               progress);
}

namespace {

// Why configuration `t`, probed at `probe_ms`, is not run at any larger size, or "": saturated,
// slow and long. Its time per sample no longer falls with the micro-batch (against its probe at
// half the size or less, from `history`: size -> ms), the size's fastest (`fastest_ms`) is more
// than skip_factor faster, and a run takes at least kSaturatedMinRunMs. A larger micro-batch of it
// is then worth no more than several of this size, which a plan can use instead.
std::string SaturationReason(const Timing& t, double probe_ms,
                             const std::map<int64_t, double>& history, double fastest_ms,
                             double skip_factor) {
  if (probe_ms < kSaturatedMinRunMs || probe_ms <= skip_factor * fastest_ms) return "";
  const auto before = history.upper_bound(t.micro_batch / 2);
  if (before == history.begin()) return "";
  const auto [size, ms] = *std::prev(before);
  const double per_sample_now = probe_ms / static_cast<double>(t.micro_batch);
  const double per_sample_before = ms / static_cast<double>(size);
  if (per_sample_now < kSaturatedPerSampleRatio * per_sample_before) return "";
  return "not measured: its time per sample stopped falling (" + FormatRatio(ms) + " ms at " +
         std::to_string(size) + ", " + FormatRatio(probe_ms) + " ms at " +
         std::to_string(t.micro_batch) + ") while the fastest at " + std::to_string(t.micro_batch) +
         " was more than " + FormatRatio(skip_factor) + "x faster: micro-batches of " +
         std::to_string(t.micro_batch) + " do as well";
}

// One BenchmarkMicroBatches call, in the order it runs: candidates, operands, workspace, then
// each micro-batch size's probes and measurements.
class TableBenchmark {
 public:
  TableBenchmark(ConvBackend& backend, const ConvProblem& problem,
                 const std::vector<int64_t>& sizes, const BenchmarkOptions& options,
                 const BenchmarkProgressFn& progress)
      : backend_(backend),
        problem_(problem),
        sizes_(sizes),
        options_(options),
        progress_(progress),
        key_(CanonicalKey(problem)) {}

  Result<TimingTable> Run() {
    const Clock::time_point start = Clock::now();
    Clock::time_point phase = Clock::now();
    if (options_.prepare_threads > 1) {
      backend_.Prepare(problem_, sizes_, options_.prepare_threads);
      prepare_ms_ = MsSince(phase);
    }
    phase = Clock::now();
    UCUDNN_RETURN_IF_ERROR(QueryCandidates());
    query_ms_ = MsSince(phase);
    phase = Clock::now();
    UCUDNN_RETURN_IF_ERROR(AllocateOperands());
    operands_ms_ = MsSince(phase);
    probe_ms_.assign(table_.entries.size(), -1.0);
    probe_after_.assign(table_.entries.size(), DeviceActivity{});
    released_.assign(table_.entries.size(), false);
    unusable_.assign(table_.entries.size(), false);
    if (options_.prune_margin >= 0) ReleaseRuledOut(0);  // the prior's
    // With the probes on, every size is probed before any is measured, so that the measurements
    // go to the entries a plan could use (BenchmarkOptions::usable_margin).
    const bool probes_first = options_.prune_margin >= 0 && options_.usable_margin >= 0;
    for (const auto& [first, last] : size_ranges_) {
      phase = Clock::now();
      UCUDNN_RETURN_IF_ERROR(QueryWorkspaces(first, last));
      query_ms_ += MsSince(phase);
      phase = Clock::now();
      UCUDNN_RETURN_IF_ERROR(GrowWorkspace(first, last));
      operands_ms_ += MsSince(phase);
      phase = Clock::now();
      if (options_.prune_margin >= 0) {
        UCUDNN_RETURN_IF_ERROR(ProbeSize(first, last));
        DecideSkips(first, last);
        ReleaseRuledOut(last);
      }
      probe_total_ms_ += MsSince(phase);
      if (probes_first) continue;
      phase = Clock::now();
      UCUDNN_RETURN_IF_ERROR(MeasureSize(first, last));
      measure_ms_ += MsSince(phase);
    }
    if (probes_first) {
      DecideUsable();
      phase = Clock::now();
      for (const auto& [first, last] : size_ranges_) {
        UCUDNN_RETURN_IF_ERROR(MeasureSize(first, last));
      }
      measure_ms_ += MsSince(phase);
    }
    phase = Clock::now();
    UCUDNN_RETURN_IF_ERROR(SettleWorkspaces());
    query_ms_ += MsSince(phase);
    phase = Clock::now();
    UCUDNN_RETURN_IF_ERROR(CheckResults());
    check_ms_ = MsSince(phase);
    // A device lost during the last configuration shows here at the latest: a table is
    // returned only when the device was sound after it was measured.
    UCUDNN_RETURN_IF_ERROR(EnsureHealthy(backend_, "the last configuration").WithContext(key_));
    LogSummary(MsSince(start));
    return std::move(table_);
  }

 private:
  bool AnyRunnable() const {
    return std::find(runnable_.begin(), runnable_.end(), true) != runnable_.end();
  }

  // 1. The candidates of every micro-batch size (legacy algorithms, then the engine
  // configurations cuDNN proposes for that size). Their workspaces are asked size by size
  // (QueryWorkspaces), of the candidates no smaller size ruled out.
  Status QueryCandidates() {
    for (int64_t size : sizes_) {
      const size_t first = table_.entries.size();
      for (Timing& t : backend_.Candidates(problem_, size)) {
        t.micro_batch = size;
        ids_.push_back(AlgorithmText(AlgorithmOf(t)));
        table_.entries.push_back(std::move(t));
        runnable_.push_back(true);
      }
      if (table_.entries.size() > first) size_ranges_.emplace_back(first, table_.entries.size());
    }
    if (table_.entries.empty()) {
      return InvalidArgument("nothing to measure: the backend has no algorithm for " + key_);
    }
    workspace_known_.assign(table_.entries.size(), false);
    return Status::Ok();
  }

  // 1b. The workspace of the timed runs (beta 0; what every call of a plan needs is settled
  // later, for the configurations a plan could use: SettleWorkspaces) of each candidate of the
  // size [first, last) that a smaller size did not rule out; those that cannot run are settled
  // here. Asking costs an execution plan, a runtime compilation for cuDNN's grouped and depthwise
  // engines (ConvBackend::Prepare leaves those out): asked of every candidate up front, a
  // ConvNeXt depthwise problem compiled over 40% of them for configurations the probes of a
  // smaller size then ruled out.
  Status QueryWorkspaces(size_t first, size_t last) {
    Status first_query_failure;
    for (size_t i = first; i < last; ++i) {
      Timing& t = table_.entries[i];
      if (!runnable_[i] || workspace_known_[i]) continue;
      if (options_.prune_margin >= 0 && RuledOut(ids_[i], t.micro_batch) != nullptr) continue;
      workspace_known_[i] = true;
      Result<size_t> ws =
          backend_.OverwritingWorkspaceSize(problem_, t.micro_batch, AlgorithmOf(t));
      if (!ws.ok()) {
        if (ws.status().code() == StatusCode::kDeviceLost) return ws.status().WithContext(key_);
        RecordRunFailure(t, ws.status());
        runnable_[i] = false;
        if (t.status == TimingStatus::kFailed && first_query_failure.ok()) {
          first_query_failure = ws.status();
        }
      } else if (*ws > options_.workspace_cap_bytes) {
        // This worker's limit, not cuDNN's verdict: kFailed with a reason that says so, never
        // kUnsupported (see kWorkerLimitError).
        t.workspace_bytes = *ws;
        t.status = TimingStatus::kFailed;
        t.error = WorkerLimit("workspace " + FormatBytes(*ws) + " over this worker's cap " +
                              FormatBytes(options_.workspace_cap_bytes) +
                              " (--workspace-cap); not measured, cuDNN did not decline it");
        runnable_[i] = false;
      } else {
        t.workspace_bytes = *ws;
      }
    }
    if (!first_query_failure.ok()) {
      UCUDNN_RETURN_IF_ERROR(CheckDevice(backend_, first_query_failure).WithContext(key_));
    }
    return Status::Ok();
  }

  // 2. Operands once, at the largest micro-batch that can be allocated: when the largest does
  // not fit in this device's free memory, the next smaller size is tried, and only the
  // micro-batches above the one allocated are recorded as failed (this worker's limit).
  // Operands that fit nowhere, even at the smallest size, fail the whole call.
  Status AllocateOperands() {
    if (!AnyRunnable()) return Status::Ok();
    std::set<int64_t, std::greater<>> candidates;  // micro-batches with a runnable configuration
    for (size_t i = 0; i < table_.entries.size(); ++i) {
      if (runnable_[i]) candidates.insert(table_.entries[i].micro_batch);
    }
    int64_t allocated = 0;
    Status oom;
    for (int64_t batch : candidates) {
      Result<Operands> made = MakeOperands(backend_, problem_, batch, options_.seed);
      if (made.ok()) {
        operands_ = std::move(made).value();
        allocated = batch;
        break;
      }
      if (made.status().code() != StatusCode::kResourceExhausted) {
        return made.status().WithContext(key_ + ": operands of micro-batch " +
                                         std::to_string(batch));
      }
      spdlog::warn("benchmark {}: operands of micro-batch {} ({}) do not fit on {}: {}", key_,
                   batch, FormatBytes(OperandBytes(problem_, batch)), backend_.fingerprint().name,
                   made.status().ToString());
      oom = made.status();
    }
    if (allocated == 0) {
      const int64_t smallest = *candidates.rbegin();
      return oom.WithContext(key_ + ": operands of the smallest micro-batch " +
                             std::to_string(smallest) + " (" +
                             FormatBytes(OperandBytes(problem_, smallest)) + ")");
    }
    for (size_t i = 0; i < table_.entries.size(); ++i) {
      Timing& t = table_.entries[i];
      if (!runnable_[i] || t.micro_batch <= allocated) continue;
      runnable_[i] = false;
      t.status = TimingStatus::kFailed;
      t.error = WorkerLimit("operands of micro-batch " + std::to_string(t.micro_batch) + " (" +
                            FormatBytes(OperandBytes(problem_, t.micro_batch)) +
                            ") could not be allocated on this worker; measured up to micro-batch " +
                            std::to_string(allocated) + ": " + oom.ToString());
    }
    return Status::Ok();
  }

  // 3. One workspace for all configurations, grown size by size to the largest the size's
  // runnable ones need (never shrunk: the result checks run every size's configurations in it
  // at the end). When it cannot be had, the size's configurations needing it fail (this worker's
  // limit) and the next smaller need is tried.
  Status GrowWorkspace(size_t first, size_t last) {
    const uint64_t held = workspace_ != nullptr ? workspace_->size() : 0;
    while (true) {
      uint64_t largest = 0;
      for (size_t i = first; i < last; ++i) {
        if (runnable_[i] && workspace_known_[i]) {
          largest = std::max(largest, table_.entries[i].workspace_bytes);
        }
      }
      if (workspace_ != nullptr && largest <= held) return Status::Ok();
      const uint64_t wanted = std::max(largest, held);
      Result<std::unique_ptr<BackendBuffer>> buffer = backend_.Allocate(wanted);
      if (!buffer.ok() && buffer.status().code() == StatusCode::kResourceExhausted &&
          workspace_ != nullptr) {
        workspace_.reset();  // the smaller one's memory, for the larger one
        buffer = backend_.Allocate(wanted);
      }
      if (buffer.ok()) {
        workspace_ = std::move(*buffer);
        return Status::Ok();
      }
      const bool oom = buffer.status().code() == StatusCode::kResourceExhausted;
      if (!oom) UCUDNN_RETURN_IF_ERROR(CheckDevice(backend_, buffer.status()).WithContext(key_));
      if (largest <= held) {
        // Not even what the smaller sizes ran in: the memory went elsewhere meanwhile.
        return buffer.status().WithContext(key_ + ": the workspace of " + FormatBytes(held) +
                                           " the smaller micro-batches ran in");
      }
      for (size_t i = first; i < last; ++i) {
        Timing& t = table_.entries[i];
        if (!runnable_[i] || !workspace_known_[i] || t.workspace_bytes < largest) continue;
        runnable_[i] = false;
        t.status = TimingStatus::kFailed;
        t.error = oom ? WorkerLimit(
                            "workspace " + FormatBytes(t.workspace_bytes) +
                            " could not be allocated on this worker: " + buffer.status().ToString())
                      : buffer.status().ToString();
      }
    }
  }

  void* WorkspaceOf(const Timing& t) const {
    return t.workspace_bytes > 0 ? workspace_->data() : nullptr;
  }

  // A failed run: recorded, or the end of the benchmark when the device is gone.
  Status FailRun(size_t i, const Status& failure) {
    Timing& t = table_.entries[i];
    UCUDNN_RETURN_IF_ERROR(CheckDevice(backend_, failure)
                               .WithContext(key_ + " micro-batch " + std::to_string(t.micro_batch) +
                                            " algo " + AlgorithmText(AlgorithmOf(t))));
    RecordRunFailure(t, failure);
    runnable_[i] = false;
    return Status::Ok();
  }

  // 5. The workspace of every call a plan makes (ConvBackend::WorkspaceSize: a backward filter's
  // accumulating calls too, which cuDNN's engines run with another plan), where the sizes were
  // timed with the overwriting call's. Asked only of each size's time/workspace front, until the
  // front holds settled configurations only: one off the front with the smaller workspace is off
  // it with the larger one too, and keeps the smaller one in the table (no plan reads it). Asked
  // of every configuration with the queries, the accumulating plans' runtime compilation cost an
  // H200 4.6 s per depthwise backward-filter problem.
  Status SettleWorkspaces() {
    std::vector<bool> settled(table_.entries.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& [first, last] : size_ranges_) {
        for (size_t i : ParetoFront(first, last, {})) {
          if (settled[i]) continue;
          settled[i] = changed = true;
          Timing& t = table_.entries[i];
          Result<size_t> ws = backend_.WorkspaceSize(problem_, t.micro_batch, AlgorithmOf(t));
          if (!ws.ok()) {
            UCUDNN_RETURN_IF_ERROR(FailRun(i, ws.status()));
            continue;
          }
          t.workspace_bytes = std::max<uint64_t>(t.workspace_bytes, *ws);
        }
      }
    }
    return Status::Ok();
  }

  // 6. The results a plan could use, against the fp32 reference (result_check.h), once every
  // size is timed. A plan takes, at each workspace limit, the fastest configuration of a size, so
  // only each size's time/workspace Pareto front needs checking, and each configuration once per
  // problem: at the largest size where it is on a front (where a fault that grows with the
  // tensors, an index past 2^31, shows first), which vouches for its smaller sizes. A wrong one is
  // recorded as such at every size (kFailed with kWrongResultError: never planned for this device
  // fingerprint, its GPU and library version), and the fronts without it are checked in turn,
  // until every configuration on them agrees with the reference. Checking every configuration at
  // every size cost an H200 3-22 s per ResNet-50 problem, 5-20x its measurements; a configuration
  // on no front is stored unchecked, which no plan reads. A configuration is judged wrong only
  // where another of the problem agrees with the reference: when none does, the reference (or the
  // bound) is what is in doubt, and nothing is marked.
  Status CheckResults() {
    if (!options_.check_results || !AnyRunnable()) return Status::Ok();
    checker_ = std::make_unique<ResultChecker>(backend_, problem_, operands_.view,
                                               options_.workspace_cap_bytes);
    const double bound = ResultBound(problem_);
    std::set<std::string> checked;
    std::map<std::string, OffReference> off_reference;
    int agreeing = 0;
    while (true) {
      // Each configuration on a front and not checked yet, at the largest size where it is: the
      // sizes increase, so the last one seen.
      std::map<std::string, size_t> targets;
      for (const auto& [first, last] : size_ranges_) {
        for (size_t i : ParetoFront(first, last, off_reference)) {
          if (checked.count(ids_[i]) == 0) targets[ids_[i]] = i;
        }
      }
      if (targets.empty()) break;
      std::vector<size_t> order;
      for (const auto& [id, i] : targets) order.push_back(i);
      // Entries are in increasing sizes: a backward-filter's reference then grows run by run.
      std::sort(order.begin(), order.end());
      for (size_t i : order) {
        if (Cancelled(options_)) return Unavailable("benchmark cancelled: " + key_);
        Timing& t = table_.entries[i];
        checked.insert(ids_[i]);
        // Gated as the measurements are: a large problem's checks (and its reference) run for
        // seconds (a 3-D fp32 U-Net layer's: 10 s ungated beside a training job on an H200).
        UCUDNN_RETURN_IF_ERROR(AwaitIdle());
        // The buffer timed runs used (at least the overwriting call's workspace: a settled
        // workspace can be larger).
        Result<std::optional<double>> error =
            checker_->Check(t.micro_batch, AlgorithmOf(t), WorkspaceOf(t),
                            t.workspace_bytes > 0 ? workspace_->size() : 0);
        if (!error.ok()) {
          UCUDNN_RETURN_IF_ERROR(FailRun(i, error.status()));
          checked.erase(ids_[i]);  // checked next at its next largest size on a front, if any
          continue;
        }
        if (!error->has_value()) {
          ++unchecked_;
        } else if (**error <= bound) {
          ++agreeing;
        } else {
          off_reference.emplace(ids_[i], OffReference{i, **error});
        }
      }
    }
    for (const auto& [id, off] : off_reference) {
      const Timing& checked_at = table_.entries[off.entry];
      if (agreeing == 0) {
        ++unchecked_;
        spdlog::warn(
            "benchmark {} micro-batch {}: no configuration agrees with the fp32 reference "
            "(relative L2 error {:.3g} > {:.0e}): the reference is in doubt, nothing marked wrong",
            key_, checked_at.micro_batch, off.error, bound);
        continue;
      }
      const std::string why =
          std::string(kWrongResultError) + "relative L2 error " + fmt::format("{:.3g}", off.error) +
          " at micro-batch " + std::to_string(checked_at.micro_batch) +
          " against the fp32 reference (bound " + fmt::format("{:.0e}", bound) + "), which " +
          std::to_string(agreeing) +
          " other configuration(s) meet: never planned on this device and library version";
      spdlog::warn("benchmark {} algo {}: {}", key_, id, why);
      for (size_t j = 0; j < table_.entries.size(); ++j) {
        Timing& t = table_.entries[j];
        if (ids_[j] != id || t.status != TimingStatus::kOk) continue;
        t.status = TimingStatus::kFailed;
        t.error = why;
        runnable_[j] = false;
        ++wrong_;
      }
    }
    return Status::Ok();
  }

  // A checked configuration's result off the reference: the entry checked, its error.
  struct OffReference {
    size_t entry;
    double error;
  };

  // The timed configurations of [first, last) (one size) that no other beats on both time and
  // workspace, leaving out the configurations in `excluded`: those a plan could choose at some
  // workspace limit.
  std::vector<size_t> ParetoFront(size_t first, size_t last,
                                  const std::map<std::string, OffReference>& excluded) const {
    auto usable = [&](size_t i) {
      return table_.entries[i].status == TimingStatus::kOk && excluded.count(ids_[i]) == 0;
    };
    std::vector<size_t> front;
    for (size_t i = first; i < last; ++i) {
      if (!usable(i)) continue;
      const Timing& t = table_.entries[i];
      bool beaten = false;
      for (size_t j = first; j < last && !beaten; ++j) {
        const Timing& other = table_.entries[j];
        beaten = j != i && usable(j) && other.time_ms <= t.time_ms &&
                 other.workspace_bytes <= t.workspace_bytes &&
                 (other.time_ms < t.time_ms || other.workspace_bytes < t.workspace_bytes);
      }
      if (!beaten) front.push_back(i);
    }
    return front;
  }

  // 4a. One probe (a warm-up unless it ran long at a smaller size, one timed run, or one group of
  // runs where they are short) of every runnable configuration of the size [first, last), except
  // those the size before ruled out.
  Status ProbeSize(size_t first, size_t last) {
    const Clock::time_point start = Clock::now();
    const int64_t runs_before = probe_runs_;
    std::vector<size_t> batch;
    double batch_ms = 0;
    int probed = 0;
    for (size_t i = first; i < last; ++i) {
      if (!runnable_[i]) continue;
      if (Cancelled(options_)) return Unavailable("benchmark cancelled: " + key_);
      Timing& t = table_.entries[i];
      // Ruled out at a smaller size: recorded as this worker's choice, never as a time.
      if (const std::string* why = RuledOut(ids_[i], t.micro_batch); why != nullptr) {
        t.status = TimingStatus::kFailed;
        t.error = WorkerLimit(*why);
        runnable_[i] = false;
        ++skipped_;
        continue;
      }
      const double estimate = ProbeEstimateMs(i);
      if (!batch.empty() && batch_ms + estimate > options_.probe_batch_ms) {
        UCUDNN_RETURN_IF_ERROR(ProbeBatch(batch));
        batch.clear();
        batch_ms = 0;
      }
      batch.push_back(i);
      batch_ms += estimate;
      ++probed;
    }
    if (!batch.empty()) UCUDNN_RETURN_IF_ERROR(ProbeBatch(batch));
    // Where a cold benchmark's time goes, size by size (what the summary line sums).
    spdlog::debug("benchmark {} micro-batch {}: {} configurations probed, {} runs, {:.1f} ms", key_,
                  table_.entries[first].micro_batch, probed, probe_runs_ - runs_before,
                  MsSince(start));
    return Status::Ok();
  }

  // Untimed runs before entry i's probe. A configuration that already ran long at a smaller size
  // has its kernels loaded: its probe needs no warm-up of its own (kWarmProbeMs), unless its code
  // is built per size. (A runtime-compiled engine's first run at a size took 0.5-1 ms more than
  // its 0.05 ms: probed cold, cuDNN's fastest depthwise kernels were pruned and skipped; the
  // torch-models log in git history.)
  int ProbeWarmup(size_t i) const {
    const Timing& t = table_.entries[i];
    const auto history = probe_history_.find(ids_[i]);
    const bool loaded = history != probe_history_.end() &&
                        history->second.rbegin()->second >= kWarmProbeMs &&
                        !backend_.BuildsCodePerSize(problem_, t.micro_batch, AlgorithmOf(t));
    return loaded ? 0 : 1;
  }

  // The device time entry i's probe is expected to take (its warm-up included), from its probe at
  // the largest smaller size, scaled by the samples; kUnknownProbeMs where it has none.
  double ProbeEstimateMs(size_t i) const {
    const Timing& t = table_.entries[i];
    double run_ms = kUnknownProbeMs;
    if (const auto history = probe_history_.find(ids_[i]); history != probe_history_.end()) {
      const auto [size, ms] = *history->second.rbegin();
      run_ms = ms * static_cast<double>(t.micro_batch) / static_cast<double>(size);
    }
    return run_ms * (1 + ProbeWarmup(i));
  }

  // Runs `requests` issue, warm-ups included (for the summary line).
  static int64_t RunsIssued(const std::vector<ConvBackend::TimedRunRequest>& requests) {
    int64_t runs = 0;
    for (const auto& r : requests) runs += r.warmup + int64_t{r.samples} * r.group;
    return runs;
  }

  ConvBackend::TimedRunRequest RunRequest(size_t i, int warmup, int group) {
    const Timing& t = table_.entries[i];
    return {AlgorithmOf(t), WorkspaceOf(t), t.workspace_bytes, warmup, 1, group};
  }

  // Probes the entries `batch` (of one size) in one ConvBackend::TimeRunBatch: each one run after
  // its warm-up (ProbeWarmup); a short one (RunsPerSample) then again as Measure samples it, a
  // group of back-to-back runs, the groups in a second batch (a single run read up to 3x its
  // time). A batch after which the gate saw other work on the device is taken again: a disturbed
  // probe would prune configurations that win on an idle device.
  Status ProbeBatch(const std::vector<size_t>& batch) {
    const int64_t micro_batch = table_.entries[batch.front()].micro_batch;
    // A group right after its single run has that run as its warm-up; in a batch, other
    // configurations ran between the two.
    const int group_warmup = batch.size() > 1 ? 1 : 0;
    for (int attempt = 0;; ++attempt) {
      UCUDNN_RETURN_IF_ERROR(AwaitIdle());
      std::vector<ConvBackend::TimedRunRequest> singles;
      for (size_t i : batch) singles.push_back(RunRequest(i, ProbeWarmup(i), 1));
      std::vector<Result<std::vector<double>>> probes =
          backend_.TimeRunBatch(problem_, micro_batch, operands_.view, singles, false);
      probe_runs_ += RunsIssued(singles);
      std::vector<size_t> grouped;  // positions in `batch`
      std::vector<ConvBackend::TimedRunRequest> groups;
      for (size_t k = 0; k < batch.size(); ++k) {
        if (!probes[k].ok()) continue;
        const int group =
            RunsPerSample(probes[k]->front(), options_, options_.probe_group_target_ms);
        if (group == 1) continue;
        grouped.push_back(k);
        groups.push_back(RunRequest(batch[k], group_warmup, group));
      }
      if (!groups.empty()) {
        std::vector<Result<std::vector<double>>> again = backend_.TimeRunBatch(
            problem_, micro_batch, operands_.view, groups, options_.short_runs_device_time_only);
        probe_runs_ += RunsIssued(groups);
        for (size_t j = 0; j < grouped.size(); ++j) probes[grouped[j]] = std::move(again[j]);
      }
      const DeviceActivity after = LookAfter();
      if (Contended(after, 0, 1, 0) && attempt < kContentionRemeasures) {
        remeasured_ += static_cast<int>(batch.size());
        continue;
      }
      for (size_t k = 0; k < batch.size(); ++k) {
        probe_after_[batch[k]] = after;
        if (probes[k].ok()) {
          probe_ms_[batch[k]] = probes[k]->front();
        } else {
          UCUDNN_RETURN_IF_ERROR(FailRun(batch[k], probes[k].status()));
        }
      }
      return Status::Ok();
    }
  }

  // Waits for the device to run no other work (with a gate); kUnavailable when cancelled.
  Status AwaitIdle() {
    if (options_.gate == nullptr || options_.gate->WaitUntilIdle(options_.cancel)) {
      return Status::Ok();
    }
    if (Cancelled(options_)) return Unavailable("benchmark cancelled: " + key_);
    return Unavailable("benchmark paused: the device runs other work: " + key_);
  }
  DeviceActivity LookAfter() {
    return options_.gate != nullptr ? options_.gate->Look() : DeviceActivity{};
  }

  // Why a smaller size, or the database's nearby problems (options.prior), ruled configuration
  // `id` out at `micro_batch`, or nullptr. `next`: micro_batch is the size after the last one
  // probed (the only one the next-size skip speaks for).
  const std::string* RuledOut(const std::string& id, int64_t micro_batch, bool next = true) const {
    if (auto it = skip_next_.find(id); next && it != skip_next_.end()) return &it->second;
    if (auto it = skip_larger_.find(id); it != skip_larger_.end()) return &it->second;
    if (auto it = split_skip_.find(id);
        it != split_skip_.end() && micro_batch <= it->second.until) {
      return &it->second.why;
    }
    if (options_.prior != nullptr && micro_batch >= kPriorFromMicroBatch) {
      if (auto it = options_.prior->find(id); it != options_.prior->end()) return &it->second;
    }
    return nullptr;
  }

  // Tells the backend which configurations of the sizes from entry `from` on are ruled out there
  // (ConvBackend::WillNotRun: the compile helpers then drop their queued plans), each once.
  void ReleaseRuledOut(size_t from) {
    bool next = true;
    for (const auto& [first, last] : size_ranges_) {
      if (first < from) continue;
      std::vector<Algorithm> algos;
      for (size_t i = first; i < last; ++i) {
        if (!runnable_[i] || released_[i]) continue;
        const Timing& t = table_.entries[i];
        if (RuledOut(ids_[i], t.micro_batch, next) == nullptr) continue;
        released_[i] = true;
        algos.push_back(AlgorithmOf(t));
      }
      if (!algos.empty()) backend_.WillNotRun(problem_, table_.entries[first].micro_batch, algos);
      next = false;
    }
  }

  // 4b. What the size's probes say of the larger sizes (options.skip_factor): a configuration
  // beaten by more than the factor by one needing at most its workspace is not run at the next
  // size (where it may still catch up: engines with large tiles trail at small sizes), one that
  // is saturated (SaturationReason) at no larger size.
  void DecideSkips(size_t first, size_t last) {
    skip_next_.clear();
    double fastest = std::numeric_limits<double>::infinity();
    for (size_t i = first; i < last; ++i) {
      if (probe_ms_[i] >= 0) fastest = std::min(fastest, probe_ms_[i]);
    }
    for (size_t i = first; i < last; ++i) {
      if (probe_ms_[i] < 0) continue;
      const Timing& t = table_.entries[i];
      const std::string& id = ids_[i];
      std::map<int64_t, double>& history = probe_history_[id];
      if (options_.skip_factor > 0) {
        for (size_t j = first; j < last; ++j) {
          const Timing& better = table_.entries[j];
          if (j != i && probe_ms_[j] >= 0 && better.workspace_bytes <= t.workspace_bytes &&
              probe_ms_[j] * options_.skip_factor < probe_ms_[i]) {
            skip_next_[id] = "not measured: at micro-batch " + std::to_string(better.micro_batch) +
                             " " + AlgorithmText(AlgorithmOf(better)) + " was more than " +
                             FormatRatio(options_.skip_factor) +
                             "x faster with at most its workspace";
            break;
          }
        }
        DecideSplitSkip(i);
        std::string saturated =
            SaturationReason(t, probe_ms_[i], history, fastest, options_.skip_factor);
        if (!saturated.empty()) skip_larger_[id] = std::move(saturated);
      }
      history[t.micro_batch] = probe_ms_[i];
    }
  }

  // BenchmarkOptions::split_skip_factor, after entry i's probe (the probes of its size and the
  // sizes before are in probe_ms_): the larger sizes where micro-batches of an earlier size's
  // fastest configuration, with at most i's workspace, cover the samples in less than
  // 1/split_skip_factor of i's probe. A larger micro-batch takes at least as long as a smaller
  // one, so i cannot beat that split there, and a plan would take the split.
  void DecideSplitSkip(size_t i) {
    const Timing& t = table_.entries[i];
    const double probe_ms = probe_ms_[i];
    if (options_.split_skip_factor <= 0 || problem_.groups == 1 ||
        probe_ms < kSplitSkipMinProbeMs) {
      return;
    }
    int64_t until = 0;
    std::string why;
    for (const auto& [first, last] : size_ranges_) {
      if (table_.entries[first].micro_batch > t.micro_batch) break;
      size_t best = last;
      for (size_t j = first; j < last; ++j) {
        if (probe_ms_[j] >= 0 && table_.entries[j].workspace_bytes <= t.workspace_bytes &&
            (best == last || probe_ms_[j] < probe_ms_[best])) {
          best = j;
        }
      }
      if (best == last || !(probe_ms_[best] > 0)) continue;
      const Timing& split = table_.entries[best];
      // The most samples micro-batches of split.micro_batch cover in probe_ms / factor (no more
      // than the largest size: a bound past every size skips them all).
      const double samples = std::min(static_cast<double>(sizes_.back()),
                                      static_cast<double>(split.micro_batch) * probe_ms /
                                          (options_.split_skip_factor * probe_ms_[best]));
      if (samples >= static_cast<double>(std::max(until, t.micro_batch + 1))) {
        until = static_cast<int64_t>(samples);
        why =
            "not measured: " + FormatRatio(probe_ms) + " ms at micro-batch " +
            std::to_string(t.micro_batch) + " is over " + FormatRatio(options_.split_skip_factor) +
            "x what micro-batches of " + std::to_string(split.micro_batch) + " of " +
            AlgorithmText(AlgorithmOf(split)) + " (" + FormatRatio(probe_ms_[best]) +
            " ms each, at most its workspace) take for up to " + std::to_string(until) + " samples";
      }
    }
    if (until <= t.micro_batch) return;
    SplitSkip& skip = split_skip_[ids_[i]];
    if (until > skip.until) skip = {until, std::move(why)};
  }

  // 4c. The full protocol (Measure) for the configurations of the size that may be on its
  // time/workspace Pareto front. One the probes show dominated (another needs at most its
  // workspace and runs faster by more than prune_margin) keeps its probe as its one sample: the
  // planner would never choose it over the one that dominates it (most of the engine
  // configurations cuDNN proposes are such).
  Status MeasureSize(size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      if (Cancelled(options_)) return Unavailable("benchmark cancelled: " + key_);
      Timing& t = table_.entries[i];
      int group = 1;
      const bool dominated = runnable_[i] && (unusable_[i] || Dominated(i, first, last));
      MeasurementConditions conditions;
      conditions.gate = options_.gate != nullptr ? std::string(options_.gate->name()) : "off";
      if (runnable_[i] && dominated) {
        t.time_ms = probe_ms_[i];
        t.spread_ms = 0;
        t.samples = 1;
        t.status = TimingStatus::kOk;
        conditions.after = probe_after_[i];
        conditions.contended = Contended(probe_after_[i], 0, 1, 0);
        ++pruned_;
      } else if (runnable_[i]) {
        Result<Measurement> measured = Measurement{};
        // Taken again while contended (other work seen, or a spread no idle device gives), after
        // waiting for the device to be idle; bounded, then stored as contended.
        while (true) {
          UCUDNN_RETURN_IF_ERROR(AwaitIdle());
          // The size's probe stands in for Measure's own, unless this is a second attempt
          // after contention (the probe may have been disturbed too).
          const double probed = conditions.remeasured == 0 && !Contended(probe_after_[i], 0, 1, 0)
                                    ? probe_ms_[i]
                                    : -1.0;
          measured = Measure(backend_, problem_, t.micro_batch, AlgorithmOf(t), operands_.view,
                             WorkspaceOf(t), t.workspace_bytes, options_, probed);
          if (!measured.ok()) break;
          measure_runs_ += measured->runs;
          conditions.after = LookAfter();
          conditions.relative_spread = RelativeSpread(measured->samples);
          conditions.contended = Contended(conditions.after, conditions.relative_spread,
                                           static_cast<int>(measured->samples.size()),
                                           options_.contended_relative_spread);
          if (!conditions.contended || conditions.remeasured == kContentionRemeasures) break;
          ++conditions.remeasured;
          ++remeasured_;
        }
        if (measured.ok()) {
          const SampleSummary s = Summarize(measured->samples);
          t.time_ms = s.median_ms;
          t.spread_ms = s.spread_ms;
          t.samples = static_cast<int>(measured->samples.size());
          t.status = TimingStatus::kOk;
          group = measured->group;
        } else {
          UCUDNN_RETURN_IF_ERROR(FailRun(i, measured.status()));
        }
      }
      if (t.status == TimingStatus::kOk && conditions.contended) {
        // Still disturbed: kept for the record, never planned with (kFailed), and never
        // replacing an undisturbed measurement in the store (a worker limit).
        t.status = TimingStatus::kFailed;
        t.error = WorkerLimit(std::string(kContendedError) + "other work on the device (" +
                              std::to_string(conditions.after.other_processes) +
                              " other process(es), spread " +
                              FormatRatio(conditions.relative_spread) + " of the median) after " +
                              std::to_string(conditions.remeasured + 1) + " measurement(s)");
        ++contended_;
      }
      if (runnable_[i]) t.conditions = ConditionsJson(conditions);
      spdlog::debug(
          "benchmark {} b={} algo={}: {} {:.4f} ms (iqr {:.4f}, n={} x {} runs{}) ws={} {}", key_,
          t.micro_batch, AlgorithmText(AlgorithmOf(t)), ToString(t.status), t.time_ms, t.spread_ms,
          t.samples, group, dominated ? ", dominated" : "", t.workspace_bytes, t.error);
      if (progress_) {
        progress_({static_cast<int64_t>(i) + 1, static_cast<int64_t>(table_.entries.size()), &t});
      }
    }
    return Status::Ok();
  }

  // BenchmarkOptions::usable_margin: the probed entries no plan of the largest size could use
  // (UsableEntries over the probes) keep their probe, as dominated ones do.
  void DecideUsable() {
    TimingTable probed;
    probed.entries.reserve(table_.entries.size());
    for (size_t i = 0; i < table_.entries.size(); ++i) {
      Timing t = table_.entries[i];
      t.status = runnable_[i] && probe_ms_[i] >= 0 ? TimingStatus::kOk : TimingStatus::kFailed;
      t.time_ms = std::max(probe_ms_[i], 0.0);
      probed.entries.push_back(std::move(t));
    }
    const std::vector<bool> usable = UsableEntries(probed, sizes_.back(), options_.usable_margin);
    for (size_t i = 0; i < usable.size(); ++i) {
      unusable_[i] = probed.entries[i].status == TimingStatus::kOk && !usable[i];
      unused_ += unusable_[i] ? 1 : 0;
    }
  }

  bool Dominated(size_t i, size_t first, size_t last) const {
    if (probe_ms_[i] < 0) return false;
    for (size_t j = first; j < last; ++j) {
      if (j != i && runnable_[j] && probe_ms_[j] >= 0 &&
          table_.entries[j].workspace_bytes <= table_.entries[i].workspace_bytes &&
          probe_ms_[j] * (1.0 + options_.prune_margin) < probe_ms_[i]) {
        return true;
      }
    }
    return false;
  }

  // The table's statuses as stored (after the checks), for the summary line.
  void LogSummary(double total_ms) const {
    int counts[3] = {0, 0, 0};
    int worker_limited = 0;
    for (const Timing& t : table_.entries) {
      ++counts[static_cast<int>(t.status)];
      worker_limited += IsWorkerLimit(t) ? 1 : 0;
    }
    spdlog::info(
        "benchmarked {} on {} ({}): {} configurations, {} ok ({} of them kept their probe: "
        "dominated, or at sizes no plan of {} uses ({})), "
        "{} unsupported, {} failed ({} of them this worker's limits, {} not run after the size "
        "before, {} contended, {} wrong results; {} taken again for contention; {} results "
        "unchecked), {:.2f} s (prepare {:.0f} ms on {} threads, queries {:.0f} ms, operands "
        "{:.0f} ms, result checks {:.0f} ms (references {:.0f} ms), probes {:.0f} ms ({} runs), "
        "measurements {:.0f} ms ({} runs))",
        key_, backend_.fingerprint().name, backend_.fingerprint().backend, table_.entries.size(),
        counts[static_cast<int>(TimingStatus::kOk)], pruned_, sizes_.back(), unused_,
        counts[static_cast<int>(TimingStatus::kUnsupported)],
        counts[static_cast<int>(TimingStatus::kFailed)], worker_limited, skipped_, contended_,
        wrong_, remeasured_, unchecked_, total_ms / 1000.0, prepare_ms_, options_.prepare_threads,
        query_ms_, operands_ms_, check_ms_, checker_ != nullptr ? checker_->reference_ms() : 0.0,
        probe_total_ms_, probe_runs_, measure_ms_, measure_runs_);
  }

  ConvBackend& backend_;
  const ConvProblem& problem_;
  const std::vector<int64_t>& sizes_;
  const BenchmarkOptions& options_;
  const BenchmarkProgressFn& progress_;
  const std::string key_;

  TimingTable table_;
  std::vector<std::string> ids_;       // each entry's configuration (AlgorithmText)
  std::vector<bool> workspace_known_;  // its workspace asked (QueryWorkspaces)
  std::vector<std::pair<size_t, size_t>> size_ranges_;  // [first, last) of each size's entries
  std::vector<bool> runnable_;
  Operands operands_;
  std::unique_ptr<BackendBuffer> workspace_;
  std::vector<double> probe_ms_;
  std::vector<DeviceActivity> probe_after_;  // what the gate saw right after each probe
  std::vector<bool> released_;               // entries given to ConvBackend::WillNotRun
  std::vector<bool> unusable_;               // probed entries no plan could use (DecideUsable)
  // configuration -> its probes at the sizes measured so far (size -> ms); also tells which
  // configurations ran before and need no warm-up.
  std::map<std::string, std::map<int64_t, double>> probe_history_;
  std::map<std::string, std::string> skip_next_;    // configuration -> why, for the next size
  std::map<std::string, std::string> skip_larger_;  // ... for every larger size
  // Configuration -> the sizes up to which micro-batches of a smaller size do better, and why
  // (DecideSplitSkip).
  struct SplitSkip {
    int64_t until = 0;
    std::string why;
  };
  std::map<std::string, SplitSkip> split_skip_;
  int pruned_ = 0;
  int unused_ = 0;  // probed entries no plan could use (DecideUsable)
  int skipped_ = 0;
  int remeasured_ = 0;  // probes and measurements taken again for contention
  int contended_ = 0;   // stored as contended
  int wrong_ = 0;       // wrong results (CheckResults)
  int unchecked_ = 0;   // configurations no reference could check here
  // CheckResults' checker: the widened inputs and the current reference.
  std::unique_ptr<ResultChecker> checker_;
  // Where a cold benchmark's time goes, for the summary line.
  double prepare_ms_ = 0, query_ms_ = 0, operands_ms_ = 0, check_ms_ = 0, probe_total_ms_ = 0,
         measure_ms_ = 0;
  int64_t probe_runs_ = 0, measure_runs_ = 0;  // runs issued (warm-ups included)
};

}  // namespace

Result<TimingTable> BenchmarkMicroBatches(ConvBackend& backend, const ConvProblem& problem,
                                          const std::vector<int64_t>& sizes,
                                          const BenchmarkOptions& options,
                                          const BenchmarkProgressFn& progress) {
  UCUDNN_RETURN_IF_ERROR(Validate(problem).WithContext("problem"));
  for (size_t i = 0; i < sizes.size(); ++i) {
    UCUDNN_RETURN_IF_ERROR(ValidateBatch(sizes[i]).WithContext("micro-batch size"));
    if (i > 0 && sizes[i] <= sizes[i - 1]) {
      return InvalidArgument("micro-batch sizes: must be strictly increasing, got " +
                             std::to_string(sizes[i - 1]) + " then " + std::to_string(sizes[i]));
    }
  }
  UCUDNN_RETURN_IF_ERROR(Validate(options).WithContext("options"));
  if (sizes.empty()) return InvalidArgument("nothing to measure: no micro-batch sizes");
  return TableBenchmark(backend, problem, sizes, options, progress).Run();
}

namespace {

// The entries of `known` at the sizes where every candidate of the backend has one. A partial
// size (stored when a busy GPU made a worker give its job back) is left out, to be timed again
// whole; so is a size with the framework's own time alone.
TimingTable CompleteSizes(ConvBackend& backend, const ConvProblem& problem,
                          const TimingTable& known) {
  std::map<int64_t, std::set<std::string>> ids;  // the configurations known at each size
  for (const Timing& t : known.entries) ids[t.micro_batch].insert(AlgorithmText(AlgorithmOf(t)));
  std::set<int64_t> complete;
  for (const auto& [size, have] : ids) {
    bool all = true;
    for (const Timing& candidate : backend.Candidates(problem, size)) {
      all = all && have.count(AlgorithmText(AlgorithmOf(candidate))) > 0;
    }
    if (all) complete.insert(size);
  }
  TimingTable out;
  for (const Timing& t : known.entries) {
    if (complete.count(t.micro_batch) > 0) out.entries.push_back(t);
  }
  return out;
}

}  // namespace

Result<TimingTable> BenchmarkForLimit(ConvBackend& backend, const ConvProblem& problem,
                                      int64_t max_micro_batch, BatchPolicy policy,
                                      uint64_t workspace_limit, const TimingTable& known,
                                      const BenchmarkOptions& options,
                                      const BenchmarkProgressFn& progress) {
  UCUDNN_RETURN_IF_ERROR(ValidateBatch(max_micro_batch).WithContext("max_micro_batch"));
  const std::vector<int64_t> sizes = MicroBatchSizes(policy, max_micro_batch);
  TimingTable so_far = CompleteSizes(backend, problem, known);  // what the rule reads
  TimingTable measured;
  // The rule chose each round's sizes for the limit: all are measured (a later round's largest
  // size is not the mini-batch that usable_margin judges plans of).
  BenchmarkOptions round_options = options;
  round_options.usable_margin = -1;
  BenchmarkProgress before;  // the rounds before this one, for `progress`
  for (std::vector<int64_t> next =
           NextSizesForLimit(so_far, sizes, max_micro_batch, workspace_limit);
       !next.empty(); next = NextSizesForLimit(so_far, sizes, max_micro_batch, workspace_limit)) {
    std::sort(next.begin(), next.end());  // BenchmarkMicroBatches takes them increasing
    spdlog::info("benchmark {}: micro-batch sizes {} for a {} limit", CanonicalKey(problem),
                 fmt::join(next, ", "), FormatBytes(workspace_limit));
    BenchmarkProgressFn round_progress;
    if (progress) {
      round_progress = [&](const BenchmarkProgress& p) {
        progress({before.done + p.done, before.total + p.total, p.latest});
      };
    }
    UCUDNN_ASSIGN_OR_RETURN(
        TimingTable round,
        BenchmarkMicroBatches(backend, problem, next, round_options, round_progress));
    before.done += static_cast<int64_t>(round.entries.size());
    before.total += static_cast<int64_t>(round.entries.size());
    // Never empty (every candidate of a size is an entry, run or not); were it, the rule would
    // ask the same sizes again.
    if (round.entries.empty()) break;
    so_far.entries.insert(so_far.entries.end(), round.entries.begin(), round.entries.end());
    measured.entries.insert(measured.entries.end(), std::make_move_iterator(round.entries.begin()),
                            std::make_move_iterator(round.entries.end()));
  }
  return measured;
}

}  // namespace ucudnn
