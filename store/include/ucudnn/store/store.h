// The benchmark store: devices, problems, timings, benchmark jobs, workers and the plan cache in
// PostgreSQL (docs/design.md, "Data model"). The only face of the store library: no libpqxx type
// appears here, so the server, the worker daemon and the CLI include this header without pqxx.
//
// Errors are values. Every call catches libpqxx's exceptions and answers a Status:
//   kUnavailable        the database is down or the connection broke (retry later; the pool
//                       replaces broken connections itself, with exponential back-off);
//   kInvalidArgument    the input is wrong (the message names the field) or violates a constraint;
//   kAlreadyExists      a unique key would be duplicated (e.g. a 64-bit hash collision);
//   kNotFound           the job / worker / device named does not exist;
//   kFailedPrecondition the schema is newer than this binary, not migrated yet, a lease was lost,
//                       or the database is read-only (SQLSTATE 25006);
//   kResourceExhausted  the database disk is full (SQLSTATE 53100) or out of connections;
//   kInternal           anything else (the SQLSTATE is in the message).
//
// Hashes (device fingerprint hash, problem StableHash, plan content hash) are uint64 in C++ and
// stored as BIGINT by bit-cast, so every value round-trips exactly.
// Timestamps are RFC 3339 strings in UTC with microseconds: "2024-05-01T12:34:56.123456Z".
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"

