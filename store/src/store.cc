// The repository layer: every operation of store.h as parameterised, prepared statements over a
// pooled connection, each write in one transaction.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <map>
#include <pqxx/except>
#include <pqxx/nontransaction>
#include <pqxx/pqxx>
#include <pqxx/transaction>
#include <string>
#include <unordered_map>
#include <utility>

#include "store_impl.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/enum_names.h"
#include "values.h"

namespace ucudnn::store {

using internal::FromDb;
using internal::ToDb;

namespace {

// ---- SQL ---------------------------------------------------------------------------------------
// Statement texts are constants; values always travel as bound parameters ($n).

std::string ProblemColumns(const std::string& t) {
  std::string out;
  for (const char* c : {"op",         "c",        "h",         "w",
                        "k",          "r",        "s",         "pad_h",
                        "pad_w",      "stride_h", "stride_w",  "dilation_h",
                        "dilation_w", "groups",   "data_type", "compute_type",
                        "layout",     "math",     "d",         "t",
                        "pad_d",      "stride_d", "dilation_d"}) {
    if (!out.empty()) out += ", ";
    out += t + "." + c;
  }
  return out;
}

std::string DeviceColumns(const std::string& t) {
  std::string out;
  for (const char* c : {"backend", "name", "cc_major", "cc_minor", "sm_count", "memory_bytes",
                        "cudnn_version", "cuda_runtime_version", "blas"}) {
    if (!out.empty()) out += ", ";
    out += t + "." + c;
  }
  return out;
}

std::string JobColumns() {
  using internal::TimestampSql;
  return "j.id, j.state, j.device_id, j.problem_id, j.max_micro_batch, j.policy, "
         "j.workspace_limit, coalesce(j.worker_id, '') AS worker_id, j.attempts, j.error, " +
         TimestampSql("j.created_at") + " AS created_at, " + TimestampSql("j.updated_at") +
         " AS updated_at, coalesce(" + TimestampSql("j.lease_expires_at") +
         ", '') AS lease_expires_at, "
         "(j.state = 'running' AND j.lease_expires_at < now()) AS lease_expired, " +
         ProblemColumns("p");
}

// How a job shows in listings: a running job whose lease ran out is "expired".
constexpr const char* kDisplayStateSql =
    "CASE WHEN j.state = 'running' AND j.lease_expires_at < now() THEN 'expired' "
    "ELSE j.state END";

const std::string kTimingColumns =
    "micro_batch, algo, engine_config, time_ms, spread_ms, samples, workspace_bytes, status, "
    "error, measured_by, conditions::text AS conditions, " +
    internal::TimestampSql("measured_at") + " AS measured_at";

// Policies ordered narrow to wide, for widening a live job.
constexpr const char* kPolicyRank = "ARRAY['undivided', 'power_of_two', 'all']::text[]";

// Workspace limits widen the other way: a smaller one needs more micro-batch sizes, and NULL
// (every size) is wider than any (values.h, WidestWorkspaceLimit). The upsert's EXCLUDED row
// holds the request's.
constexpr const char* kWidestWorkspaceLimitSql =
    "CASE WHEN jobs.workspace_limit IS NULL OR EXCLUDED.workspace_limit IS NULL THEN NULL "
    "ELSE LEAST(jobs.workspace_limit, EXCLUDED.workspace_limit) END";
constexpr const char* kWorkspaceLimitWidensSql =
    "(jobs.workspace_limit IS NOT NULL AND (EXCLUDED.workspace_limit IS NULL OR "
    "EXCLUDED.workspace_limit < jobs.workspace_limit))";

struct Statement {
  const char* name;
  std::string sql;
};

const std::vector<Statement>& Statements() {
  static const std::vector<Statement> kStatements = {
      {"upsert_device",
       "INSERT INTO devices (id, fingerprint_key, backend, name, cc_major, cc_minor, sm_count, "
       "memory_bytes, cudnn_version, cuda_runtime_version, blas) "
       "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING"},
      {"device_key", "SELECT fingerprint_key FROM devices WHERE id = $1"},
      {"upsert_problem",
       "INSERT INTO problems (id, canonical_key, op, c, h, w, k, r, s, pad_h, pad_w, stride_h, "
       "stride_w, dilation_h, dilation_w, groups, data_type, compute_type, layout, math, d, t, "
       "pad_d, stride_d, dilation_d) "
       "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, "
       "$19, $20, $21, $22, $23, $24, $25) ON CONFLICT DO NOTHING"},
      {"problem_key", "SELECT canonical_key FROM problems WHERE id = $1"},
      {"put_timings",
       "INSERT INTO timings (device_id, problem_id, micro_batch, algo, engine_config, time_ms, "
       "spread_ms, samples, workspace_bytes, status, error, measured_by, measured_at, "
       "conditions) "
       "SELECT $1, $2, t.micro_batch, t.algo, t.engine_config, t.time_ms, t.spread_ms, "
       "t.samples, t.workspace_bytes, t.status, t.error, $11, now(), "
       "coalesce(nullif(t.conditions, '')::jsonb, '{\"idle_gate\": \"unknown\"}'::jsonb) "
       "FROM unnest($3::int[], $4::int[], $5::float8[], $6::float8[], $7::int[], $8::bigint[], "
       "$9::text[], $10::text[], $13::text[], $14::text[]) "
       "AS t(micro_batch, algo, time_ms, spread_ms, samples, workspace_bytes, status, error, "
       "engine_config, conditions) "
       "ON CONFLICT (device_id, problem_id, micro_batch, algo, engine_config) DO UPDATE SET "
       "time_ms = EXCLUDED.time_ms, spread_ms = EXCLUDED.spread_ms, samples = EXCLUDED.samples, "
       "workspace_bytes = EXCLUDED.workspace_bytes, status = EXCLUDED.status, "
       "error = EXCLUDED.error, measured_by = EXCLUDED.measured_by, "
       "measured_at = EXCLUDED.measured_at, conditions = EXCLUDED.conditions "
       // A worker's own limit (kWorkerLimitError, $12) never replaces a measurement: another
       // worker with a larger cap or more free memory measured that configuration. A
       // framework's own time (algo -2) is kept as first stored: the ranks of a job that
       // measure it at once then all plan with the same number, so decide alike.
       "WHERE NOT (EXCLUDED.status = 'failed' AND starts_with(EXCLUDED.error, $12) "
       "AND timings.status = 'ok') "
       "AND NOT (EXCLUDED.algo = -2 AND timings.status = 'ok')"},
      // $1: the channel (kTimingsChannel, kJobsChannel), $2: "<device hash>:<problem hash>".
      {"notify", "SELECT pg_notify($1, $2)"},
      // Engine keys sort byte-wise (COLLATE "C"): the same order on every database locale.
      {"get_timings", "SELECT " + kTimingColumns +
                          " FROM timings WHERE device_id = $1 AND problem_id = $2 "
                          "ORDER BY micro_batch, algo, engine_config COLLATE \"C\""},
      {"get_timings_many",
       "SELECT problem_id, " + kTimingColumns +
           " FROM timings WHERE device_id = $1 AND problem_id = ANY($2::bigint[]) "
           "ORDER BY problem_id, micro_batch, algo, engine_config COLLATE \"C\""},
      // Inserts the one live job, or widens the existing one; no row when it exists and
      // already covers the request.
      {"enqueue_job",
       std::string("INSERT INTO jobs (device_id, problem_id, max_micro_batch, policy, "
                   "workspace_limit) VALUES ($1, $2, $3, $4, $5) "
                   "ON CONFLICT (device_id, problem_id) WHERE state IN ('queued', 'running') "
                   "DO UPDATE SET "
                   "max_micro_batch = GREATEST(jobs.max_micro_batch, EXCLUDED.max_micro_batch), "
                   "policy = CASE WHEN array_position(") +
           kPolicyRank + ", EXCLUDED.policy) > array_position(" + kPolicyRank +
           ", jobs.policy) THEN EXCLUDED.policy ELSE jobs.policy END, "
           "workspace_limit = " +
           kWidestWorkspaceLimitSql +
           ", updated_at = now() "
           "WHERE jobs.max_micro_batch < EXCLUDED.max_micro_batch OR array_position(" +
           kPolicyRank + ", jobs.policy) < array_position(" + kPolicyRank +
           ", EXCLUDED.policy) OR " + kWorkspaceLimitWidensSql +
           " RETURNING id, state, (xmax = 0) AS created"},
      // The live job, else the newest one (it may have finished a moment ago). $3: the failed-job
      // cool-down in seconds; in_cooldown says whether a failed job is still within it.
      {"find_job_for_problem",
       std::string("SELECT id, state, max_micro_batch, array_position(") + kPolicyRank +
           ", policy) AS policy_rank, workspace_limit, error, "
           "(state = 'failed' AND finished_at > now() - make_interval(secs => $3::float8)) "
           "AS in_cooldown FROM jobs WHERE device_id = $1 AND problem_id = $2 "
           "ORDER BY (state IN ('queued', 'running')) DESC, id DESC LIMIT 1"},
      {"touch_worker", "UPDATE workers SET last_heartbeat = now() WHERE id = $1 RETURNING id"},
      // Jobs of the device whose lease expired on their last allowed attempt ($2) fail for good,
      // with the reason and the error of an earlier attempt, if any.
      {"fail_expired_jobs",
       "UPDATE jobs SET state = 'failed', lease_expires_at = NULL, updated_at = now(), "
       "finished_at = now(), "
       "error = 'lease expired on attempt ' || attempts || ' of ' || $2::int || ': worker ' || "
       "coalesce(worker_id, '(deregistered)') || ' stopped renewing it (worker died?)' || "
       "CASE WHEN error <> '' THEN '; earlier error: ' || left(error, 900) ELSE '' END "
       "WHERE id IN (SELECT id FROM jobs WHERE device_id = $1 AND state = 'running' "
       "             AND lease_expires_at < now() AND attempts >= $2::int "
       "             FOR UPDATE SKIP LOCKED) "
       "RETURNING id, attempts"},
      {"claim_job",
       "WITH claimed AS ("
       "  UPDATE jobs SET state = 'running', worker_id = $2, "
       "    lease_expires_at = now() + make_interval(secs => $3::float8 / 1000.0), "
       "    attempts = attempts + 1, claimed_max_micro_batch = max_micro_batch, "
       "    claimed_policy = policy, claimed_workspace_limit = workspace_limit, "
       "    started_at = now(), updated_at = now() "
       "  WHERE id = (SELECT id FROM jobs "
       "              WHERE device_id = $1 AND (state = 'queued' OR "
       "                    (state = 'running' AND lease_expires_at < now())) "
       "              ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
       "  RETURNING *) "
       "SELECT " +
           JobColumns() + " FROM claimed j JOIN problems p ON p.id = j.problem_id"},
      {"renew_lease",
       "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3::float8 / 1000.0), "
       "updated_at = now() WHERE id = $1 AND state = 'running' AND worker_id = $2 RETURNING id"},
      {"job_holder", "SELECT state, coalesce(worker_id, '') FROM jobs WHERE id = $1"},
      {"lock_job",
       "SELECT state, coalesce(worker_id, '') AS worker_id, device_id, problem_id, attempts, "
       "max_micro_batch, coalesce(claimed_max_micro_batch, 0) AS claimed_max_micro_batch, "
       "array_position(" +
           std::string(kPolicyRank) +
           ", policy) AS policy_rank, "
           "coalesce(array_position(" +
           kPolicyRank +
           ", claimed_policy), 0) AS claimed_policy_rank, workspace_limit, "
           "claimed_workspace_limit FROM jobs WHERE id = $1 FOR UPDATE"},
      // $2: the job was widened while running, so it goes back to the queue.
      {"complete_job",
       "UPDATE jobs SET state = CASE WHEN $2::boolean THEN 'queued' ELSE 'done' END, "
       "worker_id = CASE WHEN $2::boolean THEN NULL ELSE worker_id END, "
       "attempts = CASE WHEN $2::boolean THEN 0 ELSE attempts END, "
       "lease_expires_at = NULL, error = '', updated_at = now(), "
       "finished_at = CASE WHEN $2::boolean THEN NULL ELSE now() END WHERE id = $1"},
      // $2: attempts are used up, so the job fails for good.
      {"fail_job",
       "UPDATE jobs SET state = CASE WHEN $2::boolean THEN 'failed' ELSE 'queued' END, "
       "worker_id = CASE WHEN $2::boolean THEN worker_id ELSE NULL END, "
       "lease_expires_at = NULL, error = $3, updated_at = now(), "
       "finished_at = CASE WHEN $2::boolean THEN now() ELSE NULL END WHERE id = $1"},
      {"release_job",
       "UPDATE jobs SET state = 'queued', worker_id = NULL, lease_expires_at = NULL, "
       "attempts = GREATEST(attempts - 1, 0), updated_at = now() WHERE id = $1"},
      {"get_job", "SELECT " + JobColumns() +
                      " FROM jobs j JOIN problems p ON p.id = j.problem_id WHERE j.id = $1"},
      {"get_jobs", "SELECT " + JobColumns() +
                       " FROM jobs j JOIN problems p ON p.id = j.problem_id "
                       "WHERE j.id = ANY($1::bigint[]) ORDER BY j.id"},
      // $1: one job id, or 0 for all; $2: one device, or NULL for all.
      {"cancel_queued_jobs",
       "DELETE FROM jobs j USING problems p WHERE p.id = j.problem_id AND j.state = 'queued' "
       "AND ($1::bigint = 0 OR j.id = $1) AND ($2::bigint IS NULL OR j.device_id = $2) "
       "RETURNING " +
           JobColumns()},
      {"retry_lock_job", "SELECT state, device_id, problem_id FROM jobs WHERE id = $1 FOR UPDATE"},
      {"live_job_of_problem",
       "SELECT id FROM jobs WHERE device_id = $1 AND problem_id = $2 "
       "AND state IN ('queued', 'running') LIMIT 1"},
      {"retry_job",
       "UPDATE jobs SET state = 'queued', worker_id = NULL, lease_expires_at = NULL, "
       "attempts = 0, finished_at = NULL, updated_at = now() WHERE id = $1 AND state = 'failed'"},
      // Queued jobs of the device and problem, for completing those an import covers.
      {"queued_jobs_of_problem",
       "SELECT id, max_micro_batch, policy FROM jobs WHERE device_id = $1 AND problem_id = $2 "
       "AND state = 'queued' FOR UPDATE SKIP LOCKED"},
      // The framework's own timings cover no job: a worker still measures ucudnn's.
      {"measured_micro_batches",
       "SELECT DISTINCT micro_batch FROM timings WHERE device_id = $1 AND problem_id = $2 "
       "AND algo <> " +
           std::to_string(kFrameworkAlgo) + " ORDER BY micro_batch"},
      {"complete_queued_job",
       "UPDATE jobs SET state = 'done', error = '', updated_at = now(), finished_at = now() "
       "WHERE id = $1 AND state = 'queued'"},
      {"list_jobs", "SELECT " + JobColumns() +
                        " FROM jobs j JOIN problems p ON p.id = j.problem_id "
                        "WHERE ($1::text = '' OR " +
                        kDisplayStateSql +
                        " = $1::text) "
                        "ORDER BY j.created_at DESC, j.id DESC LIMIT $2"},
      {"queue_depth", "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')"},
      {"job_counts_by_device",
       "SELECT j.device_id, d.name, "
       "count(*) FILTER (WHERE j.state = 'queued') AS queued, "
       "count(*) FILTER (WHERE j.state = 'running' AND j.lease_expires_at >= now()) AS running, "
       "count(*) FILTER (WHERE j.state = 'running' AND j.lease_expires_at < now()) AS expired, "
       "count(*) FILTER (WHERE j.state = 'done') AS done, "
       "count(*) FILTER (WHERE j.state = 'failed') AS failed "
       "FROM jobs j JOIN devices d ON d.id = j.device_id GROUP BY j.device_id, d.name"},
      {"register_worker",
       "INSERT INTO workers (id, host, device_id) VALUES ($1, $2, $3) "
       "ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, device_id = EXCLUDED.device_id, "
       "last_heartbeat = now(), stopped_at = NULL"},
      {"stop_worker", "UPDATE workers SET stopped_at = now() WHERE id = $1 RETURNING id"},
      // Rows of workers silent for longer than the retention ($1 seconds); one that a running
      // job still names stays until that job's lease is dealt with.
      {"prune_workers",
       "DELETE FROM workers w WHERE w.last_heartbeat < now() - make_interval(secs => $1::float8) "
       "AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.worker_id = w.id AND j.state = 'running') "
       "RETURNING w.id"},
      {"list_devices",
       "SELECT d.id, " + DeviceColumns("d") + ", " + internal::TimestampSql("d.first_seen") +
           " AS first_seen, "
           "(SELECT count(*) FROM timings t WHERE t.device_id = d.id) AS timing_count, "
           "(SELECT count(*) FROM workers w WHERE w.device_id = d.id AND "
           "  w.stopped_at IS NULL AND "
           "  w.last_heartbeat > now() - make_interval(secs => $1::float8)) AS live_workers "
           "FROM devices d WHERE starts_with(d.fingerprint_key, $2) ORDER BY d.name, d.id"},
      {"list_workers",
       "SELECT w.id, w.host, w.device_id, " + internal::TimestampSql("w.registered_at") +
           " AS registered_at, " + internal::TimestampSql("w.last_heartbeat") +
           " AS last_heartbeat, "
           "(w.stopped_at IS NULL AND "
           " w.last_heartbeat > now() - make_interval(secs => $1::float8)) AS alive, "
           "(SELECT count(*) FROM jobs j WHERE j.worker_id = w.id AND j.state = 'done') "
           "AS jobs_done, " +
           DeviceColumns("d") +
           " FROM workers w JOIN devices d ON d.id = w.device_id "
           "WHERE NOT $2::boolean OR (w.stopped_at IS NULL AND "
           "  w.last_heartbeat > now() - make_interval(secs => $1::float8)) "
           "ORDER BY w.id"},
      // The body; last_used_at moves only when older than $2 seconds (one write per plan and
      // interval, however often it is read). A data-modifying WITH runs whether or not read.
      {"get_plan",
       "WITH touched AS (UPDATE plans SET last_used_at = now() WHERE hash = $1 AND "
       "last_used_at < now() - make_interval(secs => $2::float8) RETURNING hash) "
       "SELECT body FROM plans WHERE hash = $1"},
      // First writer wins: a plan stored under a hash is never replaced.
      {"put_plan",
       "INSERT INTO plans (hash, device_id, body) VALUES ($1, $2, $3) "
       "ON CONFLICT (hash) DO NOTHING"},
      {"try_evict_lock", "SELECT pg_try_advisory_xact_lock($1)"},
      // Per device, every plan ranked below the $1 most recently used.
      {"evict_plans",
       "DELETE FROM plans WHERE hash IN ("
       "  SELECT hash FROM (SELECT hash, row_number() OVER (PARTITION BY device_id "
       "                    ORDER BY last_used_at DESC, hash DESC) AS rank FROM plans) ranked "
       "  WHERE rank > $1)"},
      {"ping", "SELECT 1"},
  };
  return kStatements;
}

void PrepareStatements(pqxx::connection& conn) {
  for (const Statement& s : Statements()) conn.prepare(s.name, s.sql);
}

// ---- Rows to values ------------------------------------------------------------------------

Result<ConvProblem> ProblemFromRow(const pqxx::row& row) {
  ConvProblem p;
  UCUDNN_ASSIGN_OR_RETURN(p.op, ParseConvOp(row["op"].as<std::string>()));
  p.c = row["c"].as<int64_t>();
  p.h = row["h"].as<int64_t>();
  p.w = row["w"].as<int64_t>();
  p.k = row["k"].as<int64_t>();
  p.r = row["r"].as<int64_t>();
  p.s = row["s"].as<int64_t>();
  p.pad_h = row["pad_h"].as<int64_t>();
  p.pad_w = row["pad_w"].as<int64_t>();
  p.stride_h = row["stride_h"].as<int64_t>();
  p.stride_w = row["stride_w"].as<int64_t>();
  p.dilation_h = row["dilation_h"].as<int64_t>();
  p.dilation_w = row["dilation_w"].as<int64_t>();
  p.groups = row["groups"].as<int64_t>();
  UCUDNN_ASSIGN_OR_RETURN(p.data_type, ParseDataType(row["data_type"].as<std::string>()));
  UCUDNN_ASSIGN_OR_RETURN(p.compute_type, ParseDataType(row["compute_type"].as<std::string>()));
  UCUDNN_ASSIGN_OR_RETURN(p.layout, ParseLayout(row["layout"].as<std::string>()));
  UCUDNN_ASSIGN_OR_RETURN(p.math, ParseMathMode(row["math"].as<std::string>()));
  p.d = row["d"].as<int64_t>();
  p.t = row["t"].as<int64_t>();
  p.pad_d = row["pad_d"].as<int64_t>();
  p.stride_d = row["stride_d"].as<int64_t>();
  p.dilation_d = row["dilation_d"].as<int64_t>();
  return p;
}

DeviceFingerprint DeviceFromRow(const pqxx::row& row) {
  DeviceFingerprint f;
  f.backend = row["backend"].as<std::string>();
  f.name = row["name"].as<std::string>();
  f.cc_major = row["cc_major"].as<int>();
  f.cc_minor = row["cc_minor"].as<int>();
  f.sm_count = row["sm_count"].as<int>();
  f.memory_bytes = static_cast<uint64_t>(row["memory_bytes"].as<int64_t>());
  f.cudnn_version = row["cudnn_version"].as<int>();
  f.cuda_runtime_version = row["cuda_runtime_version"].as<int>();
  f.blas = row["blas"].as<std::string>();
  return f;
}

Result<Timing> TimingFromRow(const pqxx::row& row) {
  Timing t;
  t.micro_batch = row["micro_batch"].as<int64_t>();
  t.algo = row["algo"].as<int>();
  t.engine_config = row["engine_config"].as<std::string>();
  t.time_ms = row["time_ms"].as<double>();
  t.spread_ms = row["spread_ms"].as<double>();
  t.samples = row["samples"].as<int>();
  t.workspace_bytes = static_cast<uint64_t>(row["workspace_bytes"].as<int64_t>());
  UCUDNN_ASSIGN_OR_RETURN(t.status, ParseTimingStatus(row["status"].as<std::string>()));
  t.error = row["error"].as<std::string>();
  return t;
}

// A nullable workspace limit column (jobs.workspace_limit, claimed_workspace_limit).
std::optional<uint64_t> WorkspaceLimitFromRow(const pqxx::row& row, const char* column) {
  const pqxx::field field = row[column];
  if (field.is_null()) return std::nullopt;
  return static_cast<uint64_t>(field.as<int64_t>());
}

Result<Job> JobFromRow(const pqxx::row& row) {
  Job job;
  job.id = row["id"].as<int64_t>();
  UCUDNN_ASSIGN_OR_RETURN(job.state, ParseJobState(row["state"].as<std::string>()));
  job.device_hash = FromDb(row["device_id"].as<int64_t>());
  job.problem_hash = FromDb(row["problem_id"].as<int64_t>());
  job.max_micro_batch = row["max_micro_batch"].as<int64_t>();
  UCUDNN_ASSIGN_OR_RETURN(job.policy, ParseBatchPolicy(row["policy"].as<std::string>()));
  job.workspace_limit = WorkspaceLimitFromRow(row, "workspace_limit");
  job.worker_id = row["worker_id"].as<std::string>();
  job.attempts = row["attempts"].as<int>();
  job.error = row["error"].as<std::string>();
  job.created_at = row["created_at"].as<std::string>();
  job.updated_at = row["updated_at"].as<std::string>();
  job.lease_expires_at = row["lease_expires_at"].as<std::string>();
  job.lease_expired = row["lease_expired"].as<bool>();
  UCUDNN_ASSIGN_OR_RETURN(job.problem, ProblemFromRow(row));
  return job;
}

// ---- Input checks ----------------------------------------------------------------------------

Status ValidateDevice(const DeviceFingerprint& f) {
  UCUDNN_RETURN_IF_ERROR(Validate(f).WithContext("device"));
  if (f.memory_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument("device.memory_bytes: must be at most 2^63-1, got " +
                           std::to_string(f.memory_bytes));
  }
  return Status::Ok();
}

Status ValidateProblem(const ConvProblem& p) { return Validate(p).WithContext("problem"); }

Status ValidateLease(std::chrono::milliseconds lease) {
  constexpr std::chrono::milliseconds kMaxLease = std::chrono::hours(24 * 7);
  if (lease.count() < 1 || lease > kMaxLease) {
    return InvalidArgument("lease: must be in [1 ms, 7 days], got " +
                           std::to_string(lease.count()) + " ms");
  }
  return Status::Ok();
}

// ---- Statements used by several operations (throw pqxx errors) --------------------------------

Result<uint64_t> UpsertDeviceTx(pqxx::transaction_base& tx, const DeviceFingerprint& f) {
  const std::string key = f.Key();
  const uint64_t hash = f.Hash();
  tx.exec_prepared("upsert_device", ToDb(hash), key, f.backend, f.name, f.cc_major, f.cc_minor,
                   f.sm_count, static_cast<int64_t>(f.memory_bytes), f.cudnn_version,
                   f.cuda_runtime_version, f.blas);
  pqxx::result stored = tx.exec_prepared("device_key", ToDb(hash));
  if (stored.empty()) {
    // Only when a concurrent insert of the same row is still uncommitted; a retry sees it.
    return Unavailable("device " + FormatHash(hash) + " is being inserted concurrently; retry");
  }
  if (stored[0][0].as<std::string>() != key) {
    return internal::AlreadyExists("device: fingerprint hash " + FormatHash(hash) +
                                   " collides with the stored fingerprint \"" +
                                   stored[0][0].as<std::string>() + "\"");
  }
  return hash;
}

Result<uint64_t> UpsertProblemTx(pqxx::transaction_base& tx, const ConvProblem& p) {
  const std::string key = CanonicalKey(p);
  const uint64_t hash = StableHash(p);
  tx.exec_prepared("upsert_problem", ToDb(hash), key, std::string(ToString(p.op)), p.c, p.h, p.w,
                   p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
                   p.dilation_w, p.groups, std::string(ToString(p.data_type)),
                   std::string(ToString(p.compute_type)), std::string(ToString(p.layout)),
                   std::string(ToString(p.math)), p.d, p.t, p.pad_d, p.stride_d, p.dilation_d);
  pqxx::result stored = tx.exec_prepared("problem_key", ToDb(hash));
  if (stored.empty()) {
    return Unavailable("problem " + FormatHash(hash) + " is being inserted concurrently; retry");
  }
  if (stored[0][0].as<std::string>() != key) {
    return internal::AlreadyExists("problem: hash " + FormatHash(hash) +
                                   " collides with the stored problem \"" +
                                   stored[0][0].as<std::string>() + "\"");
  }
  return hash;
}

// Queues a notification of (device, problem) on `channel`, sent by PostgreSQL at commit, in the
// payload Listener parses: "<device hash>:<problem hash>".
void NotifyTx(pqxx::transaction_base& tx, std::string_view channel, uint64_t device_hash,
              uint64_t problem_hash) {
  tx.exec_prepared("notify", std::string(channel),
                   FormatHash(device_hash) + ":" + FormatHash(problem_hash));
}

// Writes validated timings and queues the notification (sent by PostgreSQL at commit); returns
// the rows written (a worker-limit row over a stored measurement is not).
int64_t WriteTimingsTx(pqxx::transaction_base& tx, uint64_t device_hash, uint64_t problem_hash,
                       const std::vector<Timing>& timings, const std::string& measured_by) {
  std::vector<int64_t> micro_batch, algo, samples, workspace;
  std::vector<double> time_ms, spread_ms;
  std::vector<std::string> status, error, engine_config, conditions;
  for (const Timing& t : timings) {
    conditions.push_back(t.conditions);
    micro_batch.push_back(t.micro_batch);
    algo.push_back(t.algo);
    time_ms.push_back(t.time_ms);
    spread_ms.push_back(t.spread_ms);
    samples.push_back(t.samples);
    workspace.push_back(static_cast<int64_t>(t.workspace_bytes));
    status.emplace_back(ToString(t.status));
    error.push_back(internal::CleanText(t.error, kMaxErrorBytes));
    engine_config.push_back(t.engine_config);
  }
  const pqxx::result written = tx.exec_prepared(
      "put_timings", ToDb(device_hash), ToDb(problem_hash), internal::IntArrayLiteral(micro_batch),
      internal::IntArrayLiteral(algo), internal::DoubleArrayLiteral(time_ms),
      internal::DoubleArrayLiteral(spread_ms), internal::IntArrayLiteral(samples),
      internal::IntArrayLiteral(workspace), internal::TextArrayLiteral(status),
      internal::TextArrayLiteral(error), measured_by, std::string(kWorkerLimitError),
      internal::TextArrayLiteral(engine_config), internal::TextArrayLiteral(conditions));
  NotifyTx(tx, kTimingsChannel, device_hash, problem_hash);
  return written.affected_rows();
}

// Tells the workers listening on kJobsChannel that (device, problem) has a queued job (sent at
// commit): they claim it at once instead of at their next poll. Every path that queues a job
// sends it: EnqueueJobs, a widened CompleteJob, a re-queuing FailJob, ReleaseJob, RetryJob.
void NotifyJobsTx(pqxx::transaction_base& tx, uint64_t device_hash, uint64_t problem_hash) {
  NotifyTx(tx, kJobsChannel, device_hash, problem_hash);
}
// The same for a job row read with its device_id and problem_id.
void NotifyJobsTx(pqxx::transaction_base& tx, const pqxx::row& job) {
  NotifyJobsTx(tx, FromDb(job["device_id"].as<int64_t>()), FromDb(job["problem_id"].as<int64_t>()));
}

// The micro-batch sizes of (device, problem) with at least one timing, ascending.
std::vector<int64_t> MeasuredMicroBatchesTx(pqxx::transaction_base& tx, uint64_t device_hash,
                                            uint64_t problem_hash) {
  std::vector<int64_t> measured;
  for (const pqxx::row& row :
       tx.exec_prepared("measured_micro_batches", ToDb(device_hash), ToDb(problem_hash))) {
    measured.push_back(row[0].as<int64_t>());
  }
  return measured;
}

// Whether `measured` (ascending) has every size a job of (max_micro_batch, policy) measures.
bool CoversJob(const std::vector<int64_t>& measured, BatchPolicy policy, int64_t max_micro_batch) {
  if (measured.empty()) return false;
  for (int64_t size : MicroBatchSizes(policy, max_micro_batch)) {
    if (!std::binary_search(measured.begin(), measured.end(), size)) return false;
  }
  return true;
}

// Marks done the queued jobs of (device, problem) whose every micro-batch size has a timing now;
// returns how many. Running jobs are left to their workers.
Result<int> CompleteCoveredJobsTx(pqxx::transaction_base& tx, uint64_t device_hash,
                                  uint64_t problem_hash) {
  pqxx::result jobs =
      tx.exec_prepared("queued_jobs_of_problem", ToDb(device_hash), ToDb(problem_hash));
  if (jobs.empty()) return 0;
  const std::vector<int64_t> measured = MeasuredMicroBatchesTx(tx, device_hash, problem_hash);
  int completed = 0;
  for (const pqxx::row& job : jobs) {
    UCUDNN_ASSIGN_OR_RETURN(const BatchPolicy policy,
                            ParseBatchPolicy(job["policy"].as<std::string>()));
    if (!CoversJob(measured, policy, job["max_micro_batch"].as<int64_t>())) continue;
    tx.exec_prepared("complete_queued_job", job["id"].as<int64_t>());
    ++completed;
  }
  return completed;
}

// Whether `worker_id` holds the locked job row.
Status CheckHeld(const pqxx::row& job, int64_t job_id, const std::string& worker_id) {
  const std::string state = job["state"].as<std::string>();
  const std::string holder = job["worker_id"].as<std::string>();
  const std::string id = "job " + std::to_string(job_id);
  if (state != "running") {
    return FailedPrecondition(id + ": lease of worker " + worker_id + " lost (the job is " + state +
                              ")");
  }
  if (holder != worker_id) {
    return FailedPrecondition(id + ": lease of worker " + worker_id + " lost (now held by worker " +
                              holder + ")");
  }
  return Status::Ok();
}

// Locks the job row for a lease holder's write; NotFound / FailedPrecondition as CheckHeld.
Result<pqxx::row> LockHeldJob(pqxx::transaction_base& tx, int64_t job_id,
                              const std::string& worker_id) {
  pqxx::result rows = tx.exec_prepared("lock_job", job_id);
  if (rows.empty()) return NotFound("job " + std::to_string(job_id) + ": no such job");
  UCUDNN_RETURN_IF_ERROR(CheckHeld(rows[0], job_id, worker_id));
  return rows[0];
}

}  // namespace

// ---- Store -------------------------------------------------------------------------------------

Store::Impl::Impl(const StoreOptions& o)
    : options(o),
      pool(internal::ConnectionPool::Config{o.url, o.pool_size, o.acquire_timeout,
                                            o.reconnect_backoff_initial, o.reconnect_backoff_max,
                                            o.statement_timeout, PrepareStatements}) {}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::Open(const std::string& url, int pool_size) {
  StoreOptions options;
  options.url = url;
  options.pool_size = pool_size;
  return Open(options);
}

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  if (options.pool_size < 1 || options.pool_size > 256) {
    return InvalidArgument("pool_size: must be in [1, 256], got " +
                           std::to_string(options.pool_size));
  }
  if (options.acquire_timeout.count() < 0 || options.reconnect_backoff_initial.count() < 1 ||
      options.reconnect_backoff_max < options.reconnect_backoff_initial ||
      options.statement_timeout.count() < 0 || options.worker_alive_window.count() < 1) {
    return InvalidArgument(
        "store options: timeouts must be >= 0, back-off initial >= 1 ms and <= max, "
        "worker_alive_window >= 1 s");
  }
  // A first connection tells a malformed URL (never going to work) from a database that is down.
  try {
    internal::ConnectionPool::ConnectOrThrow(options.url, options.statement_timeout);
  } catch (...) {
    return internal::MapConnectException("open store");
  }
  auto store = std::unique_ptr<Store>(new Store(std::make_unique<Impl>(options)));
  spdlog::info("store: opened with a pool of {} connection(s)", options.pool_size);
  return store;
}

