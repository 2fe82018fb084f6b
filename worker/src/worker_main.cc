#include "ucudnn/worker/worker_main.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include <unistd.h>

#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/core/compiled_plans.h"
#include "ucudnn/core/logging.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/stop_signals.h"
#include "ucudnn/core/text.h"
#include "ucudnn/core/units.h"
#include "ucudnn/metrics/endpoint.h"
#include "ucudnn/metrics/registry.h"
#include "ucudnn/store/store.h"
#include "ucudnn/worker/compile_pool.h"
#include "ucudnn/worker/idle_gate.h"
#include "ucudnn/worker/offline.h"
#include "ucudnn/worker/worker_metrics.h"

namespace ucudnn::worker {
namespace {

using std::chrono::milliseconds;

milliseconds Millis(double seconds) {
  return milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

// Where signals meet whatever runs at the moment: the store connection loop, the daemon or the
// offline benchmark.
class StopControl {
 public:
  void OnSignal(int signal_number, int count) {
    const char* name = signal_number == SIGTERM  ? "SIGTERM"
                       : signal_number == SIGINT ? "SIGINT"
                                                 : "signal";
    if (count == 1) {
      spdlog::info(
          "{}: stopping; no new jobs, the job in hand finishes within the drain time "
          "or is released",
          name);
    } else {
      spdlog::info("{} again: releasing the job in hand now", name);
    }
    std::lock_guard lock(mu_);
    signals_ = count;
    cancel_ = true;
    if (daemon_ != nullptr) daemon_->RequestStop(/*immediate=*/count > 1);
    cv_.notify_all();
  }
  void Attach(Daemon* daemon) {
    std::lock_guard lock(mu_);
    daemon_ = daemon;
    if (daemon_ != nullptr && signals_ > 0) daemon_->RequestStop(signals_ > 1);
  }
  // Sleeps, returning true early when a signal came.
  bool WaitFor(milliseconds duration) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, duration, [&] { return signals_ > 0; });
  }
  const std::atomic<bool>* cancel_flag() const { return &cancel_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int signals_ = 0;
  Daemon* daemon_ = nullptr;
  std::atomic<bool> cancel_{false};
};

void LogDevices(const std::vector<BenchmarkDevice>& devices) {
  std::map<uint64_t, std::vector<std::string>> by_fingerprint;
  for (const auto& d : devices) {
    const DeviceFingerprint& f = d.backend->fingerprint();
    spdlog::info("[{}] {} backend on {} (fingerprint {}: {})", d.slot, f.backend, f.name,
                 store::FormatHash(f.Hash()), f.Key());
    by_fingerprint[f.Hash()].push_back(d.slot);
  }
  spdlog::info("{} benchmarking thread(s), {} distinct device fingerprint(s)", devices.size(),
               by_fingerprint.size());
}

Result<std::unique_ptr<store::Store>> OpenStore(const WorkerOptions& options, int threads,
                                                StopControl& stop) {
  store::StoreOptions store_options;
  store_options.url = options.database_url;
  // Per thread: its claims and completions plus its lease renewer; plus the heartbeat.
  store_options.pool_size = std::min(256, 2 * threads + 2);
  milliseconds backoff(500);
  bool warned = false;
  while (true) {
    auto store = store::Store::Open(store_options);
    if (store.ok()) {
      if (warned) spdlog::info("database reachable");
      return store;
    }
    if (store.status().code() != StatusCode::kUnavailable) return store.status();
    if (!warned) {
      spdlog::warn("database unavailable, retrying until it is up: {}", store.status().ToString());
      warned = true;
    } else {
      spdlog::debug("database still unavailable: {}", store.status().ToString());
    }
    if (stop.WaitFor(backoff)) return Unavailable("stopped before the database was reachable");
    backoff = std::min(milliseconds(10000), backoff * 2);
  }
}

// A database older than this worker is waited for (the server migrates it; registration is
// retried). A newer one is refused, as the server and the CLI refuse it: this worker would
// write rows a schema it does not know may read otherwise.
Status CheckSchema(store::Store& store) {
  auto version = store.SchemaVersion();
  if (!version.ok()) return Status::Ok();  // registration reports what matters
  const int latest = store::Store::LatestSchemaVersion();
  if (*version > latest) return store::CheckSchemaVersion(*version);
  if (*version < latest) {
    spdlog::warn(
        "database schema is at version {}, this worker was built for {}: run `ucudnn "
        "migrate` (or start the server, which migrates); registration is retried",
        *version, latest);
  }
  return Status::Ok();
}

int RunOfflineMode(const WorkerOptions& options, std::vector<BenchmarkDevice>& devices,
                   StopControl& stop) {
  auto kernels = NetworkKernels(options.network, options.batch, options.dtype, options.layout);
  if (!kernels.ok()) {
    spdlog::error("--network: {}", kernels.status().message());
    return 2;
  }
  OfflineRequest request;
  request.kernels = UniqueKernels(*kernels);
  request.policy = options.policy;
  request.benchmark = MakeBenchmarkOptions(options);
  request.output = options.output;
  request.notes.push_back("network: " + options.network +
                          "; batch: " + std::to_string(options.batch) +
                          "; dtype: " + std::string(ToString(options.dtype)) +
                          "; layout: " + std::string(ToString(options.layout)));
  spdlog::info("offline: {} kernels of {} at batch {} ({}), writing {}", request.kernels.size(),
               options.network, options.batch, ToString(options.policy), options.output);
  auto summary = RunOffline(devices, request, stop.cancel_flag());
  if (!summary.ok()) {
    if (stop.cancel_flag()->load()) {
      // A signal is a clean stop (--help): nothing was measured, so nothing was written.
      spdlog::info("offline: {}", summary.status().message());
      return 0;
    }
    spdlog::error("offline benchmark: {}", summary.status().ToString());
    return 1;
  }
  spdlog::info("offline: wrote {} ({} problems, {} timings, {} ok) in {:.1f} s for device {}",
               options.output, summary->problems, summary->timings, summary->ok, summary->seconds,
               store::FormatHash(summary->device.Hash()));
  if (summary->complete()) return 0;
  for (const std::string& failure : summary->failed) {
    spdlog::error("offline: not measured, failed: {}", failure);
  }
  if (!summary->not_measured.empty()) {
    spdlog::warn("offline: {} problem(s) not started{}", summary->not_measured.size(),
                 summary->cancelled ? " (stopped by a signal)" : " (no device left)");
  }
  if (!summary->failed.empty() || !summary->lost_devices.empty()) {
    spdlog::error("offline: {} of the network's problems failed; {} holds the others",
                  summary->failed.size(), options.output);
    return 1;
  }
  return 0;  // stopped by a signal: a clean stop, with what was measured written
}

// NVIDIA_TF32_OVERRIDE=0 makes cuDNN run fp32 convolutions of default math without TF32 in this
// process. Its timings are stored under the same fingerprint and problem key (math=default) as
// those of workers running cuDNN's real default, which uses TF32 on compute capability 8.0 and
// newer, so they would describe another computation. Strict fp32 has its own math mode (fma).
void WarnAboutTf32Override(const std::vector<BenchmarkDevice>& devices) {
  const char* value = std::getenv("NVIDIA_TF32_OVERRIDE");
  if (value == nullptr) return;
  bool gpu = false;
  for (const auto& d : devices) gpu = gpu || d.backend->fingerprint().backend != "cpu";
  if (!gpu) return;
  if (std::string_view(value) == "0") {
    spdlog::warn(
        "NVIDIA_TF32_OVERRIDE=0 is set: fp32 convolutions with default math run without TF32 "
        "here, so this worker's default-math fp32 timings describe strict fp32, not cuDNN's "
        "default (TF32 on compute capability 8.0 and newer), yet they are stored under the same "
        "problem key as other workers'. Unset it for a benchmarking worker; strict fp32 is the "
        "'fma' math mode");
  } else {
    spdlog::info("NVIDIA_TF32_OVERRIDE={} is set (only 0 changes cuDNN's math)", value);
  }
}

}  // namespace

namespace {

IdleGateConfig MakeIdleGateConfig(const WorkerOptions& o, bool holds_context) {
  IdleGateConfig c;
  c.max_utilization_percent = o.idle_max_utilization;
  c.poll = std::chrono::milliseconds(static_cast<int64_t>(o.idle_poll_seconds * 1000));
  c.max_pause = std::chrono::milliseconds(static_cast<int64_t>(o.idle_max_pause_seconds * 1000));
  c.self_pid = static_cast<uint32_t>(getpid());
  c.self_has_context = holds_context;
  c.look_reuse = std::chrono::milliseconds(100);
  return c;
}

// GPU `gpu`'s idle gate as --idle-gate asks: nullptr for off, or for auto without NVML.
Result<std::unique_ptr<IdleGate>> MakeGpuIdleGate(const WorkerOptions& o, int gpu) {
  if (o.idle_gate == "off") return std::unique_ptr<IdleGate>();
  Result<std::string> bus_id = GpuPciBusId(gpu);
  Result<std::unique_ptr<GpuActivityProbe>> probe =
      MakeNvmlProbe(bus_id.ok() ? *bus_id : std::string(), gpu);
  if (!probe.ok()) {
    if (o.idle_gate == "nvml") {
      return probe.status().WithContext("--idle-gate nvml on GPU " + std::to_string(gpu));
    }
    spdlog::warn(
        "GPU {}: idle gate off (--idle-gate auto without NVML): the worker may measure while "
        "other work runs on the GPU: {}",
        gpu, probe.status().ToString());
    return std::unique_ptr<IdleGate>();
  }
  spdlog::info("GPU {}: idle gate nvml (PCI {}): claims only while no other process uses it", gpu,
               bus_id.ok() ? *bus_id : "unknown, by NVML index");
  return std::make_unique<IdleGate>(std::move(probe).value(), MakeIdleGateConfig(o, true));
}

}  // namespace

Result<std::vector<BenchmarkDevice>> MakeBenchmarkDevices(const WorkerOptions& options) {
  std::vector<BenchmarkDevice> devices;
  if (options.backend == "cpu") {
    UCUDNN_ASSIGN_OR_RETURN(auto backend, MakeBackend("cpu"));
    spdlog::info(
        "backend: cpu (the CPU reference backend; its timings are stored under a cpu "
        "fingerprint and never serve a GPU)");
    devices.push_back({"cpu", std::move(backend), nullptr});
    if (options.idle_gate != "off") {
      // Nothing else runs on the CPU backend's "device" as the gate counts it: its timings
      // record the gate as "idle", and noisy host timings are left to the spread check.
      IdleGateConfig config = MakeIdleGateConfig(options, false);
      config.window_samples = 1;  // nothing to average: the probe always says idle
      devices.back().gate = std::make_unique<IdleGate>(MakeIdleProbe(), config);
    }
    return devices;
  }
  const int count = GpuCount();
  if (count == 0) {
    const std::string why =
        BuildHasCudnn() ? "no GPU is visible" : "this build has no cuDNN backend";
    return Unavailable("--backend " + options.backend + ": " + why +
                       "; pass --backend cpu to benchmark on the CPU instead");
  }
  std::vector<int> gpus = options.gpus;
  if (gpus.empty()) {
    for (int i = 0; i < count; ++i) gpus.push_back(i);
  }
  for (int gpu : gpus) {
    if (gpu >= count) {
      return InvalidArgument("--gpus: GPU " + std::to_string(gpu) + " does not exist (" +
                             std::to_string(count) + " visible)");
    }
    auto backend = MakeBackend("cudnn", gpu);
    if (!backend.ok()) return backend.status().WithContext("GPU " + std::to_string(gpu));
    UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<IdleGate> gate, MakeGpuIdleGate(options, gpu));
    devices.push_back({"gpu" + std::to_string(gpu), std::move(backend).value(), std::move(gate)});
  }
  spdlog::info("backend: cudnn on {} GPU(s)", devices.size());
  UseCompiledPlanDirectory(options.compiled_plan_cache);
  if (!options.compiled_plan_cache.empty()) {
    spdlog::info("compiled plans kept in {} for the machine's jobs (--compiled-plan-cache)",
                 options.compiled_plan_cache);
  }
  return devices;
}

