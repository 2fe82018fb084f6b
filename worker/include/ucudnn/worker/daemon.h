// The worker daemon's claim loop: one benchmarking thread per device, each registered as its own
// worker, claiming the jobs of its device fingerprint, renewing the lease while it benchmarks, and
// writing the timings and the job's completion in one transaction. A heartbeat thread keeps the
// workers alive in the catalog. Every store call may answer kUnavailable (database away): the
// loop backs off and retries, and keeps its job as long as the store still counts it the holder.
// A device that is lost while benchmarking (BenchmarkProblem answers kDeviceLost: a sticky CUDA
// error) gives its job back untouched and its thread stops; when no device is left the daemon
// stops, and Run() reports the loss so the process exits non-zero and its supervisor restarts it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/status.h"
#include "ucudnn/engine/benchmark.h"
#include "ucudnn/store/store.h"
#include "ucudnn/worker/compile_helper_counts.h"
#include "ucudnn/worker/idle_gate.h"

namespace ucudnn::worker {

// One benchmarking thread's device.
struct BenchmarkDevice {
  BenchmarkDevice() = default;
  BenchmarkDevice(std::string slot_name, std::unique_ptr<ConvBackend> device_backend,
                  std::unique_ptr<IdleGate> idle_gate = nullptr)
      : slot(std::move(slot_name)),
        backend(std::move(device_backend)),
        gate(std::move(idle_gate)) {}
  std::string slot;  // "gpu0", "gpu1", "cpu": the suffix of the worker id
  std::unique_ptr<ConvBackend> backend;
  // When set (--idle-gate), the slot claims only while the device is idle and its benchmark
  // pauses while other work runs on it, keeping its lease and what it measured (idle_gate.h).
  std::unique_ptr<IdleGate> gate;
};

struct DaemonConfig {
  std::string id_prefix;  // worker ids are id_prefix + ":" + slot ("host:1234:gpu0")
  std::string host;       // recorded with the worker registration
  std::chrono::milliseconds lease{60000};
  std::chrono::milliseconds heartbeat{10000};
  std::chrono::milliseconds poll{2000};  // idle wait when nothing is claimable
  // The database to LISTEN on for queued jobs (store::kJobsChannel): a slot whose queue was empty
  // claims as soon as a job of its device is queued or released, not at its next poll (on an
  // H200, a cold model's jobs came in bursts and the worker sat out 2 s polls between them).
  // Empty: polling only. Notifications that cannot be had (database away) leave the polls.
  std::string jobs_listen_url;
  std::chrono::milliseconds drain{60000};  // after RequestStop: time the job in hand may take
  // Back-off between retries of a store call that answered kUnavailable (doubles up to max).
  std::chrono::milliseconds retry_initial{200};
  std::chrono::milliseconds retry_max{5000};
  // A progress line per job at most this often (each configuration is logged at debug).
  std::chrono::milliseconds progress_log_interval{5000};
  int max_attempts = 3;
  bool once = false;           // stop each thread when its device has nothing claimable
  BenchmarkOptions benchmark;  // `cancel` is ignored: the daemon sets its own per job
  // Skip at large micro-batch sizes the configurations that lost by a wide margin on every
  // nearby problem this device's done jobs measured (search_prior.h); off with --exhaustive.
  bool use_prior = true;
};

Status Validate(const DaemonConfig& config);

// What one benchmarking thread is doing, for the metrics endpoint.
struct SlotStatus {
  std::string worker_id;
  int64_t job_id = 0;               // the job in hand; 0 while idle
  int64_t configurations_done = 0;  // of that job
  int64_t configurations_total = 0;
};

// Counters over the daemon's life, for logs, tests and the metrics endpoint.
struct DaemonStats {
  int64_t claimed = 0;
  int64_t completed = 0;  // timings written and the job marked done (or re-queued when widened)
  int64_t failed = 0;     // benchmark errors recorded with FailJob
  int64_t released = 0;   // jobs given back on shutdown
  int64_t abandoned = 0;  // lease lost (or shutdown while the database was away): nothing written
  int64_t devices_lost = 0;  // benchmarking threads stopped by a lost device (their job released)
  int64_t idle_gate_pauses = 0;  // benchmarks paused, and claims put off, for other work on a GPU
  int64_t configurations_measured = 0;     // (micro-batch, algorithm) pairs benchmarked, all jobs
  double last_heartbeat_unix_seconds = 0;  // last heartbeat (or registration) stored; 0: none
  bool schema_too_new = false;    // the database's schema is newer than this binary's: not claiming
  std::vector<SlotStatus> slots;  // in device order
  // The compile helpers (compile_pool.h), filled in by whoever has them; absent when off.
  std::optional<CompileHelperCounts> compile_helpers;
};

class Daemon {
 public:
  // `store` must outlive the daemon. Each device gets its own thread and worker id.
  Daemon(store::Store& store, std::vector<BenchmarkDevice> devices, DaemonConfig config);
  ~Daemon();  // Run() must have returned
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Registers each device's worker and runs the claim loops until RequestStop() (then drains),
  // or with `once` until no device has a claimable job, or until every device was lost. Returns
  // an error only for what retrying cannot fix: invalid configuration, a worker registration the
  // store rejects as invalid, or a lost device (kDeviceLost, naming each one; a restart of the
  // process is what can bring a device back). Call once.
  Status Run();

  // Thread-safe; not async-signal-safe (call it from a signal-watching thread). Stops claiming;
  // the job in hand may finish within `drain` (counted from the first call), else it is
  // cancelled and released. A second call (`immediate`) cuts the drain short.
  void RequestStop(bool immediate = false);
  bool stop_requested() const;

  // "prefix:slot" for each device, in device order.
  std::vector<std::string> worker_ids() const;
  // The fingerprint hashes the daemon claims for (one per device; equal for identical GPUs).
  std::vector<uint64_t> device_hashes() const;
  DaemonStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Whether a CompleteJob(claimed.id, worker_id, timings) committed although its reply was lost,
// judged from what the store holds afterwards: the job (`now`) and the problem's timing rows. The
// job done with worker_id as its holder says so; a job re-queued by that completion because it
// was widened meanwhile has no holder (and may since be running or done under another worker), so
// then every (micro-batch, algorithm) of `timings` must be a row measured by worker_id at or after
// the claim (claimed.updated_at). False while worker_id still holds the job. Exposed for tests.
bool CompletionCommitted(const store::Job& claimed, const store::Job& now,
                         const std::vector<store::TimingRecord>& records,
                         const std::vector<Timing>& timings, const std::string& worker_id);

// "host:pid" of this process.
std::string DefaultWorkerIdPrefix();
std::string HostName();

}  // namespace ucudnn::worker