namespace ucudnn::store {

// ---- Small helpers ---------------------------------------------------------------------------

// 16 lowercase hex digits, zero-padded: the form hashes take in the API, logs and notifications.
std::string FormatHash(uint64_t hash);
// Parses 1 to 16 hex digits (either case); kInvalidArgument otherwise.
Result<uint64_t> ParseHash(std::string_view hex);

// Bounds the store enforces on input (besides Validate(ConvProblem) / Validate(fingerprint)).
inline constexpr size_t kMaxTimingsPerWrite = 100000;
inline constexpr size_t kMaxMeasuredByBytes = 128;
inline constexpr size_t kMaxWorkerIdBytes = 128;  // a worker id is also a measured_by
inline constexpr size_t kMaxErrorBytes = 4096;    // longer job/timing errors are truncated
inline constexpr size_t kMaxPlanBytes = 64u << 20;
// Claims per job before a job whose leases keep expiring is failed (ClaimJob); the worker's
// --max-attempts default, which FailJob applies to reported failures.
inline constexpr int kDefaultMaxAttempts = 3;
// Problems one EnqueueJobs call takes.
inline constexpr size_t kMaxJobsPerEnqueue = 4096;
// The largest workspace limit a job carries: 1 TiB, the plan request contract's largest
// per-kernel limit (proto's kMaxWorkspaceBytes; the jobs table's CHECK).
inline constexpr uint64_t kMaxJobWorkspaceLimit = uint64_t{1} << 40;

// ---- Values returned by the store ------------------------------------------------------------

// A benchmark job's life: queued -> running -> done, or back to queued (failure with attempts
// left, lease expired and re-claimed, released on shutdown), or failed after max attempts.
enum class JobState { kQueued = 0, kRunning = 1, kDone = 2, kFailed = 3 };
std::string_view ToString(JobState s);  // "queued" "running" "done" "failed"
Result<JobState> ParseJobState(std::string_view s);

// One stored timing with its provenance.
struct TimingRecord {
  Timing timing;
  std::string measured_by;  // worker id, or "import:FILE", or whatever PutTimings was given
  std::string measured_at;  // RFC 3339
  // What the worker saw while measuring (Timing::conditions as stored, a JSON object);
  // {"idle_gate": "unknown"} for rows from before the column and from writers that say nothing.
  std::string conditions;
};

// One problem's timings, for batched writes (ImportTimings).
struct ProblemTimings {
  ConvProblem problem;
  std::vector<Timing> timings;
};

struct Job {
  int64_t id = 0;
  JobState state = JobState::kQueued;
  uint64_t device_hash = 0;  // DeviceFingerprint::Hash() of the device it must run on
  ConvProblem problem;
  uint64_t problem_hash = 0;  // StableHash(problem)
  int64_t max_micro_batch = 0;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  // The per-kernel workspace limit it is measured for: only the micro-batch sizes of the policy
  // that limit can use are timed (SizesForLimit, core/size_rule.h). std::nullopt: every size
  // of the policy. For a job returned by ClaimJob, the limit claimed (what the worker measures
  // for); otherwise the current one, which EnqueueJob may have widened since.
  std::optional<uint64_t> workspace_limit = std::nullopt;
  std::string worker_id;  // holder of the lease when running; last holder when done/failed
  int attempts = 0;       // claims so far (a release on shutdown gives its attempt back)
  std::string error;      // last failure, if any
  std::string created_at;
  std::string updated_at;
  std::string lease_expires_at;  // empty unless running
  // Running, but the lease ran out (its worker died or hung): the next ClaimJob of the device
  // takes it again, or fails it when its attempts are used up. Listed as "expired".
  bool lease_expired = false;
};

// One problem to be benchmarked, for EnqueueJobs.
struct JobRequest {
  ConvProblem problem;
  int64_t max_micro_batch = 0;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  // The per-kernel workspace limit to measure for, at most kMaxJobWorkspaceLimit (Job's
  // workspace_limit); std::nullopt: every micro-batch size of the policy.
  std::optional<uint64_t> workspace_limit = std::nullopt;
};

// What EnqueueJob did.
struct EnqueueResult {
  // kQueued or kRunning: the one live job. kFailed: nothing was enqueued because the newest job
  // of the problem failed within StoreOptions::failed_job_cooldown; job_id is that job and
  // `error` its error (RetryJob re-queues it sooner). kDone: a job that just finished covers it.
  int64_t job_id = 0;
  JobState state = JobState::kQueued;
  bool created = false;  // a new job was inserted
  // An existing live job's max_micro_batch, policy or workspace_limit was widened.
  bool widened = false;
  std::string error;  // the failed job's error when state is kFailed
};

struct DeviceInfo {
  uint64_t hash = 0;  // the device's key (== fingerprint.Hash())
  DeviceFingerprint fingerprint;
  int64_t timing_count = 0;
  int live_workers = 0;  // workers with a heartbeat within StoreOptions::worker_alive_window
  std::string first_seen;
};

struct WorkerInfo {
  std::string id;
  std::string host;
  DeviceFingerprint device;
  uint64_t device_hash = 0;
  std::string registered_at;
  std::string last_heartbeat;
  bool alive = false;  // heartbeat within StoreOptions::worker_alive_window
  int64_t jobs_done = 0;
};

// Job counts of one device, for metrics.
struct DeviceJobCounts {
  uint64_t device_hash = 0;
  std::string device_name;
  int64_t queued = 0;
  int64_t running = 0;
  int64_t done = 0;
  int64_t failed = 0;
  int64_t expired = 0;  // running with an expired lease (not counted in `running`)
};

struct MigrationSummary {
  int from_version = 0;              // schema version found
  int to_version = 0;                // schema version now (== LatestSchemaVersion() on success)
  std::vector<std::string> applied;  // "0001_init" ... in order; empty when already current
};

struct PoolStats {
  int size = 0;              // configured connections
  int open = 0;              // connections currently established
  int in_use = 0;            // connections lent out now
  int64_t connects = 0;      // successful connects since Open (first ones included)
  int64_t broken = 0;        // connections found broken and dropped
  bool backing_off = false;  // the last connect failed; the next try waits for the back-off
};

struct StoreOptions {
  // libpq connection string or URI: "postgresql://user@host:5432/db" or "host=... dbname=...".
  // Unless the URL sets them, connections use connect_timeout=10 and TCP keepalives
  // (keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3) plus
  // tcp_user_timeout=60000, so a network partition breaks a connection within about a minute
  // instead of blocking a call forever (see WithConnectionDefaults).
  std::string url;
  int pool_size = 4;  // 1..256 connections, opened lazily on demand
  // How long a call waits for a free connection before answering kUnavailable.
  std::chrono::milliseconds acquire_timeout{10000};
  // Reconnect back-off: after a failed connect, calls answer kUnavailable at once until the
  // back-off passed; it doubles from initial to max per failure and resets on success.
  std::chrono::milliseconds reconnect_backoff_initial{100};
  std::chrono::milliseconds reconnect_backoff_max{5000};
  // Server-side statement_timeout per connection; 0 keeps the server's default.
  std::chrono::milliseconds statement_timeout{30000};
  // A worker is alive when its last heartbeat is at most this old.
  std::chrono::seconds worker_alive_window{60};
  // EnqueueJob does not enqueue a problem again while its newest job failed less than this long
  // ago: it answers that failed job instead, so a failing benchmark is not retried by every plan
  // request. 0 re-enqueues at once. RetryJob re-queues a failed job any time.
  std::chrono::seconds failed_job_cooldown{3600};
  // GetCachedPlan moves a plan's last_used_at (the eviction order) at most this often, so a
  // popular plan does not cost a row update per hit.
  std::chrono::seconds plan_touch_interval{60};
};

// The connection string with the defaults of StoreOptions::url added for every parameter it does
// not set (URI or key=value form). kInvalidArgument when libpq cannot parse it.
Result<std::string> WithConnectionDefaults(const std::string& url);

// The connection string as it may be logged or shown: parsed by libpq's own parser
// (PQconninfoParse, URI and key=value forms alike), so a password however written
// ("postgresql://u:p@h/db", "?password=p", "password = 'p w'") is found. Without a secret
// (password, sslpassword) the string is returned as given; with one, as the parsed key=value
// pairs with each secret shown as ***. A string libpq cannot parse is not echoed at all.
std::string RedactConnectionString(std::string_view url);

// ---- The store -------------------------------------------------------------------------------

// Thread-safe: any number of threads may call any method at once; each call borrows one pooled
// connection for its duration. Every write runs in one transaction.
class Store {
 public:
  // Checks options and that the database can be reached (pooled connections then open lazily).
  // kInvalidArgument for a malformed URL or bad options, kUnavailable when the database cannot
  // be reached (callers may retry Open).
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  static Result<std::unique_ptr<Store>> Open(const std::string& url, int pool_size = 4);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // ---- Schema ----
  // Applies the embedded migrations newer than the database's version, in order, each in its
  // own transaction, recorded in schema_migrations(version, name, applied_at). Concurrent
  // migrators serialise on a transaction-level advisory lock, so each migration is applied once.
  // Already current: a no-op with an empty `applied`. A database whose newest version is newer
  // than LatestSchemaVersion() is refused with kFailedPrecondition (upgrade the binary).
  // `up_to`: stop after that version (a data-only dump restored into the schema it was taken
  // from, then migrated the rest of the way, so that data migrations apply to its rows);
  // kInvalidArgument outside [1, LatestSchemaVersion()].
  Result<MigrationSummary> Migrate(std::optional<int> up_to = std::nullopt);
  // The newest applied version; 0 for an empty database (no schema_migrations table).
  Result<int> SchemaVersion();
  // The newest version embedded in this binary.
  static int LatestSchemaVersion();
  // Re-reads the schema version (one query), for a running server or worker: a schema newer than
  // this binary's makes the store refuse every write from then on with kFailedPrecondition
  // (logged once, as an error) until a later re-check finds a schema it knows again. Returns
  // that kFailedPrecondition while the schema is newer, the database's error when it cannot be
  // read (nothing changes then), else OK.
  Status RecheckSchema();
  // Whether writes are refused because the last re-check found a newer schema.
  bool schema_too_new() const;
  // kOk when a round trip to the database works; for health checks.
  Status Ping();
  PoolStats GetPoolStats() const;

