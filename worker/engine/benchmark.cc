#include "ucudnn/worker/benchmark.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
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

// The operands of one problem at the largest micro-batch; smaller micro-batches use their start.
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
      UCUDNN_RETURN_IF_ERROR(FillRandom(backend, o.input->data(), input_count, p.data_type, seed));
      UCUDNN_RETURN_IF_ERROR(
          FillRandom(backend, o.filter->data(), filter_count, p.data_type, seed + 1));
      o.view.x = o.input->data();
      o.view.w = o.filter->data();
      o.view.y = o.output->data();
      break;
    case ConvOp::kBackwardData:
      UCUDNN_RETURN_IF_ERROR(
          FillRandom(backend, o.output->data(), output_count, p.data_type, seed + 2));
      UCUDNN_RETURN_IF_ERROR(
          FillRandom(backend, o.filter->data(), filter_count, p.data_type, seed + 1));
      o.view.dy = o.output->data();
      o.view.w = o.filter->data();
      o.view.dx = o.input->data();
      break;
    case ConvOp::kBackwardFilter:
      UCUDNN_RETURN_IF_ERROR(FillRandom(backend, o.input->data(), input_count, p.data_type, seed));
      UCUDNN_RETURN_IF_ERROR(
          FillRandom(backend, o.output->data(), output_count, p.data_type, seed + 2));
      o.view.x = o.input->data();
      o.view.dy = o.output->data();
      o.view.dw = o.filter->data();
      break;
  }
  UCUDNN_RETURN_IF_ERROR(backend.Synchronize());
  return o;
}

// Failed runs say what failed; cuDNN declining at run time is the same as declining at the query.
void RecordRunFailure(Timing& t, const Status& status) {
  t.status = status.code() == StatusCode::kUnsupported ? TimingStatus::kUnsupported
                                                       : TimingStatus::kFailed;
  t.error = status.ToString();
}

// Samples of one configuration; see BenchmarkOptions for the policy.
Result<std::vector<double>> Measure(ConvBackend& backend, const ConvProblem& problem, int64_t batch,
                                    int algo, const ConvOperands& operands, void* workspace,
                                    size_t workspace_bytes, const BenchmarkOptions& options) {
  const Clock::time_point start = Clock::now();
  const auto time_runs = [&](int warmup, int runs) {
    return backend.TimeRuns(problem, batch, algo, operands, workspace, workspace_bytes, warmup,
                            runs);
  };
  const auto append = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };

  // One probe run tells how slow the configuration is before committing to many runs.
  const int first_warmup = std::min(options.warmup_runs, 1);
  UCUDNN_ASSIGN_OR_RETURN(std::vector<double> probe, time_runs(first_warmup, 1));
  int warmup_left = options.warmup_runs - first_warmup;
  std::vector<double> samples;
  if (warmup_left > 0) {
    --warmup_left;  // the probe was one more warm-up
  } else {
    append(samples, probe);
  }
  const double probe_ms = std::max(probe[0], 1e-6);
  const double budget = options.config_time_budget_ms;
  if (probe_ms * (warmup_left + options.min_runs) > budget) {
    // Too slow for the full protocol: skip the remaining warm-ups (the probe ran after one) and
    // take what the budget allows, at least the probe itself.
    const int affordable = std::clamp(static_cast<int>(budget / probe_ms), 1, options.min_runs);
    if (samples.empty()) append(samples, probe);
    const int more = affordable - static_cast<int>(samples.size());
    if (more > 0) {
      UCUDNN_ASSIGN_OR_RETURN(std::vector<double> extra, time_runs(0, more));
      append(samples, extra);
    }
    return samples;
  }
  const int first_batch = options.min_runs - static_cast<int>(samples.size());
  if (first_batch > 0) {
    UCUDNN_ASSIGN_OR_RETURN(std::vector<double> first, time_runs(warmup_left, first_batch));
    append(samples, first);
  }
  while (RelativeSpread(samples) > options.target_relative_spread &&
         static_cast<int>(samples.size()) < options.max_runs && MsSince(start) < budget) {
    const int chunk =
        std::min(options.min_runs, options.max_runs - static_cast<int>(samples.size()));
    UCUDNN_ASSIGN_OR_RETURN(std::vector<double> extra, time_runs(0, chunk));
    append(samples, extra);
  }
  return samples;
}

}  // namespace

SampleSummary Summarize(std::vector<double> samples) {
  if (samples.empty()) return {};
  std::sort(samples.begin(), samples.end());
  return {Quantile(samples, 0.5), Quantile(samples, 0.75) - Quantile(samples, 0.25)};
}