Status Store::Ping() {
  return impl_->Run("ping", [&](pqxx::connection& conn) -> Status {
    pqxx::nontransaction tx(conn);
    tx.exec_prepared("ping");
    return Status::Ok();
  });
}

PoolStats Store::GetPoolStats() const { return impl_->pool.Stats(); }

Result<uint64_t> Store::UpsertDevice(const DeviceFingerprint& fingerprint) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(ValidateDevice(fingerprint));
  return impl_->Run("upsert device", [&](pqxx::connection& conn) -> Result<uint64_t> {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(uint64_t hash, UpsertDeviceTx(tx, fingerprint));
    tx.commit();
    return hash;
  });
}

Result<bool> Store::DeviceExists(uint64_t device_hash) {
  return impl_->Run("device exists", [&](pqxx::connection& conn) -> Result<bool> {
    pqxx::nontransaction tx(conn);
    return !tx.exec_prepared("device_key", ToDb(device_hash)).empty();
  });
}

Result<uint64_t> Store::UpsertProblem(const ConvProblem& problem) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(ValidateProblem(problem));
  return impl_->Run("upsert problem", [&](pqxx::connection& conn) -> Result<uint64_t> {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(uint64_t hash, UpsertProblemTx(tx, problem));
    tx.commit();
    return hash;
  });
}