  // ---- Devices and problems ----
  // Inserts the device if new; returns its key (fingerprint.Hash()). kInvalidArgument for an
  // invalid fingerprint, kAlreadyExists when another fingerprint already owns the same hash.
  Result<uint64_t> UpsertDevice(const DeviceFingerprint& fingerprint);
  // Whether a device row with this key (fingerprint.Hash()) exists.
  Result<bool> DeviceExists(uint64_t device_hash);
  // Inserts the problem if new; returns its key (StableHash(problem)). kInvalidArgument for an
  // invalid problem, kAlreadyExists on a hash collision with a different canonical key.
  Result<uint64_t> UpsertProblem(const ConvProblem& problem);

  // ---- Timings ----
  // Every timing of `problem` on `device`, ordered by (micro_batch, algo, engine_config). An
  // unknown device or problem is not an error: the table is empty.
  Result<TimingTable> GetTimings(const DeviceFingerprint& device, const ConvProblem& problem);
  // The same with who measured each timing and when.
  Result<std::vector<TimingRecord>> GetTimingRecords(const DeviceFingerprint& device,
                                                     const ConvProblem& problem);
  // Timings of many problems in one round trip (a whole network). result[i] belongs to
  // problems[i]; duplicates in `problems` are allowed; a problem without timings gets an empty
  // table.
  Result<std::vector<TimingTable>> GetTimingsForProblems(const DeviceFingerprint& device,
                                                         const std::vector<ConvProblem>& problems);
  // Upserts the timings (key: device, problem, micro_batch, algo, engine_config; a re-measurement
  // replaces the old row), creating device and problem rows as needed, all in one transaction
  // that also NOTIFYs channel "ucudnn_timings" (see Listener). `timings` must hold
  // 1..kMaxTimingsPerWrite entries with unique (micro_batch, algo, engine_config), micro_batch in
  // [1, kMaxBatch], algorithms that pass CheckAlgorithm(), finite non-negative times,
  // workspace_bytes <= INT64_MAX; measured_by at most kMaxMeasuredByBytes.
  Status PutTimings(const DeviceFingerprint& device, const ConvProblem& problem,
                    const std::vector<Timing>& timings, const std::string& measured_by);
  // PutTimings for many problems in ONE transaction (all or nothing), for `ucudnn import`.
  // One notification per problem. Queued jobs of the device whose every micro-batch size now has
  // a timing are marked done in the same transaction. Returns the number of timing rows written:
  // like every write of timings, a worker-limit row (kWorkerLimitError) never replaces a kOk one.
  Result<int64_t> ImportTimings(const DeviceFingerprint& device,
                                const std::vector<ProblemTimings>& problems,
                                const std::string& measured_by);