BenchmarkOptions MakeBenchmarkOptions(const WorkerOptions& o) {
  BenchmarkOptions b;
  b.warmup_runs = o.warmup_runs;
  b.min_runs = o.min_runs;
  b.max_runs = o.max_runs;
  b.workspace_cap_bytes = o.workspace_cap_bytes;
  b.config_time_budget_ms = o.config_budget_ms;
  b.short_run_ms = o.short_run_us / 1000.0;
  b.short_runs_device_time_only = o.short_runs_device_time_only;
  b.prune_margin = o.exhaustive ? -1.0 : o.prune_margin;
  b.check_results = o.check_results;
  b.skip_factor = o.exhaustive ? 0.0 : o.skip_factor;
  b.split_skip_factor = o.exhaustive ? 0.0 : o.split_skip_factor;
  b.probe_batch_ms = o.probe_batch_ms;
  b.usable_margin = o.exhaustive ? -1.0 : o.usable_margin;
  b.prepare_threads = o.prepare_threads;
  b.contended_relative_spread = o.contended_spread >= 0 ? o.contended_spread
                                : o.backend == "cpu"    ? 0.0
                                                        : kContendedRelativeSpread;
  return b;
}

DaemonConfig MakeDaemonConfig(const WorkerOptions& o) {
  DaemonConfig c;
  c.host = HostName();
  c.id_prefix = o.worker_id_prefix.empty() ? DefaultWorkerIdPrefix() : o.worker_id_prefix;
  c.lease = Millis(o.lease_seconds);
  c.heartbeat = Millis(o.heartbeat_seconds);
  c.poll = Millis(o.poll_seconds);
  c.drain = Millis(o.drain_seconds);
  c.max_attempts = o.max_attempts;
  c.once = o.once;
  // A worker that drains once and exits has nothing to wait for.
  if (!o.once) c.jobs_listen_url = o.database_url;
  c.benchmark = MakeBenchmarkOptions(o);
  c.use_prior = !o.exhaustive;
  // Retry no slower than a third of the lease, so a short outage does not cost the lease.
  c.retry_max = std::max(c.retry_initial, std::min(milliseconds(5000), c.lease / 3));
  return c;
}