Result<std::vector<TimingRecord>> Store::GetTimingRecords(const DeviceFingerprint& device,
                                                          const ConvProblem& problem) {
  UCUDNN_RETURN_IF_ERROR(ValidateDevice(device));
  UCUDNN_RETURN_IF_ERROR(ValidateProblem(problem));
  return impl_->Run(
      "get timings", [&](pqxx::connection& conn) -> Result<std::vector<TimingRecord>> {
        pqxx::nontransaction tx(conn);
        pqxx::result rows =
            tx.exec_prepared("get_timings", ToDb(device.Hash()), ToDb(StableHash(problem)));
        std::vector<TimingRecord> records;
        records.reserve(rows.size());
        for (const pqxx::row& row : rows) {
          TimingRecord record;
          UCUDNN_ASSIGN_OR_RETURN(record.timing, TimingFromRow(row));
          record.measured_by = row["measured_by"].as<std::string>();
          record.measured_at = row["measured_at"].as<std::string>();
          record.conditions = row["conditions"].as<std::string>();
          records.push_back(std::move(record));
        }
        return records;
      });
}

Result<TimingTable> Store::GetTimings(const DeviceFingerprint& device, const ConvProblem& problem) {
  UCUDNN_ASSIGN_OR_RETURN(std::vector<TimingRecord> records, GetTimingRecords(device, problem));
  TimingTable table;
  table.entries.reserve(records.size());
  for (TimingRecord& r : records) table.entries.push_back(std::move(r.timing));
  return table;
}

