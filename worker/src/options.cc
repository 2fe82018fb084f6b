#include "ucudnn/worker/options.h"

#include <spdlog/common.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <memory>

#include "ucudnn/core/files.h"
#include "ucudnn/core/text.h"
#include "ucudnn/core/units.h"

namespace ucudnn::worker {
namespace {

// Flags whose text needs our own parsing (units, lists, enums) land here first.
struct RawFlags {
  std::string gpus;
  std::string compiled_plan_cache = UserCachePath("compiled_plans");
  std::string workspace_cap;
  std::string policy = "power_of_two";
  std::string dtype = "fp32";
  std::string layout = "nchw";
};

constexpr const char* kDescription =
    "ucudnn-worker: the GPU benchmark worker daemon.\n"
    "Claims the benchmark jobs queued for its device fingerprint (GPU model, cuDNN and CUDA\n"
    "run-time versions) from PostgreSQL, measures every algorithm x micro-batch size with the\n"
    "benchmark engine, and stores the timings. One benchmarking thread per GPU; each holds a "
    "lease\n"
    "on its job that it renews while measuring, so a killed worker's job is claimed again after\n"
    "the lease expires.\n"
    "\n"
    "Signals: SIGTERM or SIGINT stops claiming; the job in hand is finished if it completes\n"
    "within --drain-seconds, else released to the queue; then the worker exits 0. A second\n"
    "signal releases the job at once.\n"
    "\n"
    "A GPU lost to an unrecoverable CUDA error (illegal address, launch failure, uncorrectable\n"
    "ECC error) gives its job back to the queue untouched and its thread stops; once no GPU is\n"
    "left the worker exits 1, for its supervisor to restart it.\n"
    "\n"
    "Offline mode (no database): ucudnn-worker --offline --network resnet50 --batch 256\n"
    "  --policy power_of_two --output timings.csv benchmarks a network's unique convolution\n"
    "  problems and writes a timing CSV with the device fingerprint in its header; load it into a\n"
    "  database with `ucudnn import timings.csv`. A problem whose benchmark fails does not stop\n"
    "  the others; the file holds what was measured and its header names what is missing. A\n"
    "  signal stops after the problem in hand (which is dropped) and writes the rest.\n";

constexpr const char* kFooter =
    "Exit status: 0 after a clean stop (signal, or --once with the queue drained; offline: every\n"
    "problem measured, or stopped by a signal), 1 when the worker cannot run (no device,\n"
    "database schema refused), stopped with a GPU lost, or an offline run left problems\n"
    "unmeasured by failures (logged, and named in the file's header), 2 for bad flags.\n"
    "Environment variables are read when the matching flag is absent. NVIDIA_TF32_OVERRIDE=0\n"
    "(read by cuDNN) would make default-math fp32 timings strict fp32: the worker warns.";

void AddDeviceFlags(CLI::App& app, WorkerOptions& o, RawFlags& raw) {
  app.add_option("--database-url", o.database_url,
                 "PostgreSQL URL or libpq connection string (add connect_timeout=N to bound "
                 "connects to unreachable hosts)")
      ->envname("UCUDNN_DATABASE_URL")
      ->group("Database");

  app.add_option("--backend", o.backend,
                 "auto: cudnn when a GPU is visible, otherwise refuse; cudnn; cpu: the CPU "
                 "reference backend (its timings are CPU timings, stored under a cpu fingerprint)")
      ->envname("UCUDNN_WORKER_BACKEND")
      ->check(CLI::IsMember({"auto", "cudnn", "cpu"}))
      ->group("Devices");
  app.add_option("--gpus", raw.gpus,
                 "comma-separated GPU indices to benchmark on (default: every visible GPU)")
      ->envname("UCUDNN_WORKER_GPUS")
      ->group("Devices");
  app.add_option("--compiled-plan-cache", raw.compiled_plan_cache,
                 "directory where the runtime-compiled cuDNN plans the worker builds are kept, "
                 "and loaded from, for this GPU model and cuDNN version; the training jobs of the "
                 "machine load them from the same directory (the client's "
                 "UCUDNN_COMPILED_PLAN_CACHE) instead of compiling them; off for none")
      ->envname("UCUDNN_COMPILED_PLAN_CACHE")
      ->capture_default_str()
      ->group("Devices");
}

void AddQueueFlags(CLI::App& app, WorkerOptions& o) {
  app.add_option("--lease-seconds", o.lease_seconds,
                 "job lease; renewed every third of it while benchmarking. A killed worker's job "
                 "is claimed again once its lease expired")
      ->envname("UCUDNN_WORKER_LEASE_SECONDS")
      ->group("Queue");
  app.add_option("--heartbeat-seconds", o.heartbeat_seconds, "worker heartbeat period")
      ->envname("UCUDNN_WORKER_HEARTBEAT_SECONDS")
      ->group("Queue");
  app.add_option("--poll-seconds", o.poll_seconds,
                 "wait between claims while the queue is empty (a job notification, LISTEN "
                 "ucudnn_jobs, ends it at once)")
      ->envname("UCUDNN_WORKER_POLL_SECONDS")
      ->group("Queue");
  app.add_option("--drain-seconds", o.drain_seconds,
                 "on SIGTERM/SIGINT, how long the job in hand may still run before it is "
                 "released to the queue")
      ->envname("UCUDNN_WORKER_DRAIN_SECONDS")
      ->group("Queue");
  app.add_option("--max-attempts", o.max_attempts,
                 "failed benchmark attempts after which a job is marked failed")
      ->envname("UCUDNN_WORKER_MAX_ATTEMPTS")
      ->group("Queue");
  app.add_flag("--once", o.once,
               "drain the queue for this worker's fingerprints, then exit 0 (no idle polling)")
      ->group("Queue");
  app.add_option("--worker-id-prefix", o.worker_id_prefix,
                 "prefix of the worker ids (default host:pid); each benchmarking thread "
                 "registers as PREFIX:gpuN, or PREFIX:cpu")
      ->envname("UCUDNN_WORKER_ID_PREFIX")
      ->group("Queue");
}

void AddMetricsFlags(CLI::App& app, WorkerOptions& o) {
  app.add_option("--metrics-port", o.metrics_port,
                 "serve Prometheus metrics (jobs, configurations measured, current job and its "
                 "progress, last heartbeat) at http://HOST:PORT/metrics; 0 picks a free port "
                 "(logged); -1: no endpoint")
      ->envname("UCUDNN_WORKER_METRICS_PORT")
      ->group("Metrics");
  app.add_option("--metrics-host", o.metrics_host,
                 "address the metrics endpoint listens on (0.0.0.0 for a Kubernetes probe)")
      ->envname("UCUDNN_WORKER_METRICS_HOST")
      ->group("Metrics");
}

void AddBenchmarkFlags(CLI::App& app, WorkerOptions& o, RawFlags& raw) {
  app.add_option("--workspace-cap", raw.workspace_cap,
                 "largest workspace an algorithm may use on this worker; bigger ones are not "
                 "measured, recorded failed with a \"worker limit:\" reason (e.g. 2GiB, 512MiB; "
                 "default 2GiB)")
      ->envname("UCUDNN_WORKER_WORKSPACE_CAP")
      ->group("Benchmark");
  app.add_option("--warmup-runs", o.warmup_runs, "untimed runs per configuration (at least 1)")
      ->envname("UCUDNN_WORKER_WARMUP_RUNS")
      ->group("Benchmark");
  app.add_option("--min-runs", o.min_runs, "timed runs per configuration, at least")
      ->envname("UCUDNN_WORKER_MIN_RUNS")
      ->group("Benchmark");
  app.add_option("--max-runs", o.max_runs, "timed runs per configuration, at most")
      ->envname("UCUDNN_WORKER_MAX_RUNS")
      ->group("Benchmark");
  app.add_option("--config-budget-ms", o.config_budget_ms,
                 "wall time per configuration for timed runs")
      ->envname("UCUDNN_WORKER_CONFIG_BUDGET_MS")
      ->group("Benchmark");
  app.add_option("--prune-margin", o.prune_margin,
                 "probe pruning: a configuration another of its size beats by more than this "
                 "fraction with at most its workspace keeps its probe only (negative: off)")
      ->envname("UCUDNN_WORKER_PRUNE_MARGIN")
      ->capture_default_str();
  app.add_option("--skip-factor", o.skip_factor,
                 "not run at the next size: configurations this many times slower than another "
                 "with at most their workspace (0: off)")
      ->envname("UCUDNN_WORKER_SKIP_FACTOR")
      ->capture_default_str();
  app.add_option("--split-skip-factor", o.split_skip_factor,
                 "in grouped problems, configurations are not run at the larger sizes where "
                 "micro-batches of a smaller size's fastest configuration (with at most their "
                 "workspace) take less than 1/this of their probe (0: off)")
      ->envname("UCUDNN_WORKER_SPLIT_SKIP_FACTOR")
      ->capture_default_str();
  app.add_option("--usable-margin", o.usable_margin,
                 "every size probed before any is measured; only configurations that a fastest "
                 "plan of the job's mini-batch could run, were they this fraction faster than "
                 "their probe, take the full protocol, the others keep their probe (negative: "
                 "every size measured)")
      ->envname("UCUDNN_WORKER_USABLE_MARGIN")
      ->capture_default_str();
  app.add_option("--probe-batch-ms", o.probe_batch_ms,
                 "probes of a size queued on the device together, about this much device time "
                 "a batch between looks of the idle gate, one wait for each batch (0: one "
                 "configuration at a time)")
      ->envname("UCUDNN_WORKER_PROBE_BATCH_MS")
      ->capture_default_str();
  app.add_flag("--exhaustive", o.exhaustive,
               "time every configuration at every micro-batch size with the full protocol "
               "(no probe pruning, no skipping across sizes, nothing left out for losing on "
               "the device's nearby problems; overrides --prune-margin and the skip factors): the "
               "search the pruned one is compared with")
      ->envname("UCUDNN_WORKER_EXHAUSTIVE")
      ->group("Benchmark");
  app.add_flag("!--no-result-check", o.check_results,
               "store timings without checking the results a plan could use against the fp32 "
               "reference (by default a configuration that computes a wrong result on this GPU "
               "and cuDNN is stored failed, 'wrong result: ...', and never planned)")
      ->group("Benchmark");
  app.add_option("--prepare-threads", o.prepare_threads,
                 "host threads that build every micro-batch size's candidates (cuDNN heuristics "
                 "and execution plans, except runtime-compiled ones: built when a size asks for "
                 "them) before the timed runs; 1: one size at a time")
      ->envname("UCUDNN_WORKER_PREPARE_THREADS")
      ->capture_default_str()
      ->group("Benchmark");
  app.add_option("--compile-processes", o.compile_processes,
                 "helper processes that build the runtime-compiled cuDNN plans of grouped and "
                 "depthwise problems into --compiled-plan-cache ahead of the timed runs (cuDNN "
                 "compiles one at a time per process); each holds a CUDA context "
                 "on the GPU while it has work, and exits after 20 s without. -1: half the cores "
                 "less one, at most 6 and one per GiB of a memory limit beyond 2 GiB; 0: none")
      ->envname("UCUDNN_WORKER_COMPILE_PROCESSES")
      ->capture_default_str()
      ->group("Benchmark");
  app.add_option("--short-run-us", o.short_run_us,
                 "runs faster than this are timed (and probed) in groups of back-to-back runs, "
                 "as a segment's micro-batches run; 0 times every run on its own")
      ->envname("UCUDNN_WORKER_SHORT_RUN_US")
      ->capture_default_str()
      ->group("Benchmark");
  app.add_flag("--short-runs-device-time-only", o.short_runs_device_time_only,
               "time those groups as the device alone runs them, queued before they start "
               "(leaves out the host's cost of issuing each run, which a step pays)")
      ->envname("UCUDNN_WORKER_SHORT_RUNS_DEVICE_TIME_ONLY")
      ->group("Benchmark");
}

void AddIdleGateFlags(CLI::App& app, WorkerOptions& o) {
  app.add_option("--idle-gate", o.idle_gate,
                 "measure only while the GPU runs no other work: nvml (NVML, loaded at run time: "
                 "claim only when no other process has a context on the GPU and its utilization "
                 "is low; pause a benchmark, keeping its lease and what it measured, while "
                 "another process appears); auto: nvml when it loads, else off; off")
      ->envname("UCUDNN_WORKER_IDLE_GATE")
      ->check(CLI::IsMember({"auto", "nvml", "off"}))
      ->capture_default_str()
      ->group("Idle gate");
  app.add_option("--idle-max-utilization", o.idle_max_utilization,
                 "GPU utilization (percent, mean of 3 readings 100 ms apart) above which the "
                 "worker does not claim")
      ->envname("UCUDNN_WORKER_IDLE_MAX_UTILIZATION")
      ->capture_default_str()
      ->group("Idle gate");
  app.add_option("--idle-poll-seconds", o.idle_poll_seconds,
                 "how often a paused benchmark looks whether the GPU is idle again")
      ->envname("UCUDNN_WORKER_IDLE_POLL_SECONDS")
      ->capture_default_str()
      ->group("Idle gate");
  app.add_option("--idle-max-pause-seconds", o.idle_max_pause_seconds,
                 "a benchmark paused this long for other work stores what it measured and "
                 "releases its job to workers whose GPU is idle; 0: wait as long as it takes")
      ->envname("UCUDNN_WORKER_IDLE_MAX_PAUSE_SECONDS")
      ->capture_default_str()
      ->group("Idle gate");
  app.add_option("--contended-spread", o.contended_spread,
                 "a measurement whose interquartile range exceeds this fraction of its median is "
                 "taken again (twice at most) and, still so, stored as contended, never planned "
                 "with; negative: 0.25 on GPUs, off on the CPU backend; 0: off")
      ->envname("UCUDNN_WORKER_CONTENDED_SPREAD")
      ->capture_default_str()
      ->group("Idle gate");
}

void AddOfflineFlags(CLI::App& app, WorkerOptions& o, RawFlags& raw) {
  app.add_flag("--offline", o.offline,
               "benchmark a network without a database and write a timing CSV")
      ->group("Offline mode");
  app.add_option("--network", o.network, "network whose convolutions to benchmark (resnet50, ...)")
      ->group("Offline mode");
  app.add_option("--batch", o.batch, "mini-batch size, the largest micro-batch measured")
      ->group("Offline mode");
  app.add_option("--policy", raw.policy, "micro-batch sizes: undivided, power_of_two or all")
      ->group("Offline mode");
  app.add_option("--dtype", raw.dtype, "data type of the network's convolutions: fp32, fp16, bf16")
      ->group("Offline mode");
  app.add_option("--layout", raw.layout, "tensor layout: nchw or nhwc")->group("Offline mode");
  app.add_option("--output", o.output, "timing CSV to write")->group("Offline mode");
}

std::unique_ptr<CLI::App> BuildApp(WorkerOptions& o, RawFlags& raw) {
  auto app = std::make_unique<CLI::App>(kDescription, "ucudnn-worker");
  app->footer(kFooter);
  app->set_version_flag("--version", std::string("ucudnn-worker ") + UCUDNN_VERSION);
  app->get_formatter()->column_width(34);
  app->option_defaults()->always_capture_default();
  AddDeviceFlags(*app, o, raw);
  AddQueueFlags(*app, o);
  AddMetricsFlags(*app, o);
  AddBenchmarkFlags(*app, o, raw);
  AddIdleGateFlags(*app, o);
  AddOfflineFlags(*app, o, raw);
  app->add_option("--log-level", o.log_level, "trace, debug, info, warn, error, critical or off")
      ->envname("UCUDNN_LOG_LEVEL")
      ->group("Logging");
  return app;
}

bool IsLogLevel(const std::string& name) {
  for (const char* level :
       {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"}) {
    if (name == level) return true;
  }
  return false;
}

bool FiniteIn(double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; }

}  // namespace

Result<std::vector<int>> ParseGpuList(std::string_view text) {
  std::vector<int> gpus;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    auto parsed = ParseInteger<int>("--gpus", Trim(text.substr(pos, comma - pos)), 0, 1023);
    if (!parsed.ok()) {
      return InvalidArgument("--gpus: expected comma-separated GPU indices such as 0,1, got '" +
                             std::string(text) + "'");
    }
    const int value = *parsed;
    for (int g : gpus) {
      if (g == value) {
        return InvalidArgument("--gpus: GPU " + std::to_string(value) + " is listed twice");
      }
    }
    gpus.push_back(value);
    pos = comma + 1;
  }
  return gpus;
}

namespace {

// A number flag's range, as its message writes it.
struct Bound {
  const char* flag;
  double value;
  double lo, hi;
  const char* range;
};

std::string FormatNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

Status ValidateNumbers(const WorkerOptions& o) {
  const Bound bounds[] = {
      {"--lease-seconds", o.lease_seconds, 0.5, 86400, "[0.5, 86400]"},
      {"--heartbeat-seconds", o.heartbeat_seconds, 0.1, 3600, "[0.1, 3600]"},
      {"--poll-seconds", o.poll_seconds, 0.01, 3600, "[0.01, 3600]"},
      {"--drain-seconds", o.drain_seconds, 0, 86400, "[0, 86400]"},
      {"--max-attempts", double(o.max_attempts), 1, 1000, "[1, 1000]"},
      {"--warmup-runs", double(o.warmup_runs), 1, 1000, "[1, 1000]"},
      {"--min-runs", double(o.min_runs), 1, 10000, "[1, 10000]"},
      {"--max-runs", double(o.max_runs), double(o.min_runs), 10000, "[--min-runs, 10000]"},
      {"--prune-margin", o.prune_margin, -1, 100, "[-1, 100]"},
      {"--skip-factor", o.skip_factor, 0, 1e6, "[0, 1e6]"},
      {"--split-skip-factor", o.split_skip_factor, 0, 1e6, "[0, 1e6]"},
      {"--probe-batch-ms", o.probe_batch_ms, 0, 3.6e6, "[0, 3600000]"},
      {"--usable-margin", o.usable_margin, -1, 100, "[-1, 100]"},
      {"--prepare-threads", double(o.prepare_threads), 1, 256, "[1, 256]"},
      {"--compile-processes", double(o.compile_processes), -1, 64, "[-1, 64]"},
      {"--short-run-us", o.short_run_us, 0, 1e6, "[0, 1000000]"},
      {"--config-budget-ms", o.config_budget_ms, 0.001, 3.6e6, "[0.001, 3600000]"},
      {"--metrics-port", double(o.metrics_port), -1, 65535, "[-1, 65535]"},
      {"--idle-max-utilization", o.idle_max_utilization, 0, 100, "[0, 100]"},
      {"--idle-poll-seconds", o.idle_poll_seconds, 0.01, 3600, "[0.01, 3600]"},
      {"--idle-max-pause-seconds", o.idle_max_pause_seconds, 0, 86400 * 7, "[0, 604800]"},
      {"--contended-spread", o.contended_spread, -1, 100, "[-1, 100]"},
  };
  for (const Bound& b : bounds) {
    if (!FiniteIn(b.value, b.lo, b.hi)) {
      return InvalidArgument(std::string(b.flag) + ": must be in " + b.range + ", got " +
                             FormatNumber(b.value));
    }
  }
  return Status::Ok();
}

// --network, --batch and --output with --offline only; the database without it.
Status ValidateMode(const WorkerOptions& o) {
  if (o.offline) {
    if (o.network.empty()) return InvalidArgument("--network: required with --offline");
    if (o.batch < 1 || o.batch > kMaxBatch) {
      return InvalidArgument("--batch: required with --offline, in [1, " +
                             std::to_string(kMaxBatch) + "], got " + std::to_string(o.batch));
    }
    if (o.output.empty()) return InvalidArgument("--output: required with --offline");
    if (o.once) return InvalidArgument("--once: has no meaning with --offline");
    return Status::Ok();
  }
  if (o.database_url.empty()) {
    return InvalidArgument(
        "--database-url: required (or UCUDNN_DATABASE_URL), unless --offline is given");
  }
  if (!o.network.empty() || o.batch != 0 || !o.output.empty()) {
    return InvalidArgument("--network/--batch/--output: only with --offline");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateOptions(const WorkerOptions& o) {
  if (o.backend != "auto" && o.backend != "cudnn" && o.backend != "cpu") {
    return InvalidArgument("--backend: must be auto, cudnn or cpu, got '" + o.backend + "'");
  }
  if (o.idle_gate != "auto" && o.idle_gate != "nvml" && o.idle_gate != "off") {
    return InvalidArgument("--idle-gate: must be auto, nvml or off, got '" + o.idle_gate + "'");
  }
  if (o.backend == "cpu" && o.idle_gate == "nvml") {
    return InvalidArgument("--idle-gate nvml: only with a GPU backend, not with --backend cpu");
  }
  if (o.backend == "cpu" && !o.gpus.empty()) {
    return InvalidArgument("--gpus: only with the cudnn backend, not with --backend cpu");
  }
  UCUDNN_RETURN_IF_ERROR(ValidateNumbers(o));
  if (o.metrics_port >= 0 && o.metrics_host.empty()) {
    return InvalidArgument("--metrics-host: must not be empty with --metrics-port");
  }
  if (!IsLogLevel(o.log_level)) {
    return InvalidArgument(
        "--log-level: must be trace, debug, info, warn, error, critical or off, got '" +
        o.log_level + "'");
  }
  return ValidateMode(o);
}

Result<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CommandLine result;
  RawFlags raw;
  auto app = BuildApp(result.options, raw);
  try {
    app->parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.help = true;
    result.help_text = app->help();
    return result;
  } catch (const CLI::CallForVersion& e) {
    result.help = true;
    result.help_text = std::string(e.what()) + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(e.what());
  }
  WorkerOptions& o = result.options;
  // The prefix is in every log line and in the catalog: a line break would forge log lines.
  if (HasControlCharacter(o.worker_id_prefix)) {
    return InvalidArgument(
        "--worker-id-prefix: must not contain control characters (line breaks, ESC, tabs)");
  }
  if (!raw.gpus.empty()) {
    UCUDNN_ASSIGN_OR_RETURN(o.gpus, ParseGpuList(raw.gpus));
  }
  o.compiled_plan_cache = PathSetting(raw.compiled_plan_cache);
  if (!raw.workspace_cap.empty()) {
    auto cap = ParseByteSize(raw.workspace_cap);
    if (!cap.ok()) return InvalidArgument("--workspace-cap: " + cap.status().message());
    o.workspace_cap_bytes = *cap;
  }
  UCUDNN_ASSIGN_OR_RETURN(o.policy, ParseBatchPolicyChoice("--policy", raw.policy));
  auto dtype = ParseDataType(raw.dtype);
  if (!dtype.ok()) return InvalidArgument("--dtype: " + dtype.status().message());
  o.dtype = *dtype;
  auto layout = ParseLayout(raw.layout);
  if (!layout.ok()) return InvalidArgument("--layout: " + layout.status().message());
  o.layout = *layout;
  UCUDNN_RETURN_IF_ERROR(ValidateOptions(o));
  return result;
}

std::string HelpText() {
  WorkerOptions options;
  RawFlags raw;
  return BuildApp(options, raw)->help();
}

}  // namespace ucudnn::worker