  // ---- Benchmark jobs ----
  // Asks for `problem` to be benchmarked on `device` up to `max_micro_batch` with `policy`, for
  // the per-kernel `workspace_limit` (at most kMaxJobWorkspaceLimit; std::nullopt: every size of
  // the policy). Idempotent: at most one live (queued or running) job exists per (device,
  // problem), enforced by a partial unique index, so any number of concurrent callers make
  // exactly one. When a live job exists its max_micro_batch is raised to the larger of the two,
  // its policy widened (undivided < power_of_two < all) and its workspace_limit widened to the
  // smaller of the two (a smaller limit needs more sizes; std::nullopt is wider than any); a
  // running job so widened is re-queued by CompleteJob so the missing sizes get measured.
  // Creates device/problem rows as needed. Without a live job, a newest job that failed within
  // StoreOptions::failed_job_cooldown is answered (kFailed, with its error) instead of a new one.
  // kDone answers a request whose policy's sizes up to max_micro_batch all have timings (whatever
  // its limit: a limit's sizes are among them), or one that a job which finished a moment ago
  // covers: its max_micro_batch, policy and workspace_limit each at least as wide (a limit L
  // covers the limits >= L, not std::nullopt; std::nullopt covers every limit).
  Result<EnqueueResult> EnqueueJob(const DeviceFingerprint& device, const ConvProblem& problem,
                                   int64_t max_micro_batch, BatchPolicy policy,
                                   std::optional<uint64_t> workspace_limit = std::nullopt);
  // EnqueueJob for many problems of one device in ONE transaction (all or nothing); result[i]
  // belongs to jobs[i]. At most kMaxJobsPerEnqueue entries; a problem may appear more than once
  // (its widest request counts: largest max_micro_batch, widest policy, widest workspace_limit).
  Result<std::vector<EnqueueResult>> EnqueueJobs(const DeviceFingerprint& device,
                                                 const std::vector<JobRequest>& jobs);
  // Claims the oldest claimable job of the device `device_hash` for `worker_id`: queued jobs and
  // running jobs whose lease expired (a dead worker's). Uses FOR UPDATE SKIP LOCKED, so
  // concurrent claimers never get the same job. Increments attempts, sets the lease to
  // now + `lease` and records what the worker is asked to measure (the returned Job's
  // max_micro_batch, policy and workspace_limit) for CompleteJob. std::nullopt when nothing is
  // claimable. The worker must be registered (kFailedPrecondition otherwise). First, in the
  // same transaction, every job of the device whose lease expired after `max_attempts` claims is
  // marked failed ("lease expired on attempt 3 of 3 ... (worker died?)"), so a job that kills its
  // workers does not circulate forever.
  Result<std::optional<Job>> ClaimJob(uint64_t device_hash, const std::string& worker_id,
                                      std::chrono::milliseconds lease,
                                      int max_attempts = kDefaultMaxAttempts);
  // Extends the lease of a running job held by `worker_id` to now + `lease`.
  // kFailedPrecondition when the worker no longer holds it (another worker re-claimed it, or it
  // is no longer running), kNotFound for an unknown job. A lease that ran out but that no other
  // worker took yet is still held.
  Status RenewLease(int64_t job_id, const std::string& worker_id, std::chrono::milliseconds lease);
  // Writes the job's timings (measured_by = worker_id) and marks it done, in ONE transaction,
  // only if `worker_id` still holds the job; otherwise kFailedPrecondition and nothing is
  // written. If the job was widened while running (EnqueueJob: a larger max_micro_batch, a wider
  // policy, or a workspace_limit smaller than the one claimed, or none where one was claimed),
  // the timings are still written and the job goes back to queued for the remaining sizes.
  // NOTIFYs like PutTimings. Returns the job's new state (kDone, or kQueued when widened).
  Result<JobState> CompleteJob(int64_t job_id, const std::string& worker_id,
                               const std::vector<Timing>& timings);
  // Records a failed attempt: back to queued when attempts < max_attempts, else failed. Same
  // lease rule as CompleteJob. Returns the new state.
  Result<JobState> FailJob(int64_t job_id, const std::string& worker_id, const std::string& error,
                           int max_attempts);
  // Gives the job back untouched (worker shutting down): queued again, its attempt not counted.
  // Same lease rule as CompleteJob.
  Status ReleaseJob(int64_t job_id, const std::string& worker_id);
  // One job; kNotFound when unknown.
  Result<Job> GetJob(int64_t job_id);
  // The jobs of `job_ids` that exist, by id; one query for all.
  Result<std::vector<Job>> GetJobs(const std::vector<int64_t>& job_ids);
  // Operators: puts a failed job back in the queue with its attempts reset (its last error
  // stays until it completes or fails again) and returns it. kNotFound for an unknown job,
  // kFailedPrecondition when it is not failed or another job of its problem is live already.
  Result<Job> RetryJob(int64_t job_id);
  // Operators: deletes queued jobs and returns them as they were: the one job `job_id` when
  // positive (kNotFound when unknown, kFailedPrecondition when it is not queued), else every
  // queued job, of `device_hash` only when given. Deleted rather than marked: a cancelled job
  // holds no result worth keeping, and a later plan request enqueues its problem afresh as for
  // any problem never asked for. Running jobs are left to finish.
  Result<std::vector<Job>> CancelQueuedJobs(int64_t job_id, std::optional<uint64_t> device_hash);