Result<std::vector<TimingTable>> Store::GetTimingsForProblems(
    const DeviceFingerprint& device, const std::vector<ConvProblem>& problems) {
  UCUDNN_RETURN_IF_ERROR(ValidateDevice(device));
  std::unordered_map<uint64_t, std::vector<size_t>> positions;  // hash -> indices in `problems`
  std::vector<int64_t> hashes;
  for (size_t i = 0; i < problems.size(); ++i) {
    UCUDNN_RETURN_IF_ERROR(
        Validate(problems[i]).WithContext("problems[" + std::to_string(i) + "]"));
    const uint64_t hash = StableHash(problems[i]);
    auto& at = positions[hash];
    if (at.empty()) hashes.push_back(ToDb(hash));
    at.push_back(i);
  }
  std::vector<TimingTable> tables(problems.size());
  if (problems.empty()) return tables;
  return impl_->Run("get timings of problems",
                    [&](pqxx::connection& conn) -> Result<std::vector<TimingTable>> {
                      pqxx::nontransaction tx(conn);
                      pqxx::result rows = tx.exec_prepared("get_timings_many", ToDb(device.Hash()),
                                                           internal::IntArrayLiteral(hashes));
                      for (const pqxx::row& row : rows) {
                        UCUDNN_ASSIGN_OR_RETURN(Timing timing, TimingFromRow(row));
                        const auto it = positions.find(FromDb(row["problem_id"].as<int64_t>()));
                        if (it == positions.end()) continue;
                        for (size_t i : it->second) tables[i].entries.push_back(timing);
                      }
                      return tables;
                    });
}