namespace {

// The daemon the metrics endpoint reads, once there is one.
class StatsSource {
 public:
  DaemonStats Get() const {
    std::lock_guard lock(mu_);
    return daemon_ != nullptr ? daemon_->stats() : DaemonStats{};
  }
  // Attaches `daemon` for its scope: the endpoint never reads a destroyed daemon.
  class Attachment {
   public:
    Attachment(StatsSource& source, const Daemon& daemon) : source_(source) {
      std::lock_guard lock(source_.mu_);
      source_.daemon_ = &daemon;
    }
    ~Attachment() {
      std::lock_guard lock(source_.mu_);
      source_.daemon_ = nullptr;
    }
    Attachment(const Attachment&) = delete;
    Attachment& operator=(const Attachment&) = delete;

   private:
    StatsSource& source_;
  };

 private:
  mutable std::mutex mu_;
  const Daemon* daemon_ = nullptr;
};

Result<std::unique_ptr<metrics::Endpoint>> StartMetrics(const WorkerOptions& options,
                                                        const StatsSource& source,
                                                        const CompilePool* compile_helpers) {
  const bool ipv6 = options.metrics_host.find(':') != std::string::npos;
  const std::string host = ipv6 ? "[" + options.metrics_host + "]" : options.metrics_host;
  UCUDNN_ASSIGN_OR_RETURN(
      auto endpoint, metrics::Endpoint::Start(host + ":" + std::to_string(options.metrics_port),
                                              metrics::MakeCollectable([&source, compile_helpers] {
                                                DaemonStats stats = source.Get();
                                                if (compile_helpers != nullptr) {
                                                  stats.compile_helpers = compile_helpers->counts();
                                                }
                                                return CollectWorkerMetrics(stats);
                                              })));
  spdlog::info("metrics at http://{}:{}/metrics", host, endpoint->port());
  return endpoint;
}

// The daemon: metrics, the database, then claiming jobs until stopped (or --once is done).
int RunDaemonMode(const WorkerOptions& options, std::vector<BenchmarkDevice> devices,
                  StopControl& stop, const CompilePool* compile_helpers) {
  // The metrics endpoint starts before the database is reachable, so that a probe sees the
  // process alive while it waits; it shows zeros until the daemon exists.
  StatsSource stats_source;
  std::unique_ptr<metrics::Endpoint> metrics_endpoint;
  if (options.metrics_port >= 0) {
    auto started = StartMetrics(options, stats_source, compile_helpers);
    if (!started.ok()) {
      spdlog::error("{}", started.status().ToString());
      return 1;
    }
    metrics_endpoint = std::move(started).value();
  }

  const DaemonConfig config = MakeDaemonConfig(options);
  spdlog::info(
      "ucudnn-worker {} starting: worker ids {}:<device>, lease {:.1f} s, heartbeat "
      "{:.1f} s, drain {:.1f} s, max attempts {}, workspace cap {}{}",
      UCUDNN_VERSION, config.id_prefix, options.lease_seconds, options.heartbeat_seconds,
      options.drain_seconds, options.max_attempts, FormatBytes(options.workspace_cap_bytes),
      options.once ? ", --once" : "");
  auto store = OpenStore(options, static_cast<int>(devices.size()), stop);
  if (!store.ok()) {
    if (stop.WaitFor(milliseconds(0))) {
      spdlog::info("stopped before the database was reachable; nothing was claimed");
      return 0;
    }
    spdlog::error("opening the database: {}", store.status().ToString());
    return 1;
  }
  if (const Status schema = CheckSchema(**store); !schema.ok()) {
    spdlog::error("{}", schema.ToString());
    return 1;
  }

  Daemon daemon(**store, std::move(devices), config);
  // Detached again before the daemon goes (declared after it, so destroyed first).
  const StatsSource::Attachment attached(stats_source, daemon);
  stop.Attach(&daemon);
  const Status result = daemon.Run();
  stop.Attach(nullptr);
  if (!result.ok()) {
    if (result.code() == StatusCode::kDeviceLost) {
      spdlog::critical("{}; exiting 1 for a supervisor to restart the worker", result.ToString());
    } else {
      spdlog::error("{}", result.ToString());
    }
    return 1;
  }
  return 0;
}

// ucudnn-worker --compile-helper GPU DIRECTORY: a compile helper (compile_pool.h), started by the
// worker itself, never by hand.
constexpr std::string_view kCompileHelperFlag = "--compile-helper";

int RunCompileHelper(int argc, char** argv) {
  LogToStderr("ucudnn-worker compile helper");
  spdlog::set_level(spdlog::level::warn);
  if (argc != 4) {
    spdlog::error("usage: ucudnn-worker --compile-helper GPU DIRECTORY (started by the worker)");
    return 2;
  }
  Result<int> gpu = ParseInteger<int>("GPU", argv[2], 0, 1 << 16);
  if (!gpu.ok()) {
    spdlog::error("{}", gpu.status().message());
    return 2;
  }
  // The answers get stdout's pipe to themselves: anything else printing to stdout (a cuDNN API
  // log sent there by CUDNN_LOGDEST_DBG=stdout) goes to stderr, the worker's log.
  const int answers_fd = dup(STDOUT_FILENO);
  std::FILE* answers = answers_fd >= 0 ? fdopen(answers_fd, "w") : nullptr;
  if (answers == nullptr || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    spdlog::error("compile helper: cannot set up its output: {}", std::strerror(errno));
    return 1;
  }
  return RunPlanCompileHelper(*gpu, argv[3], stdin, answers);
}

// The compile helpers of a cuDNN worker (--compile-processes), serving its first GPU: the plans
// they build go into the compiled-plan store under that GPU model's key, so they serve every GPU
// only where all are of one model. Null when off.
std::shared_ptr<CompilePool> StartCompilePool(const WorkerOptions& options,
                                              std::vector<BenchmarkDevice>& devices) {
  if (options.backend == "cpu" || devices.empty()) return nullptr;
  const int processes =
      CompileProcesses(options.compile_processes,
                       static_cast<int>(std::thread::hardware_concurrency()), CgroupMemoryLimit());
  if (processes == 0) return nullptr;
  if (options.compiled_plan_cache.empty()) {
    spdlog::info("no compile helpers: they build into --compiled-plan-cache, which is off");
    return nullptr;
  }
  if (const Status writable = CompiledPlanStore(options.compiled_plan_cache).CheckWritable();
      !writable.ok()) {
    spdlog::warn("no compile helpers (they build into --compiled-plan-cache): {}",
                 writable.message());
    return nullptr;
  }
  for (const BenchmarkDevice& d : devices) {
    if (d.backend->fingerprint().Key() != devices.front().backend->fingerprint().Key()) {
      spdlog::info("no compile helpers: the GPUs are of more than one model or cuDNN");
      return nullptr;
    }
  }
  const int gpu = options.gpus.empty() ? 0 : options.gpus.front();
  CompilePoolConfig config;
  config.command = {"/proc/self/exe", std::string(kCompileHelperFlag), std::to_string(gpu),
                    options.compiled_plan_cache};
  config.processes = processes;
  spdlog::info(
      "compile helpers: up to {} processes on GPU {} build runtime-compiled plans into {} "
      "(--compile-processes)",
      processes, gpu, options.compiled_plan_cache);
  auto pool = std::make_shared<CompilePool>(std::move(config));
  UsePlanCompiler(pool);
  // A helper starting up showed as another process at work on the GPU (an H200: one pause of
  // 4-5 s per model), so the gates know them.
  for (BenchmarkDevice& d : devices) {
    if (d.gate == nullptr) continue;
    d.gate->SetOwnProcesses([weak = std::weak_ptr<CompilePool>(pool)] {
      const std::shared_ptr<CompilePool> alive = weak.lock();
      return alive != nullptr ? alive->pids() : std::vector<uint32_t>{};
    });
  }
  return pool;
}

// The compile helpers stopped when the worker's mode returns.
struct CompilePoolScope {
  std::shared_ptr<CompilePool> pool;
  ~CompilePoolScope() {
    if (pool == nullptr) return;
    UsePlanCompiler(nullptr);
    const CompilePool::Counts c = pool->counts();
    spdlog::info(
        "compile helpers: {} plans built, {} failed, {} dropped, {} processes started, {} waits "
        "({:.1f} s)",
        c.built, c.failed, c.dropped, c.helpers_started, c.awaited, c.awaited_s);
  }
};

}  // namespace