  // ---- Workers ----
  // Inserts or updates the worker (host, device), upserting the device row; counts as a
  // heartbeat. worker_id 1..kMaxWorkerIdBytes bytes.
  Status RegisterWorker(const std::string& worker_id, const std::string& host,
                        const DeviceFingerprint& device);
  // Sets the worker's last heartbeat to now; kNotFound when it never registered.
  Status Heartbeat(const std::string& worker_id);
  // A clean shutdown: the worker is listed stopped (not alive) at once, until it registers
  // again; kNotFound when it never registered.
  Status MarkWorkerStopped(const std::string& worker_id);
  // Deletes the rows of workers without a heartbeat for longer than `retention` (>= 1 s), except
  // one a running job still names; returns how many went. Their jobs keep no worker id.
  Result<int64_t> PruneWorkers(std::chrono::seconds retention);

  // ---- Catalog (operators, metrics) ----
  // Every device of this fingerprint key version (kFingerprintKeyVersion: older ones hold
  // timings of an older method), ordered by name then hash, with timing counts and live workers.
  Result<std::vector<DeviceInfo>> ListDevices();
  // Registered workers ordered by id; only those alive when `alive_only`.
  Result<std::vector<WorkerInfo>> ListWorkers(bool alive_only = false);
  // Jobs newest first, optionally in one state; limit in [1, 10000] (others -> kInvalidArgument).
  // kRunning lists only running jobs whose lease is current.
  Result<std::vector<Job>> ListJobs(std::optional<JobState> state, int limit);
  // The same by name: "" (all), "queued", "running", "done", "failed", or "expired" (running
  // with an expired lease).
  Result<std::vector<Job>> ListJobs(std::string_view state, int limit);
  // Live jobs (queued + running) in total.
  Result<int64_t> QueueDepth();
  // Job counts per device (devices without jobs omitted), ordered by device hash.
  Result<std::vector<DeviceJobCounts>> JobCountsByDevice();