Status Store::PutTimings(const DeviceFingerprint& device, const ConvProblem& problem,
                         const std::vector<Timing>& timings, const std::string& measured_by) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(ValidateDevice(device));
  UCUDNN_RETURN_IF_ERROR(ValidateProblem(problem));
  UCUDNN_RETURN_IF_ERROR(internal::ValidateTimings(timings));
  UCUDNN_RETURN_IF_ERROR(internal::ValidateMeasuredBy(measured_by));
  return impl_->Run("put timings", [&](pqxx::connection& conn) -> Status {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(uint64_t device_hash, UpsertDeviceTx(tx, device));
    UCUDNN_ASSIGN_OR_RETURN(uint64_t problem_hash, UpsertProblemTx(tx, problem));
    WriteTimingsTx(tx, device_hash, problem_hash, timings, measured_by);
    tx.commit();
    spdlog::debug("store: stored {} timing(s) of problem {} on device {}", timings.size(),
                  FormatHash(problem_hash), FormatHash(device_hash));
    return Status::Ok();
  });
}

Result<int64_t> Store::ImportTimings(const DeviceFingerprint& device,
                                     const std::vector<ProblemTimings>& problems,
                                     const std::string& measured_by) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(ValidateDevice(device));
  UCUDNN_RETURN_IF_ERROR(internal::ValidateMeasuredBy(measured_by));
  for (size_t i = 0; i < problems.size(); ++i) {
    const std::string where = "problems[" + std::to_string(i) + "]";
    UCUDNN_RETURN_IF_ERROR(ValidateProblem(problems[i].problem).WithContext(where));
    UCUDNN_RETURN_IF_ERROR(internal::ValidateTimings(problems[i].timings).WithContext(where));
  }
  return impl_->Run("import timings", [&](pqxx::connection& conn) -> Result<int64_t> {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(uint64_t device_hash, UpsertDeviceTx(tx, device));
    int64_t rows = 0;
    int completed = 0;
    for (const ProblemTimings& p : problems) {
      UCUDNN_ASSIGN_OR_RETURN(uint64_t problem_hash, UpsertProblemTx(tx, p.problem));
      rows += WriteTimingsTx(tx, device_hash, problem_hash, p.timings, measured_by);
      UCUDNN_ASSIGN_OR_RETURN(const int done, CompleteCoveredJobsTx(tx, device_hash, problem_hash));
      completed += done;
    }
    tx.commit();
    spdlog::info(
        "store: imported {} timing(s) of {} problem(s) for device {}; {} queued job(s) done", rows,
        problems.size(), FormatHash(device_hash), completed);
    return rows;
  });
}

// ---- Jobs --------------------------------------------------------------------------------------

Result<EnqueueResult> Store::EnqueueJob(const DeviceFingerprint& device, const ConvProblem& problem,
                                        int64_t max_micro_batch, BatchPolicy policy,
                                        std::optional<uint64_t> workspace_limit) {
  UCUDNN_ASSIGN_OR_RETURN(
      auto results,
      EnqueueJobs(device, {JobRequest{problem, max_micro_batch, policy, workspace_limit}}));
  if (results.size() != 1) return Internal("enqueue job: no result");
  return std::move(results.front());
}

namespace {

// The requests of one EnqueueJobs call for one distinct problem: the widest wins.
struct MergedJob {
  const ConvProblem* problem = nullptr;
  int64_t max_micro_batch = 0;
  int policy_rank = 0;                      // array_position in kPolicyRank
  std::optional<uint64_t> workspace_limit;  // the widest (WidestWorkspaceLimit)
  BatchPolicy policy() const { return static_cast<BatchPolicy>(policy_rank - 1); }
  // Whether a job of the row `job` (max_micro_batch, policy_rank, workspace_limit) measures
  // every size this request needs.
  bool CoveredBy(const pqxx::row& job) const {
    return job["max_micro_batch"].as<int64_t>() >= max_micro_batch &&
           job["policy_rank"].as<int>() >= policy_rank &&
           internal::WorkspaceLimitCovers(WorkspaceLimitFromRow(job, "workspace_limit"),
                                          workspace_limit);
  }
};

// One entry per distinct problem, by problem hash: a map, so that the jobs are taken in hash
// order and concurrent batches lock rows in the same order and cannot deadlock.
Result<std::map<uint64_t, MergedJob>> MergeJobRequests(const std::vector<JobRequest>& jobs) {
  std::map<uint64_t, MergedJob> merged;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const JobRequest& job = jobs[i];
    const std::string where = jobs.size() == 1 ? "" : "jobs[" + std::to_string(i) + "]";
    auto in = [&](const Status& s) { return where.empty() ? s : s.WithContext(where); };
    UCUDNN_RETURN_IF_ERROR(in(ValidateProblem(job.problem)));
    UCUDNN_RETURN_IF_ERROR(in(ValidateBatch(job.max_micro_batch).WithContext("max_micro_batch")));
    if (ToString(job.policy) == kUnnamedEnumValue) {
      return in(
          InvalidArgument("policy: unknown value " + std::to_string(static_cast<int>(job.policy))));
    }
    UCUDNN_RETURN_IF_ERROR(in(internal::ValidateWorkspaceLimit(job.workspace_limit)));
    MergedJob& m = merged[StableHash(job.problem)];
    // The first request of the problem sets the limit; the next ones widen it.
    m.workspace_limit = m.problem == nullptr ? job.workspace_limit
                                             : internal::WidestWorkspaceLimit(m.workspace_limit,
                                                                              job.workspace_limit);
    m.problem = &job.problem;
    m.max_micro_batch = std::max(m.max_micro_batch, job.max_micro_batch);
    m.policy_rank = std::max(m.policy_rank, static_cast<int>(job.policy) + 1);
  }
  return merged;
}

