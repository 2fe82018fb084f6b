// The worker daemon's configuration: flags, with environment variables as fallbacks (a flag on the
// command line wins over its variable).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn::worker {

struct WorkerOptions {
  // ---- Database (daemon mode) ----
  std::string database_url;  // --database-url / UCUDNN_DATABASE_URL
  // ---- Devices ----
  std::string backend = "auto";  // --backend: "auto", "cudnn" or "cpu"
  std::vector<int> gpus;         // --gpus 0,2: GPU indices to use; empty = every visible GPU
  // --compiled-plan-cache / UCUDNN_COMPILED_PLAN_CACHE: where the cuDNN backend keeps the
  // runtime-compiled plans it builds (ucudnn/core/compiled_plans.h), so that the machine's jobs
  // load what the worker compiled while timing; default the user's cache (UserCachePath), empty
  // for none ("off").
  std::string compiled_plan_cache;
  // ---- Queue ----
  double lease_seconds = 60;      // job lease, renewed while benchmarking
  double heartbeat_seconds = 10;  // worker heartbeat period
  double poll_seconds = 2;        // idle wait between claims when the queue is empty
  double drain_seconds = 60;      // on SIGTERM: time the job in hand may take to finish
  int max_attempts = 3;           // failed attempts before a job is marked failed
  bool once = false;              // drain the queue and exit
  std::string worker_id_prefix;   // "host:pid" unless given
  // ---- Benchmark ----
  uint64_t workspace_cap_bytes = uint64_t{2} << 30;
  int warmup_runs = 2;
  int min_runs = 5;
  int max_runs = 25;
  double config_budget_ms = 250;
  // Runs faster than this are timed in groups of back-to-back runs (BenchmarkOptions::
  // short_run_ms); 0 times every run on its own.
  double short_run_us = 50;
  bool short_runs_device_time_only = false;  // BenchmarkOptions::short_runs_device_time_only
  // Probe pruning (BenchmarkOptions::prune_margin, negative: off) and skipping at the next size
  // what was far behind (BenchmarkOptions::skip_factor, <= 0: off). Off for a complete table, e.g.
  // to compare the legacy algorithms alone fairly.
  double prune_margin = 0.10;
  double skip_factor = 2.0;
  // Skipping at the larger sizes where micro-batches of a smaller size do better
  // (BenchmarkOptions::split_skip_factor, <= 0: off).
  double split_skip_factor = 2.0;
  double probe_batch_ms = 50;  // BenchmarkOptions::probe_batch_ms (0: one probe at a time)
  // Only entries a plan could use take the full protocol (BenchmarkOptions::usable_margin;
  // negative: every size measured as it is probed).
  double usable_margin = 0.5;
  int prepare_threads = 8;  // BenchmarkOptions::prepare_threads
  // Helper processes that build runtime-compiled cuDNN plans (compile_pool.h); -1: auto
  // (CompileProcesses); 0: none (the worker builds them itself).
  int compile_processes = -1;
  // --exhaustive: every configuration at every size with the full protocol (no probe pruning,
  // no skipping across sizes), to compare plans of the pruned search with; overrides
  // --prune-margin and --skip-factor.
  bool exhaustive = false;
  // --no-result-check clears it: BenchmarkOptions::check_results.
  bool check_results = true;
  // ---- Idle gate (idle_gate.h) ----
  // --idle-gate / UCUDNN_WORKER_IDLE_GATE: "auto" (NVML when it loads, else off with a warning;
  // the CPU backend's device counts idle), "nvml" (refuse to start without it) or "off".
  std::string idle_gate = "auto";
  double idle_max_utilization = 10;  // percent, mean over the window before a claim
  double idle_poll_seconds = 1;      // between looks while paused or waiting to claim
  // A benchmark paused this long stores what it measured and releases its job; 0: no limit.
  double idle_max_pause_seconds = 600;
  // Spread (IQR / median) above which a measurement is contended (kContendedRelativeSpread);
  // negative: that default on GPUs, off on the CPU backend (host timings on shared cores); 0 off.
  double contended_spread = -1;
  // ---- Offline mode (no database) ----
  bool offline = false;
  std::string network;  // --network resnet50
  int64_t batch = 0;    // --batch 256: mini-batch = largest micro-batch measured
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  DataType dtype = DataType::kFloat32;  // --dtype fp32|fp16|bf16
  Layout layout = Layout::kNCHW;        // --layout nchw|nhwc
  std::string output;                   // --output timings.csv
  // ---- Metrics ----
  int metrics_port = -1;                   // --metrics-port: Prometheus /metrics; -1 off, 0 any
  std::string metrics_host = "127.0.0.1";  // --metrics-host: the address it listens on
  // ---- Logging ----
  std::string log_level = "info";  // --log-level / UCUDNN_LOG_LEVEL
};

struct CommandLine {
  WorkerOptions options;
  bool help = false;  // --help or --version was given: print help_text and exit 0
  std::string help_text;
};

// Parses argv (argv[0] is the program name). Environment variables fill flags that are not on the
// command line. kInvalidArgument names the flag that is wrong; the options are validated
// (ValidateOptions) before they are returned.
Result<CommandLine> ParseCommandLine(int argc, const char* const* argv);

// Checks ranges and the flags each mode needs (daemon: a database URL; offline: network, batch,
// output). The message names the flag.
Status ValidateOptions(const WorkerOptions& options);

// "0,1, 3" -> {0, 1, 3}; kInvalidArgument for anything but non-negative integers.
Result<std::vector<int>> ParseGpuList(std::string_view text);

// The full --help text.
std::string HelpText();

}  // namespace ucudnn::worker