  // ---- Plan cache ----
  // The cached serialised plan stored under `plan_hash`, or std::nullopt. Moves last_used_at
  // when it is older than StoreOptions::plan_touch_interval. The hash is only 64 bits: callers
  // check that the plan answers their request (PlanCoordinator does).
  Result<std::optional<std::string>> GetCachedPlan(uint64_t plan_hash);
  // Stores the serialised plan `bytes` (at most kMaxPlanBytes) under `plan_hash`, for the device
  // `device` (upserted). A plan already stored under the hash is kept (first writer wins): a
  // colliding request can never replace another's plan.
  Status PutCachedPlan(uint64_t plan_hash, const DeviceFingerprint& device,
                       const std::string& bytes);
  // Deletes, per device, the least recently used plans beyond `max_plans_per_device` (>= 1) and
  // returns how many went. One replica at a time does the work (advisory lock); a concurrent
  // call returns 0 at once.
  Result<int64_t> EvictPlans(int64_t max_plans_per_device);

  class Impl;  // defined in the library; public only so the library's files can name it

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// For binaries that must not migrate (the server's --no-migrate): OK when `database_version`
// (Store::SchemaVersion()) is exactly Store::LatestSchemaVersion(); kFailedPrecondition
// otherwise, with Migrate()'s message for a database newer than the binary ("... is newer than
// this binary's newest ...: upgrade ucudnn ...") and one that says to migrate for an older one.
Status CheckSchemaVersion(int database_version);

// ---- Notifications ---------------------------------------------------------------------------

// The channel PutTimings / ImportTimings / CompleteJob notify after their commit; the payload is
// "<device hash>:<problem hash>" in FormatHash form.
inline constexpr std::string_view kTimingsChannel = "ucudnn_timings";
// The channel every path that puts a job in the queue notifies after its commit (EnqueueJobs
// when it queued or widened one, CompleteJob when the job was widened meanwhile, FailJob when it
// re-queues, ReleaseJob, RetryJob), with the same payload: the device whose workers may claim,
// and one problem.
inline constexpr std::string_view kJobsChannel = "ucudnn_jobs";

struct ProblemNotification {
  uint64_t device_hash = 0;
  uint64_t problem_hash = 0;
  bool operator==(const ProblemNotification&) const = default;
};

// Listens on one channel (kTimingsChannel, kJobsChannel) over its own dedicated connection (not
// from the pool). Not thread-safe: one thread waits on it. Reconnects by itself after the
// database restarted.
class Listener {
 public:
  // Connects and LISTENs. kUnavailable when the database is down, kInvalidArgument for a
  // malformed URL.
  static Result<std::unique_ptr<Listener>> Open(const std::string& url,
                                                std::string_view channel = kTimingsChannel);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Waits up to `timeout` for notifications and returns every one that arrived (possibly
  // several; empty on timeout). kUnavailable when the connection broke or cannot be
  // re-established; the next call reconnects. Notifications sent while the listener was
  // disconnected are lost, so after a kUnavailable re-read whatever you are waiting for.
  Result<std::vector<ProblemNotification>> WaitForNotification(std::chrono::milliseconds timeout);

  class Impl;

 private:
  explicit Listener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ucudnn::store