// The answer that needs no write, if any, given the newest job of the problem (`newest`, from
// find_job_for_problem; it may be empty).
Result<std::optional<EnqueueResult>> AnswerWithoutWriteTx(pqxx::transaction_base& tx,
                                                          uint64_t device_hash,
                                                          uint64_t problem_hash, const MergedJob& m,
                                                          const pqxx::result& newest) {
  // No live job, and the newest one failed a moment ago: answer it, enqueue nothing.
  if (!newest.empty() && newest[0]["in_cooldown"].as<bool>()) {
    return std::make_optional(EnqueueResult{newest[0]["id"].as<int64_t>(), JobState::kFailed, false,
                                            false, newest[0]["error"].as<std::string>()});
  }
  // The common repeat: a live job that already covers the request needs no write.
  if (!newest.empty()) {
    UCUDNN_ASSIGN_OR_RETURN(JobState state, ParseJobState(newest[0]["state"].as<std::string>()));
    if ((state == JobState::kQueued || state == JobState::kRunning) && m.CoveredBy(newest[0])) {
      return std::make_optional(
          EnqueueResult{newest[0]["id"].as<int64_t>(), state, false, false, {}});
    }
  }
  // No live job that covers it. If the timings are all there already, the caller's view was
  // stale (a job finished since it read them, or they were imported): nothing to measure.
  // Checked against the timings, not against finished jobs, so timings an operator deleted to
  // have them measured again are measured again. Every size of the policy, whatever the
  // request's workspace limit: the sizes a limit needs are among them.
  if (CoversJob(MeasuredMicroBatchesTx(tx, device_hash, problem_hash), m.policy(),
                m.max_micro_batch)) {
    const int64_t newest_id = newest.empty() ? 0 : newest[0]["id"].as<int64_t>();
    return std::make_optional(EnqueueResult{newest_id, JobState::kDone, false, false, {}});
  }
  return std::optional<EnqueueResult>();
}

// Inserts the job, or widens the live one. A job that finishes between the insert and the
// look-up leaves no live job: then again, up to three times.
Result<EnqueueResult> InsertOrWidenJobTx(pqxx::transaction_base& tx, uint64_t device_hash,
                                         uint64_t problem_hash, const MergedJob& m,
                                         double cooldown_s) {
  const std::string policy_name(ToString(m.policy()));
  std::optional<int64_t> workspace_limit;
  if (m.workspace_limit) workspace_limit = static_cast<int64_t>(*m.workspace_limit);
  for (int attempt = 0; attempt < 3; ++attempt) {
    pqxx::result up = tx.exec_prepared("enqueue_job", ToDb(device_hash), ToDb(problem_hash),
                                       m.max_micro_batch, policy_name, workspace_limit);
    if (!up.empty()) {
      EnqueueResult result;
      result.job_id = up[0]["id"].as<int64_t>();
      UCUDNN_ASSIGN_OR_RETURN(result.state, ParseJobState(up[0]["state"].as<std::string>()));
      result.created = up[0]["created"].as<bool>();
      result.widened = !result.created;
      return result;
    }
    pqxx::result found =
        tx.exec_prepared("find_job_for_problem", ToDb(device_hash), ToDb(problem_hash), cooldown_s);
    if (!found.empty()) {
      const pqxx::row& row = found[0];
      UCUDNN_ASSIGN_OR_RETURN(JobState state, ParseJobState(row["state"].as<std::string>()));
      const bool live = state == JobState::kQueued || state == JobState::kRunning;
      // A job that finished a moment ago answers only a request it covers, its workspace limit
      // included (a job for a larger limit timed fewer sizes).
      if (live || (state == JobState::kDone && m.CoveredBy(row))) {
        return EnqueueResult{row["id"].as<int64_t>(), state, false, false, {}};
      }
    }
  }
  return Unavailable("enqueue job: the job of problem " + FormatHash(problem_hash) +
                     " kept changing state; retry");
}

}  // namespace

Result<std::vector<EnqueueResult>> Store::EnqueueJobs(const DeviceFingerprint& device,
                                                      const std::vector<JobRequest>& jobs) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(ValidateDevice(device));
  if (jobs.size() > kMaxJobsPerEnqueue) {
    return InvalidArgument("jobs: at most " + std::to_string(kMaxJobsPerEnqueue) +
                           " per call, got " + std::to_string(jobs.size()));
  }
  UCUDNN_ASSIGN_OR_RETURN(const auto merged, MergeJobRequests(jobs));
  const double cooldown_s = static_cast<double>(impl_->options.failed_job_cooldown.count());
  return impl_->Run(
      "enqueue jobs", [&](pqxx::connection& conn) -> Result<std::vector<EnqueueResult>> {
        pqxx::work tx(conn);
        UCUDNN_ASSIGN_OR_RETURN(uint64_t device_hash, UpsertDeviceTx(tx, device));
        int created = 0;
        std::optional<uint64_t> queued_problem;  // one the call queued or widened
        std::map<uint64_t, EnqueueResult> answers;
        for (const auto& [problem_hash, m] : merged) {
          UCUDNN_RETURN_IF_ERROR(UpsertProblemTx(tx, *m.problem).status());
          pqxx::result newest = tx.exec_prepared("find_job_for_problem", ToDb(device_hash),
                                                 ToDb(problem_hash), cooldown_s);
          UCUDNN_ASSIGN_OR_RETURN(std::optional<EnqueueResult> answer,
                                  AnswerWithoutWriteTx(tx, device_hash, problem_hash, m, newest));
          if (!answer) {
            UCUDNN_ASSIGN_OR_RETURN(
                answer, InsertOrWidenJobTx(tx, device_hash, problem_hash, m, cooldown_s));
          }
          created += answer->created ? 1 : 0;
          if ((answer->created || answer->widened) && answer->state == JobState::kQueued) {
            queued_problem = problem_hash;
          }
          answers[problem_hash] = std::move(*answer);
        }
        // One notification for the call: a worker claims until the queue is empty.
        if (queued_problem) NotifyJobsTx(tx, device_hash, *queued_problem);
        tx.commit();
        if (created > 0) {
          // The server logs the enqueue with its context (issue 22: it was logged twice).
          spdlog::debug("store: queued {} job(s) for device {}", created, FormatHash(device_hash));
        }
        std::vector<EnqueueResult> results;
        results.reserve(jobs.size());
        for (const JobRequest& job : jobs) results.push_back(answers.at(StableHash(job.problem)));
        return results;
      });
}

Result<std::optional<Job>> Store::ClaimJob(uint64_t device_hash, const std::string& worker_id,
                                           std::chrono::milliseconds lease, int max_attempts) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  UCUDNN_RETURN_IF_ERROR(ValidateLease(lease));
  if (max_attempts < 1) {
    return InvalidArgument("max_attempts: must be >= 1, got " + std::to_string(max_attempts));
  }
  return impl_->Run("claim job", [&](pqxx::connection& conn) -> Result<std::optional<Job>> {
    pqxx::work tx(conn);
    // Claiming is a sign of life: it doubles as a heartbeat.
    if (tx.exec_prepared("touch_worker", worker_id).empty()) {
      return FailedPrecondition("claim job: worker " + worker_id +
                                " is not registered (RegisterWorker first)");
    }
    // Jobs whose workers keep dying on them stop here instead of being claimed again.
    for (const pqxx::row& row :
         tx.exec_prepared("fail_expired_jobs", ToDb(device_hash), max_attempts)) {
      spdlog::warn("store: job {} failed for good: its lease expired on attempt {} of {}",
                   row["id"].as<int64_t>(), row["attempts"].as<int>(), max_attempts);
    }
    pqxx::result rows = tx.exec_prepared("claim_job", ToDb(device_hash), worker_id,
                                         static_cast<int64_t>(lease.count()));
    if (rows.empty()) {
      tx.commit();
      return std::optional<Job>();
    }
    UCUDNN_ASSIGN_OR_RETURN(Job job, JobFromRow(rows[0]));
    tx.commit();
    spdlog::info("store: worker {} claimed job {} (attempt {})", worker_id, job.id, job.attempts);
    return std::optional<Job>(std::move(job));
  });
}