int WorkerMain(int argc, char** argv) {
  if (argc >= 2 && argv[1] == kCompileHelperFlag) return RunCompileHelper(argc, argv);
  auto command_line = ParseCommandLine(argc, argv);
  if (!command_line.ok()) {
    std::fprintf(stderr, "ucudnn-worker: %s\nRun 'ucudnn-worker --help' for the flags.\n",
                 command_line.status().message().c_str());
    return 2;
  }
  if (command_line->help) {
    std::fputs(command_line->help_text.c_str(), stdout);
    return 0;
  }
  const WorkerOptions& options = command_line->options;
  // Logs go to stderr; stdout stays for --help.
  LogToStderr("ucudnn-worker");
  spdlog::set_level(spdlog::level::from_str(options.log_level));

  StopControl stop;
  auto signals = StopSignals::Install(
      [&stop](int signal_number, int count) { stop.OnSignal(signal_number, count); });
  if (!signals.ok()) {
    spdlog::error("{}", signals.status().ToString());
    return 1;
  }

  auto devices = MakeBenchmarkDevices(options);
  if (!devices.ok()) {
    spdlog::error("{}", devices.status().message());
    return devices.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  LogDevices(*devices);
  WarnAboutTf32Override(*devices);
  const CompilePoolScope compile_helpers{StartCompilePool(options, *devices)};
  if (options.offline) return RunOfflineMode(options, *devices, stop);
  return RunDaemonMode(options, std::move(devices).value(), stop, compile_helpers.pool.get());
}

}  // namespace ucudnn::worker