Status Validate(const BenchmarkOptions& o) {
  if (o.warmup_runs < 0 || o.warmup_runs > 1000) {
    return InvalidArgument("warmup_runs: must be in [0, 1000], got " +
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
  return Status::Ok();
}

Result<TimingTable> BenchmarkProblem(ConvBackend& backend, const ConvProblem& problem,
                                     int64_t max_micro_batch, BatchPolicy policy,
                                     const BenchmarkOptions& options,
                                     const BenchmarkProgressFn& progress) {
  UCUDNN_RETURN_IF_ERROR(Validate(problem).WithContext("problem"));
  UCUDNN_RETURN_IF_ERROR(ValidateBatch(max_micro_batch).WithContext("max_micro_batch"));
  UCUDNN_RETURN_IF_ERROR(Validate(options).WithContext("options"));
  const Clock::time_point start = Clock::now();
  const std::string key = CanonicalKey(problem);
  const std::vector<int64_t> sizes = MicroBatchSizes(policy, max_micro_batch);
  const std::vector<AlgorithmInfo> algos = backend.Algorithms(problem.op);
  if (sizes.empty() || algos.empty()) {
    return InvalidArgument("nothing to measure: " + std::to_string(sizes.size()) +
                           " micro-batch sizes, " + std::to_string(algos.size()) + " algorithms");
  }

  // 1. Workspace of every configuration; those that cannot run are settled here.
  TimingTable table;
  table.entries.reserve(sizes.size() * algos.size());
  std::vector<bool> runnable;
  uint64_t largest_workspace = 0;
  for (int64_t size : sizes) {
    for (const AlgorithmInfo& algo : algos) {
      Timing t;
      t.micro_batch = size;
      t.algo = algo.id;
      Result<size_t> ws = backend.WorkspaceSize(problem, size, algo.id);
      bool ok = false;
      if (!ws.ok()) {
        t.status = ws.status().code() == StatusCode::kUnsupported ? TimingStatus::kUnsupported
                                                                  : TimingStatus::kFailed;
        t.error = ws.status().ToString();
      } else if (*ws > options.workspace_cap_bytes) {
        t.workspace_bytes = *ws;
        t.status = TimingStatus::kUnsupported;
        t.error = "workspace " + FormatBytes(*ws) + " exceeds cap " +
                  FormatBytes(options.workspace_cap_bytes);
      } else {
        t.workspace_bytes = *ws;
        largest_workspace = std::max<uint64_t>(largest_workspace, *ws);
        ok = true;
      }
      table.entries.push_back(std::move(t));
      runnable.push_back(ok);
    }
  }
  const bool any_runnable = std::find(runnable.begin(), runnable.end(), true) != runnable.end();

  // 2. Operands once, at the largest micro-batch, and one workspace for all configurations. When
  // the largest workspace cannot be had, the configurations needing it fail and the next
  // smaller size is tried.
  Operands operands;
  std::unique_ptr<BackendBuffer> workspace;
  if (any_runnable) {
    UCUDNN_ASSIGN_OR_RETURN(operands, MakeOperands(backend, problem, sizes.back(), options.seed));
    while (true) {
      Result<std::unique_ptr<BackendBuffer>> buffer = backend.Allocate(largest_workspace);
      if (buffer.ok()) {
        workspace = std::move(*buffer);
        break;
      }
      uint64_t next = 0;
      for (size_t i = 0; i < table.entries.size(); ++i) {
        if (!runnable[i]) continue;
        Timing& t = table.entries[i];
        if (t.workspace_bytes >= largest_workspace) {
          runnable[i] = false;
          t.status = TimingStatus::kFailed;
          t.error = buffer.status().ToString();
        } else {
          next = std::max<uint64_t>(next, t.workspace_bytes);
        }
      }
      if (std::find(runnable.begin(), runnable.end(), true) == runnable.end()) break;
      largest_workspace = next;
    }
  }

  // 3. Timed runs, smallest micro-batch first.
  const int64_t total = static_cast<int64_t>(table.entries.size());
  int counts[3] = {0, 0, 0};
  for (size_t i = 0; i < table.entries.size(); ++i) {
    if (Cancelled(options)) return Unavailable("benchmark cancelled: " + key);
    Timing& t = table.entries[i];
    if (runnable[i]) {
      Result<std::vector<double>> samples =
          Measure(backend, problem, t.micro_batch, t.algo, operands.view,
                  t.workspace_bytes > 0 ? workspace->data() : nullptr, t.workspace_bytes, options);
      if (samples.ok()) {
        const SampleSummary s = Summarize(*samples);
        t.time_ms = s.median_ms;
        t.spread_ms = s.spread_ms;
        t.samples = static_cast<int>(samples->size());
        t.status = TimingStatus::kOk;
      } else {
        RecordRunFailure(t, samples.status());
      }
    }
    ++counts[static_cast<int>(t.status)];
    spdlog::debug("benchmark {} b={} algo={}: {} {:.4f} ms (iqr {:.4f}, n={}) ws={} {}", key,
                  t.micro_batch, t.algo, ToString(t.status), t.time_ms, t.spread_ms, t.samples,
                  t.workspace_bytes, t.error);
    if (progress) progress({static_cast<int64_t>(i) + 1, total, &t});
  }
  spdlog::info(
      "benchmarked {} on {} ({}): {} configurations, {} ok, {} unsupported, {} failed, "
      "{:.2f} s",
      key, backend.fingerprint().name, backend.fingerprint().backend, total,
      counts[static_cast<int>(TimingStatus::kOk)],
      counts[static_cast<int>(TimingStatus::kUnsupported)],
      counts[static_cast<int>(TimingStatus::kFailed)], MsSince(start) / 1000.0);
  return table;
}

}  // namespace ucudnn