Status Store::RenewLease(int64_t job_id, const std::string& worker_id,
                         std::chrono::milliseconds lease) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  UCUDNN_RETURN_IF_ERROR(ValidateLease(lease));
  return impl_->Run("renew lease", [&](pqxx::connection& conn) -> Status {
    pqxx::work tx(conn);
    pqxx::result renewed =
        tx.exec_prepared("renew_lease", job_id, worker_id, static_cast<int64_t>(lease.count()));
    if (renewed.empty()) {
      pqxx::result rows = tx.exec_prepared("job_holder", job_id);
      if (rows.empty()) return NotFound("job " + std::to_string(job_id) + ": no such job");
      const std::string state = rows[0][0].as<std::string>();
      const std::string holder = rows[0][1].as<std::string>();
      return FailedPrecondition(
          "job " + std::to_string(job_id) + ": lease of worker " + worker_id + " lost (" +
          (state == "running" ? "now held by worker " + holder : "the job is " + state) + ")");
    }
    tx.commit();
    return Status::Ok();
  });
}

Result<JobState> Store::CompleteJob(int64_t job_id, const std::string& worker_id,
                                    const std::vector<Timing>& timings) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  UCUDNN_RETURN_IF_ERROR(internal::ValidateTimings(timings));
  return impl_->Run("complete job", [&](pqxx::connection& conn) -> Result<JobState> {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(pqxx::row job, LockHeldJob(tx, job_id, worker_id));
    const uint64_t device_hash = FromDb(job["device_id"].as<int64_t>());
    const uint64_t problem_hash = FromDb(job["problem_id"].as<int64_t>());
    WriteTimingsTx(tx, device_hash, problem_hash, timings, worker_id);
    // Widened by EnqueueJob since the claim: sizes the claim did not ask for (larger ones, a
    // wider policy's, those of a smaller workspace limit or of none) still need measuring.
    const bool widened =
        job["max_micro_batch"].as<int64_t>() > job["claimed_max_micro_batch"].as<int64_t>() ||
        job["policy_rank"].as<int>() > job["claimed_policy_rank"].as<int>() ||
        !internal::WorkspaceLimitCovers(WorkspaceLimitFromRow(job, "claimed_workspace_limit"),
                                        WorkspaceLimitFromRow(job, "workspace_limit"));
    tx.exec_prepared("complete_job", job_id, widened);
    if (widened) NotifyJobsTx(tx, device_hash, problem_hash);
    tx.commit();
    spdlog::info("store: worker {} completed job {} with {} timing(s){}", worker_id, job_id,
                 timings.size(), widened ? "; re-queued for the sizes asked for since" : "");
    return widened ? JobState::kQueued : JobState::kDone;
  });
}

Result<JobState> Store::FailJob(int64_t job_id, const std::string& worker_id,
                                const std::string& error, int max_attempts) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  if (max_attempts < 1) {
    return InvalidArgument("max_attempts: must be >= 1, got " + std::to_string(max_attempts));
  }
  return impl_->Run("fail job", [&](pqxx::connection& conn) -> Result<JobState> {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(pqxx::row job, LockHeldJob(tx, job_id, worker_id));
    const int attempts = job["attempts"].as<int>();
    const bool give_up = attempts >= max_attempts;
    tx.exec_prepared("fail_job", job_id, give_up, internal::CleanText(error, kMaxErrorBytes));
    // Re-queued for another attempt: any idle worker may take it (another GPU of the model may
    // not fail where this one did).
    if (!give_up) {
      NotifyJobsTx(tx, job);
    }
    tx.commit();
    if (give_up) {
      spdlog::warn("store: job {} failed for good after {} attempt(s): {}", job_id, attempts,
                   error);
    } else {
      spdlog::info("store: job {} attempt {} of {} failed, re-queued: {}", job_id, attempts,
                   max_attempts, error);
    }
    return give_up ? JobState::kFailed : JobState::kQueued;
  });
}

Status Store::ReleaseJob(int64_t job_id, const std::string& worker_id) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  return impl_->Run("release job", [&](pqxx::connection& conn) -> Status {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(pqxx::row job, LockHeldJob(tx, job_id, worker_id));
    tx.exec_prepared("release_job", job_id);
    NotifyJobsTx(tx, job);
    tx.commit();
    spdlog::info("store: worker {} released job {}", worker_id, job_id);
    return Status::Ok();
  });
}

Result<Job> Store::GetJob(int64_t job_id) {
  return impl_->Run("get job", [&](pqxx::connection& conn) -> Result<Job> {
    pqxx::nontransaction tx(conn);
    pqxx::result rows = tx.exec_prepared("get_job", job_id);
    if (rows.empty()) return NotFound("job " + std::to_string(job_id) + ": no such job");
    return JobFromRow(rows[0]);
  });
}

Result<std::vector<Job>> Store::GetJobs(const std::vector<int64_t>& job_ids) {
  if (job_ids.empty()) return std::vector<Job>{};
  return impl_->Run("get jobs", [&](pqxx::connection& conn) -> Result<std::vector<Job>> {
    pqxx::nontransaction tx(conn);
    pqxx::result rows = tx.exec_prepared("get_jobs", internal::IntArrayLiteral(job_ids));
    std::vector<Job> jobs;
    jobs.reserve(rows.size());
    for (const pqxx::row& row : rows) {
      UCUDNN_ASSIGN_OR_RETURN(Job job, JobFromRow(row));
      jobs.push_back(std::move(job));
    }
    return jobs;
  });
}

Result<Job> Store::RetryJob(int64_t job_id) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  return impl_->Run("retry job", [&](pqxx::connection& conn) -> Result<Job> {
    pqxx::work tx(conn);
    pqxx::result locked = tx.exec_prepared("retry_lock_job", job_id);
    const std::string id = "job " + std::to_string(job_id);
    if (locked.empty()) return NotFound(id + ": no such job");
    const std::string state = locked[0]["state"].as<std::string>();
    if (state != ToString(JobState::kFailed)) {
      return FailedPrecondition(id + ": is " + state + "; only failed jobs can be retried");
    }
    pqxx::result live =
        tx.exec_prepared("live_job_of_problem", locked[0]["device_id"].as<int64_t>(),
                         locked[0]["problem_id"].as<int64_t>());
    if (!live.empty()) {
      return FailedPrecondition(id + ": job " + std::to_string(live[0][0].as<int64_t>()) +
                                " of the same problem and device is already queued or running");
    }
    tx.exec_prepared("retry_job", job_id);
    NotifyJobsTx(tx, locked[0]);
    pqxx::result rows = tx.exec_prepared("get_job", job_id);
    if (rows.empty()) return Internal(id + ": gone while being retried");
    UCUDNN_ASSIGN_OR_RETURN(Job job, JobFromRow(rows[0]));
    tx.commit();
    spdlog::debug("store: job {} re-queued by an operator (last error: {})", job_id, job.error);
    return job;
  });
}

Result<std::vector<Job>> Store::CancelQueuedJobs(int64_t job_id,
                                                 std::optional<uint64_t> device_hash) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  if (job_id < 0) return InvalidArgument("job_id: must be positive, got " + std::to_string(job_id));
  return impl_->Run("cancel jobs", [&](pqxx::connection& conn) -> Result<std::vector<Job>> {
    pqxx::work tx(conn);
    std::optional<int64_t> device;
    if (device_hash) device = ToDb(*device_hash);
    pqxx::result rows = tx.exec_prepared("cancel_queued_jobs", job_id, device);
    if (job_id > 0 && rows.empty()) {
      pqxx::result existing = tx.exec_prepared("get_job", job_id);
      const std::string id = "job " + std::to_string(job_id);
      if (existing.empty()) return NotFound(id + ": no such job");
      return FailedPrecondition(id + ": is " + existing[0]["state"].as<std::string>() +
                                "; only queued jobs can be cancelled");
    }
    std::vector<Job> cancelled;
    cancelled.reserve(rows.size());
    for (const pqxx::row& row : rows) {
      UCUDNN_ASSIGN_OR_RETURN(Job job, JobFromRow(row));
      cancelled.push_back(std::move(job));
    }
    tx.commit();
    if (!cancelled.empty()) {
      spdlog::debug("store: {} queued job(s) cancelled by an operator", cancelled.size());
    }
    return cancelled;
  });
}

// ---- Workers -----------------------------------------------------------------------------------

Status Store::RegisterWorker(const std::string& worker_id, const std::string& host,
                             const DeviceFingerprint& device) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  UCUDNN_RETURN_IF_ERROR(ValidateDevice(device));
  if (host.size() > 256) {
    return InvalidArgument("host: at most 256 bytes, got " + std::to_string(host.size()));
  }
  return impl_->Run("register worker", [&](pqxx::connection& conn) -> Status {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(uint64_t device_hash, UpsertDeviceTx(tx, device));
    tx.exec_prepared("register_worker", worker_id, internal::CleanText(host, 256),
                     ToDb(device_hash));
    tx.commit();
    spdlog::info("store: worker {} on {} registered for device {}", worker_id, host,
                 FormatHash(device_hash));
    return Status::Ok();
  });
}

