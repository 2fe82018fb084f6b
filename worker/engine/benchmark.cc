#include "ucudnn/worker/benchmark.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/random_fill.h"
#include "ucudnn/core/units.h"

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

// The operands of one problem at one micro-batch; smaller micro-batches use their start.
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

std::string WorkerLimit(const std::string& reason) {
  return std::string(kWorkerLimitError) + reason;
}

// Failed runs say what failed; cuDNN declining at run time is the same as declining at the query.
void RecordRunFailure(Timing& t, const Status& status) {
  t.status = status.code() == StatusCode::kUnsupported ? TimingStatus::kUnsupported
                                                       : TimingStatus::kFailed;
  t.error = status.ToString();
}

struct Measurement {
  std::vector<double> samples;
  int group = 1;  // runs per sample
};

// Samples of one configuration; see BenchmarkOptions for the policy.
Result<Measurement> Measure(ConvBackend& backend, const ConvProblem& problem, int64_t batch,
                            const Algorithm& algo, const ConvOperands& operands, void* workspace,
                            size_t workspace_bytes, const BenchmarkOptions& options) {
  const Clock::time_point start = Clock::now();
  const auto time_groups = [&](int warmup, int samples, int group) {
    return backend.TimeRunGroups(problem, batch, algo, operands, workspace, workspace_bytes, warmup,
                                 samples, group, options.short_runs_device_time_only);
  };
  const auto append = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };

  // One probe run, after one warm-up (Validate guarantees warmup_runs >= 1), tells how slow the
  // configuration is before committing to many runs.
  UCUDNN_ASSIGN_OR_RETURN(std::vector<double> probe, time_groups(1, 1, 1));
  int warmup_left = options.warmup_runs - 1;
  const double probe_ms = std::max(probe[0], 1e-6);
  const double budget = options.config_time_budget_ms;
  Measurement m;
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
  if (probe_ms < options.short_run_ms) {
    const double wanted = std::ceil(options.group_target_ms / probe_ms);
    m.group = static_cast<int>(std::min<double>(options.max_group, std::max(2.0, wanted)));
  }
  if (warmup_left > 0) {
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
  if (!(o.group_target_ms > 0)) return InvalidArgument("group_target_ms: must be positive");
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
  const Clock::time_point start = Clock::now();
  const std::string key = CanonicalKey(problem);
  if (sizes.empty()) return InvalidArgument("nothing to measure: no micro-batch sizes");

  // Where a cold benchmark's time goes, for the summary line.
  double prepare_ms = 0, query_ms = 0, operands_ms = 0, probe_ms_total = 0, measure_ms = 0;
  Clock::time_point phase = Clock::now();
  if (options.prepare_threads > 1) {
    backend.Prepare(problem, sizes, options.prepare_threads);
    prepare_ms = MsSince(phase);
    phase = Clock::now();
  }

  // 1. The candidates of every micro-batch size (legacy algorithms, then the engine
  // configurations cuDNN proposes for that size) and their workspaces; those that cannot run are
  // settled here.
  TimingTable table;
  std::vector<bool> runnable;
  Status first_query_failure;
  for (int64_t size : sizes) {
    for (Timing& t : backend.Candidates(problem, size)) {
      t.micro_batch = size;
      Result<size_t> ws = backend.WorkspaceSize(problem, size, AlgorithmOf(t));
      bool ok = false;
      if (!ws.ok()) {
        if (ws.status().code() == StatusCode::kDeviceLost) return ws.status().WithContext(key);
        t.status = ws.status().code() == StatusCode::kUnsupported ? TimingStatus::kUnsupported
                                                                  : TimingStatus::kFailed;
        t.error = ws.status().ToString();
        if (t.status == TimingStatus::kFailed && first_query_failure.ok()) {
          first_query_failure = ws.status();
        }
      } else if (*ws > options.workspace_cap_bytes) {
        // This worker's limit, not cuDNN's verdict: kFailed with a reason that says so, never
        // kUnsupported (see kWorkerLimitError).
        t.workspace_bytes = *ws;
        t.status = TimingStatus::kFailed;
        t.error = WorkerLimit("workspace " + FormatBytes(*ws) + " over this worker's cap " +
                              FormatBytes(options.workspace_cap_bytes) +
                              " (--workspace-cap); not measured, cuDNN did not decline it");
      } else {
        t.workspace_bytes = *ws;
        ok = true;
      }
      table.entries.push_back(std::move(t));
      runnable.push_back(ok);
    }
  }
  if (table.entries.empty()) {
    return InvalidArgument("nothing to measure: the backend has no algorithm for " + key);
  }
  if (!first_query_failure.ok()) {
    UCUDNN_RETURN_IF_ERROR(CheckDevice(backend, first_query_failure).WithContext(key));
  }
  query_ms = MsSince(phase);
  phase = Clock::now();
  const auto any_runnable = [&runnable] {
    return std::find(runnable.begin(), runnable.end(), true) != runnable.end();
  };

  // 2. Operands once, at the largest micro-batch that can be allocated: when the largest does not
  // fit in this device's free memory, the next smaller size is tried, and only the micro-batches
  // above the one allocated are recorded as failed (this worker's limit). Operands that fit
  // nowhere, even at the smallest size, fail the whole call.
  Operands operands;
  if (any_runnable()) {
    std::set<int64_t, std::greater<>> candidates;  // micro-batches with a runnable configuration
    for (size_t i = 0; i < table.entries.size(); ++i) {
      if (runnable[i]) candidates.insert(table.entries[i].micro_batch);
    }
    int64_t allocated = 0;
    Status oom;
    for (int64_t batch : candidates) {
      Result<Operands> made = MakeOperands(backend, problem, batch, options.seed);
      if (made.ok()) {
        operands = std::move(made).value();
        allocated = batch;
        break;
      }
      if (made.status().code() != StatusCode::kResourceExhausted) {
        return made.status().WithContext(key + ": operands of micro-batch " +
                                         std::to_string(batch));
      }
      spdlog::warn("benchmark {}: operands of micro-batch {} ({}) do not fit on {}: {}", key, batch,
                   FormatBytes(OperandBytes(problem, batch)), backend.fingerprint().name,
                   made.status().ToString());
      oom = made.status();
    }
    if (allocated == 0) {
      const int64_t smallest = *candidates.rbegin();
      return oom.WithContext(key + ": operands of the smallest micro-batch " +
                             std::to_string(smallest) + " (" +
                             FormatBytes(OperandBytes(problem, smallest)) + ")");
    }
    for (size_t i = 0; i < table.entries.size(); ++i) {
      Timing& t = table.entries[i];
      if (!runnable[i] || t.micro_batch <= allocated) continue;
      runnable[i] = false;
      t.status = TimingStatus::kFailed;
      t.error = WorkerLimit("operands of micro-batch " + std::to_string(t.micro_batch) + " (" +
                            FormatBytes(OperandBytes(problem, t.micro_batch)) +
                            ") could not be allocated on this worker; measured up to micro-batch " +
                            std::to_string(allocated) + ": " + oom.ToString());
    }
  }

  // 3. One workspace for all configurations, at the largest size needed. When it cannot be had,
  // the configurations needing it fail (this worker's limit) and the next smaller size is tried.
  std::unique_ptr<BackendBuffer> workspace;
  uint64_t largest_workspace = 0;
  for (size_t i = 0; i < table.entries.size(); ++i) {
    if (runnable[i])
      largest_workspace = std::max(largest_workspace, table.entries[i].workspace_bytes);
  }
  while (any_runnable()) {
    Result<std::unique_ptr<BackendBuffer>> buffer = backend.Allocate(largest_workspace);
    if (buffer.ok()) {
      workspace = std::move(*buffer);
      break;
    }
    const bool oom = buffer.status().code() == StatusCode::kResourceExhausted;
    if (!oom) UCUDNN_RETURN_IF_ERROR(CheckDevice(backend, buffer.status()).WithContext(key));
    uint64_t next = 0;
    for (size_t i = 0; i < table.entries.size(); ++i) {
      if (!runnable[i]) continue;
      Timing& t = table.entries[i];
      if (t.workspace_bytes >= largest_workspace) {
        runnable[i] = false;
        t.status = TimingStatus::kFailed;
        t.error = oom ? WorkerLimit(
                            "workspace " + FormatBytes(t.workspace_bytes) +
                            " could not be allocated on this worker: " + buffer.status().ToString())
                      : buffer.status().ToString();
      } else {
        next = std::max<uint64_t>(next, t.workspace_bytes);
      }
    }
    largest_workspace = next;
  }

  operands_ms = MsSince(phase);

  // 4. Timed runs, smallest micro-batch first, one size at a time in two passes: a probe (one
  // warm-up, one timed run) of every runnable configuration of the size, then the full protocol
  // (Measure) for those that may be on the size's time/workspace Pareto front. A configuration
  // the probes show dominated (another needs at most its workspace and runs faster by more than
  // prune_margin) keeps its probe as its one sample: the planner would never choose it over the
  // one that dominates it, so more runs would only cost time (most of the engine
  // configurations cuDNN proposes are such).
  const int64_t total = static_cast<int64_t>(table.entries.size());
  int counts[3] = {0, 0, 0};
  int worker_limited = 0;
  int pruned = 0;
  int skipped = 0;
  const size_t n = table.entries.size();
  std::vector<double> probe_ms(n, -1.0);
  std::set<std::string> warmed;                   // configurations that ran at a smaller size
  std::map<std::string, std::string> far_behind;  // configuration -> why it is skipped
  const auto workspace_of = [&](const Timing& t) {
    return t.workspace_bytes > 0 ? workspace->data() : nullptr;
  };
  const auto fail_run = [&](size_t i, const Status& failure) -> Status {
    Timing& t = table.entries[i];
    UCUDNN_RETURN_IF_ERROR(CheckDevice(backend, failure)
                               .WithContext(key + " micro-batch " + std::to_string(t.micro_batch) +
                                            " algo " + AlgorithmText(AlgorithmOf(t))));
    RecordRunFailure(t, failure);
    runnable[i] = false;
    return Status::Ok();
  };
  for (size_t first = 0; first < n;) {
    size_t last = first;
    while (last < n && table.entries[last].micro_batch == table.entries[first].micro_batch) ++last;
    phase = Clock::now();
    if (options.prune_margin >= 0) {
      for (size_t i = first; i < last; ++i) {
        if (!runnable[i]) continue;
        if (Cancelled(options)) return Unavailable("benchmark cancelled: " + key);
        Timing& t = table.entries[i];
        const std::string id = AlgorithmText(AlgorithmOf(t));
        // Dominated by far at the previous size by one that needed at most its workspace there:
        // not run at this size either (recorded as this worker's choice, never as a time).
        if (auto far = far_behind.find(id); far != far_behind.end()) {
          t.status = TimingStatus::kFailed;
          t.error = WorkerLimit(far->second);
          runnable[i] = false;
          ++skipped;
          continue;
        }
        // A configuration that already ran at a smaller size has its kernels loaded: its probe
        // needs no warm-up of its own.
        const int warmup = warmed.count(id) > 0 ? 0 : 1;
        Result<std::vector<double>> probe =
            backend.TimeRunGroups(problem, t.micro_batch, AlgorithmOf(t), operands.view,
                                  workspace_of(t), t.workspace_bytes, warmup, 1, 1, false);
        if (probe.ok()) {
          probe_ms[i] = probe->front();
          warmed.insert(id);
        } else {
          UCUDNN_RETURN_IF_ERROR(fail_run(i, probe.status()));
        }
      }
      // What this size's probes say of the next size: a configuration beaten by more than
      // options.skip_factor by one needing at most its workspace is not run there.
      far_behind.clear();
      if (options.skip_factor > 0) {
        for (size_t i = first; i < last; ++i) {
          if (probe_ms[i] < 0) continue;
          for (size_t j = first; j < last; ++j) {
            if (j == i || probe_ms[j] < 0) continue;
            const Timing& better = table.entries[j];
            if (better.workspace_bytes <= table.entries[i].workspace_bytes &&
                probe_ms[j] * options.skip_factor < probe_ms[i]) {
              far_behind[AlgorithmText(AlgorithmOf(table.entries[i]))] =
                  "not measured: at micro-batch " + std::to_string(better.micro_batch) + " " +
                  AlgorithmText(AlgorithmOf(better)) + " was more than " +
                  FormatRatio(options.skip_factor) + "x faster with at most its workspace";
              break;
            }
          }
        }
      }
    }
    probe_ms_total += MsSince(phase);
    phase = Clock::now();
    for (size_t i = first; i < last; ++i) {
      if (Cancelled(options)) return Unavailable("benchmark cancelled: " + key);
      Timing& t = table.entries[i];
      int group = 1;
      bool dominated = false;
      if (runnable[i] && probe_ms[i] >= 0) {
        for (size_t j = first; j < last && !dominated; ++j) {
          dominated = j != i && runnable[j] && probe_ms[j] >= 0 &&
                      table.entries[j].workspace_bytes <= t.workspace_bytes &&
                      probe_ms[j] * (1.0 + options.prune_margin) < probe_ms[i];
        }
      }
      if (runnable[i] && dominated) {
        t.time_ms = probe_ms[i];
        t.spread_ms = 0;
        t.samples = 1;
        t.status = TimingStatus::kOk;
        ++pruned;
      } else if (runnable[i]) {
        Result<Measurement> measured =
            Measure(backend, problem, t.micro_batch, AlgorithmOf(t), operands.view, workspace_of(t),
                    t.workspace_bytes, options);
        if (measured.ok()) {
          const SampleSummary s = Summarize(measured->samples);
          t.time_ms = s.median_ms;
          t.spread_ms = s.spread_ms;
          t.samples = static_cast<int>(measured->samples.size());
          t.status = TimingStatus::kOk;
          group = measured->group;
        } else {
          UCUDNN_RETURN_IF_ERROR(fail_run(i, measured.status()));
        }
      }
      ++counts[static_cast<int>(t.status)];
      worker_limited += IsWorkerLimit(t) ? 1 : 0;
      spdlog::debug(
          "benchmark {} b={} algo={}: {} {:.4f} ms (iqr {:.4f}, n={} x {} runs{}) ws={} {}", key,
          t.micro_batch, AlgorithmText(AlgorithmOf(t)), ToString(t.status), t.time_ms, t.spread_ms,
          t.samples, group, dominated ? ", dominated" : "", t.workspace_bytes, t.error);
      if (progress) progress({static_cast<int64_t>(i) + 1, total, &t});
    }
    measure_ms += MsSince(phase);
    first = last;
  }
  // A device lost during the last configuration shows here at the latest: a table is returned
  // only when the device was sound after it was measured.
  UCUDNN_RETURN_IF_ERROR(EnsureHealthy(backend, "the last configuration").WithContext(key));
  spdlog::info(
      "benchmarked {} on {} ({}): {} configurations, {} ok ({} of them dominated at the probe), "
      "{} unsupported, {} failed ({} of them this worker's limits, {} far behind at the size "
      "before), {:.2f} s (prepare {:.0f} ms on {} threads, queries {:.0f} ms, operands {:.0f} ms, "
      "probes {:.0f} ms, measurements {:.0f} ms)",
      key, backend.fingerprint().name, backend.fingerprint().backend, total,
      counts[static_cast<int>(TimingStatus::kOk)], pruned,
      counts[static_cast<int>(TimingStatus::kUnsupported)],
      counts[static_cast<int>(TimingStatus::kFailed)], worker_limited, skipped,
      MsSince(start) / 1000.0, prepare_ms, options.prepare_threads, query_ms, operands_ms,
      probe_ms_total, measure_ms);
  return table;
}

}  // namespace ucudnn