namespace {

// One UPDATE of a registered worker's row (`statement`, RETURNING id) in its own transaction;
// kNotFound when the worker never registered.
Status UpdateWorker(Store::Impl& impl, std::string_view operation, const char* statement,
                    const std::string& worker_id) {
  UCUDNN_RETURN_IF_ERROR(impl.WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(internal::ValidateWorkerId(worker_id));
  return impl.Run(operation, [&](pqxx::connection& conn) -> Status {
    pqxx::work tx(conn);
    if (tx.exec_prepared(statement, worker_id).empty()) {
      return NotFound("worker " + worker_id + ": not registered");
    }
    tx.commit();
    return Status::Ok();
  });
}

}  // namespace

Status Store::Heartbeat(const std::string& worker_id) {
  return UpdateWorker(*impl_, "heartbeat", "touch_worker", worker_id);
}

Status Store::MarkWorkerStopped(const std::string& worker_id) {
  return UpdateWorker(*impl_, "mark worker stopped", "stop_worker", worker_id);
}

Result<int64_t> Store::PruneWorkers(std::chrono::seconds retention) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  if (retention.count() < 1) {
    return InvalidArgument("retention: must be at least 1 s, got " +
                           std::to_string(retention.count()));
  }
  return impl_->Run("prune workers", [&](pqxx::connection& conn) -> Result<int64_t> {
    pqxx::work tx(conn);
    const pqxx::result pruned =
        tx.exec_prepared("prune_workers", static_cast<double>(retention.count()));
    tx.commit();
    if (!pruned.empty()) {
      spdlog::info("store: {} worker row(s) silent for over {} s removed", pruned.size(),
                   retention.count());
    }
    return static_cast<int64_t>(pruned.size());
  });
}

// ---- Catalog -----------------------------------------------------------------------------------

Result<std::vector<DeviceInfo>> Store::ListDevices() {
  const double window = static_cast<double>(impl_->options.worker_alive_window.count());
  return impl_->Run("list devices", [&](pqxx::connection& conn) -> Result<std::vector<DeviceInfo>> {
    pqxx::nontransaction tx(conn);
    std::vector<DeviceInfo> devices;
    // Devices of older key versions hold timings of an older method (kFingerprintKeyVersion):
    // no worker or client of this version uses them.
    const std::string current = std::string(kFingerprintKeyVersion) + ";";
    for (const pqxx::row& row : tx.exec_prepared("list_devices", window, current)) {
      DeviceInfo d;
      d.hash = FromDb(row["id"].as<int64_t>());
      d.fingerprint = DeviceFromRow(row);
      d.timing_count = row["timing_count"].as<int64_t>();
      d.live_workers = row["live_workers"].as<int>();
      d.first_seen = row["first_seen"].as<std::string>();
      devices.push_back(std::move(d));
    }
    return devices;
  });
}

Result<std::vector<WorkerInfo>> Store::ListWorkers(bool alive_only) {
  const double window = static_cast<double>(impl_->options.worker_alive_window.count());
  return impl_->Run("list workers", [&](pqxx::connection& conn) -> Result<std::vector<WorkerInfo>> {
    pqxx::nontransaction tx(conn);
    std::vector<WorkerInfo> workers;
    for (const pqxx::row& row : tx.exec_prepared("list_workers", window, alive_only)) {
      WorkerInfo w;
      w.id = row["id"].as<std::string>();
      w.host = row["host"].as<std::string>();
      w.device = DeviceFromRow(row);
      w.device_hash = FromDb(row["device_id"].as<int64_t>());
      w.registered_at = row["registered_at"].as<std::string>();
      w.last_heartbeat = row["last_heartbeat"].as<std::string>();
      w.alive = row["alive"].as<bool>();
      w.jobs_done = row["jobs_done"].as<int64_t>();
      workers.push_back(std::move(w));
    }
    return workers;
  });
}

Result<std::vector<Job>> Store::ListJobs(std::optional<JobState> state, int limit) {
  return ListJobs(state ? ToString(*state) : std::string_view(), limit);
}

Result<std::vector<Job>> Store::ListJobs(std::string_view state, int limit) {
  if (!state.empty() && state != "expired" && !ParseJobState(state).ok()) {
    return InvalidArgument("state: must be one of queued, running, expired, done, failed, got \"" +
                           std::string(state) + "\"");
  }
  if (limit < 1 || limit > 10000) {
    return InvalidArgument("limit: must be in [1, 10000], got " + std::to_string(limit));
  }
  const std::string state_filter(state);
  return impl_->Run("list jobs", [&](pqxx::connection& conn) -> Result<std::vector<Job>> {
    pqxx::nontransaction tx(conn);
    std::vector<Job> jobs;
    for (const pqxx::row& row : tx.exec_prepared("list_jobs", state_filter, limit)) {
      UCUDNN_ASSIGN_OR_RETURN(Job job, JobFromRow(row));
      jobs.push_back(std::move(job));
    }
    return jobs;
  });
}

Result<int64_t> Store::QueueDepth() {
  return impl_->Run("queue depth", [&](pqxx::connection& conn) -> Result<int64_t> {
    pqxx::nontransaction tx(conn);
    return tx.exec_prepared1("queue_depth")[0].as<int64_t>();
  });
}

Result<std::vector<DeviceJobCounts>> Store::JobCountsByDevice() {
  return impl_->Run("job counts",
                    [&](pqxx::connection& conn) -> Result<std::vector<DeviceJobCounts>> {
                      pqxx::nontransaction tx(conn);
                      std::vector<DeviceJobCounts> counts;
                      for (const pqxx::row& row : tx.exec_prepared("job_counts_by_device")) {
                        DeviceJobCounts c;
                        c.device_hash = FromDb(row["device_id"].as<int64_t>());
                        c.device_name = row["name"].as<std::string>();
                        c.queued = row["queued"].as<int64_t>();
                        c.running = row["running"].as<int64_t>();
                        c.done = row["done"].as<int64_t>();
                        c.failed = row["failed"].as<int64_t>();
                        c.expired = row["expired"].as<int64_t>();
                        counts.push_back(std::move(c));
                      }
                      std::sort(counts.begin(), counts.end(),
                                [](const DeviceJobCounts& a, const DeviceJobCounts& b) {
                                  return a.device_hash < b.device_hash;
                                });
                      return counts;
                    });
}

// ---- Plan cache --------------------------------------------------------------------------------

Result<std::optional<std::string>> Store::GetCachedPlan(uint64_t plan_hash) {
  const double touch_s = static_cast<double>(impl_->options.plan_touch_interval.count());
  return impl_->Run("get cached plan",
                    [&](pqxx::connection& conn) -> Result<std::optional<std::string>> {
                      pqxx::work tx(conn);
                      pqxx::result rows = tx.exec_prepared("get_plan", ToDb(plan_hash), touch_s);
                      std::optional<std::string> body;
                      if (!rows.empty()) body = pqxx::binarystring(rows[0][0]).str();
                      tx.commit();
                      return body;
                    });
}

Status Store::PutCachedPlan(uint64_t plan_hash, const DeviceFingerprint& device,
                            const std::string& bytes) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  UCUDNN_RETURN_IF_ERROR(ValidateDevice(device));
  if (bytes.empty() || bytes.size() > kMaxPlanBytes) {
    return InvalidArgument("plan: must be 1 to " + std::to_string(kMaxPlanBytes) + " bytes, got " +
                           std::to_string(bytes.size()));
  }
  return impl_->Run("put cached plan", [&](pqxx::connection& conn) -> Status {
    pqxx::work tx(conn);
    UCUDNN_ASSIGN_OR_RETURN(uint64_t device_hash, UpsertDeviceTx(tx, device));
    tx.exec_prepared("put_plan", ToDb(plan_hash), ToDb(device_hash), pqxx::binarystring(bytes));
    tx.commit();
    return Status::Ok();
  });
}

Result<int64_t> Store::EvictPlans(int64_t max_plans_per_device) {
  UCUDNN_RETURN_IF_ERROR(impl_->WritesAllowed());
  if (max_plans_per_device < 1) {
    return InvalidArgument("max_plans_per_device: must be >= 1, got " +
                           std::to_string(max_plans_per_device));
  }
  // Key of the advisory lock held while evicting: "ucudnnev" as ASCII.
  constexpr int64_t kEvictLockKey = 0x756375646e6e6576;
  return impl_->Run("evict plans", [&](pqxx::connection& conn) -> Result<int64_t> {
    pqxx::work tx(conn);
    if (!tx.exec_prepared1("try_evict_lock", kEvictLockKey)[0].as<bool>()) return int64_t{0};
    const pqxx::result deleted = tx.exec_prepared("evict_plans", max_plans_per_device);
    tx.commit();
    const auto count = static_cast<int64_t>(deleted.affected_rows());
    if (count > 0) {
      spdlog::info("store: evicted {} least recently used plan(s) (keeping {} per device)", count,
                   max_plans_per_device);
    }
    return count;
  });
}

}  // namespace ucudnn::store
