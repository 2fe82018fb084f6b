// Migrations against a real PostgreSQL: from empty, re-run, newer schema, concurrent migrators,
// and the constraints the schema enforces by itself.
#include <gtest/gtest.h>

#include <bit>
#include <pqxx/pqxx>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "store_test_util.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/store/migrations.h"

namespace ucudnn::store {
namespace {

using test_support::H100;
using testing_util::Conv3x3;

class MigrationsTest : public test_support::PostgresTest {
 protected:
  std::unique_ptr<Store> Open() {
    auto store = Store::Open(url(), 2);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  // Opens the store and migrates a database at version `from` to the newest: the store (nullptr
  // on failure) and what was applied.
  std::pair<std::unique_ptr<Store>, MigrationSummary> MigrateFrom(int from) {
    auto store = Open();
    if (store == nullptr) return {nullptr, MigrationSummary{}};
    auto summary = store->Migrate();
    EXPECT_TRUE(summary.ok()) << summary.status().ToString();
    if (!summary.ok()) return {nullptr, MigrationSummary{}};
    EXPECT_EQ(summary->from_version, from);
    EXPECT_EQ(summary->to_version, Store::LatestSchemaVersion());
    return {std::move(store), *summary};
  }
  int64_t Count(const std::string& sql) {
    pqxx::connection conn(url());
    pqxx::nontransaction tx(conn);
    return tx.exec1(sql)[0].as<int64_t>();
  }
  // The schema as a server of version `last` left it: migrations 1 to `last`, recorded.
  void ApplyMigrationsThrough(int last) {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
    for (const EmbeddedMigration& m : EmbeddedMigrations()) {
      if (m.version > last) break;
      tx.exec(std::string(m.sql));
      tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version,
                     std::string(m.name));
    }
    tx.commit();
  }
  static void InsertDevice(pqxx::work& tx, const DeviceFingerprint& device) {
    tx.exec_params(
        "INSERT INTO devices (id, fingerprint_key, backend, name, cc_major, cc_minor, sm_count, "
        "memory_bytes, cudnn_version, cuda_runtime_version) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        static_cast<int64_t>(device.Hash()), device.Key(), device.backend, device.name,
        device.cc_major, device.cc_minor, device.sm_count,
        static_cast<int64_t>(device.memory_bytes), device.cudnn_version,
        device.cuda_runtime_version);
  }
  // A timing of 0.5 ms at micro-batch 8, measured at `measured_at` (a timestamp, or "now").
  static void InsertTiming(pqxx::work& tx, const DeviceFingerprint& device,
                           const ConvProblem& problem, int algo, const std::string& engine_config,
                           const std::string& measured_at) {
    tx.exec_params(
        "INSERT INTO timings (device_id, problem_id, micro_batch, algo, engine_config, time_ms, "
        "status, measured_at) VALUES ($1, $2, 8, $3, $4, 0.5, 'ok', $5::timestamptz)",
        static_cast<int64_t>(device.Hash()), static_cast<int64_t>(StableHash(problem)), algo,
        engine_config, measured_at);
  }

  static void InsertProblem(pqxx::work& tx, const ConvProblem& problem) {
    tx.exec_params(
        "INSERT INTO problems (id, canonical_key, op, c, h, w, k, r, s, pad_h, pad_w, stride_h, "
        "stride_w, dilation_h, dilation_w, groups, data_type, compute_type, layout, math) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, "
        "$18, $19, $20)",
        static_cast<int64_t>(StableHash(problem)), CanonicalKey(problem),
        std::string(ToString(problem.op)), problem.c, problem.h, problem.w, problem.k, problem.r,
        problem.s, problem.pad_h, problem.pad_w, problem.stride_h, problem.stride_w,
        problem.dilation_h, problem.dilation_w, problem.groups,
        std::string(ToString(problem.data_type)), std::string(ToString(problem.compute_type)),
        std::string(ToString(problem.layout)), std::string(ToString(problem.math)));
  }
  // Runs `sql` with the device and problem ids as $1 and $2; it must fail with `sqlstate`.
  void ExpectRejected(const std::string& sql, int64_t device, int64_t problem,
                      const std::string& sqlstate) {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    try {
      tx.exec_params(sql, device, problem);
      ADD_FAILURE() << "accepted: " << sql;
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), sqlstate) << sql << "\n" << e.what();
    }
  }
};

TEST_F(MigrationsTest, AppliesAllFromEmptyInOrder) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto before = store->SchemaVersion();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(*before, 0);

  auto summary = store->Migrate();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->from_version, 0);
  EXPECT_EQ(summary->to_version, Store::LatestSchemaVersion());
  ASSERT_EQ(summary->applied.size(), EmbeddedMigrations().size());
  EXPECT_EQ(summary->applied[0], "0001_init");
  EXPECT_EQ(summary->applied[1], "0002_jobs_workers");
  EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());

  EXPECT_EQ(Count("SELECT count(*) FROM schema_migrations"),
            static_cast<int64_t>(EmbeddedMigrations().size()));
  EXPECT_EQ(Count("SELECT count(*) FROM information_schema.tables WHERE table_name IN "
                  "('devices', 'problems', 'timings', 'jobs', 'workers', 'plans')"),
            6);
}

TEST_F(MigrationsTest, ReRunIsANoOp) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Migrate().ok());
  ASSERT_TRUE(store->UpsertDevice(H100()).ok());
  auto again = store->Migrate();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->applied.empty());
  EXPECT_EQ(again->from_version, Store::LatestSchemaVersion());
  EXPECT_EQ(again->to_version, Store::LatestSchemaVersion());
  EXPECT_EQ(Count("SELECT count(*) FROM schema_migrations"),
            static_cast<int64_t>(EmbeddedMigrations().size()));
  EXPECT_EQ(Count("SELECT count(*) FROM devices"), 1);  // data untouched
}

TEST_F(MigrationsTest, RefusesADatabaseNewerThanTheBinary) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Migrate().ok());
  const int newer = Store::LatestSchemaVersion() + 1;
  pqxx::connection conn(url());
  pqxx::work tx(conn);
  tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future')",
                 newer);
  tx.commit();

  auto refused = store->Migrate();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("newer than this binary"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(*store->SchemaVersion(), newer);
  // What binaries that do not migrate (the server's --no-migrate) check: the same message.
  const Status checked = CheckSchemaVersion(newer);
  EXPECT_EQ(checked.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(checked.message(), refused.status().message());
}

TEST(SchemaVersionCheck, OnlyTheBinarysOwnVersionPasses) {
  const int latest = Store::LatestSchemaVersion();
  EXPECT_TRUE(CheckSchemaVersion(latest).ok());
  const Status older = CheckSchemaVersion(latest - 1);
  EXPECT_EQ(older.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(older.message().find("ucudnn migrate"), std::string::npos) << older.message();
  const Status empty = CheckSchemaVersion(0);
  EXPECT_EQ(empty.code(), StatusCode::kFailedPrecondition);
  const Status newer = CheckSchemaVersion(latest + 1);
  EXPECT_EQ(newer.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.message().find("is newer than this binary's newest"), std::string::npos)
      << newer.message();
  EXPECT_NE(newer.message().find("upgrade ucudnn"), std::string::npos) << newer.message();
}

TEST_F(MigrationsTest, ConcurrentMigratorsApplyEachMigrationOnce) {
  constexpr int kMigrators = 4;
  std::vector<std::unique_ptr<Store>> stores;
  for (int i = 0; i < kMigrators; ++i) {
    stores.push_back(Open());
    ASSERT_NE(stores.back(), nullptr);
  }
  std::vector<Result<MigrationSummary>> results(kMigrators, Internal("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kMigrators; ++i) {
    threads.emplace_back([&, i] { results[i] = stores[i]->Migrate(); });
  }
  for (auto& t : threads) t.join();
  size_t applied = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->to_version, Store::LatestSchemaVersion());
    applied += r->applied.size();
  }
  EXPECT_EQ(applied, EmbeddedMigrations().size());
  EXPECT_EQ(Count("SELECT count(*) FROM schema_migrations"),
            static_cast<int64_t>(EmbeddedMigrations().size()));
}

TEST_F(MigrationsTest, OperationsBeforeMigrationSayToMigrate) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  Result<uint64_t> id = store->UpsertDevice(H100());
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(id.status().message().find("migrate"), std::string::npos) << id.status().message();
}

// 0005 on a database at version 4 that holds legacy timings: they read back unchanged (as legacy
// algorithms), engine configurations are stored beside them, and the new constraints hold.
TEST_F(MigrationsTest, EngineConfigsKeepLegacyRowsAndAdmitEngineRows) {
  constexpr int kEngineConfigsVersion = 5;
  const auto& migrations = EmbeddedMigrations();
  ASSERT_GE(migrations.size(), static_cast<size_t>(kEngineConfigsVersion));
  ASSERT_EQ(migrations[kEngineConfigsVersion - 1].name, "0005_engine_configs");
  const DeviceFingerprint device = H100();
  const ConvProblem problem = Conv3x3(64);
  const auto d = static_cast<int64_t>(device.Hash());
  const auto p = static_cast<int64_t>(StableHash(problem));
  ApplyMigrationsThrough(kEngineConfigsVersion - 1);  // the schema before 0005
  {
    // Rows a server of that release wrote.
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    InsertDevice(tx, device);
    InsertProblem(tx, problem);
    for (int algo : {0, 1, 6}) {
      for (int mb : {8, 16}) {
        tx.exec_params(
            "INSERT INTO timings (device_id, problem_id, micro_batch, algo, time_ms, spread_ms, "
            "samples, workspace_bytes, status, error, measured_by) "
            "VALUES ($1, $2, $3, $4, $5, $6, 5, $7, $8, $9, 'old-worker')",
            d, p, mb, algo, 0.125 * (algo + 1) + 0.01 * mb, 0.003 * (algo + 1),
            int64_t{1} << (20 + algo), algo == 6 ? "unsupported" : "ok",
            algo == 6 ? "CUDNN_STATUS_NOT_SUPPORTED" : "");
      }
    }
    tx.commit();
  }
  const std::string legacy_rows =
      "SELECT string_agg(concat_ws(',', micro_batch, algo, time_ms, spread_ms, samples, "
      "workspace_bytes, status, error, measured_by, measured_at), ';' "
      "ORDER BY micro_batch, algo) FROM timings";
  std::string before;
  {
    pqxx::connection conn(url());
    pqxx::nontransaction tx(conn);
    before = tx.exec1(legacy_rows)[0].as<std::string>();
  }

  auto [store, summary] = MigrateFrom(kEngineConfigsVersion - 1);
  ASSERT_NE(store, nullptr);
  ASSERT_FALSE(summary.applied.empty());
  EXPECT_EQ(summary.applied[0], "0005_engine_configs");
  {
    pqxx::connection conn(url());
    pqxx::nontransaction tx(conn);
    EXPECT_EQ(tx.exec1(legacy_rows)[0].as<std::string>(), before);  // every column, to the bit
  }
  EXPECT_EQ(Count("SELECT count(*) FROM timings WHERE engine_config = ''"), 6);

  // The store reads them as legacy algorithms and writes engine configurations beside them.
  auto legacy = store->GetTimings(device, problem);
  ASSERT_TRUE(legacy.ok()) << legacy.status().ToString();
  ASSERT_EQ(legacy->entries.size(), 6u);
  for (const Timing& t : legacy->entries) {
    EXPECT_TRUE(t.engine_config.empty());
    EXPECT_GE(t.algo, 0);
    EXPECT_DOUBLE_EQ(t.time_ms, 0.125 * (t.algo + 1) + 0.01 * static_cast<double>(t.micro_batch));
  }
  std::vector<Timing> engines;
  for (const char* key : {"eng34{k3=2}", "eng7"}) {
    Timing t;
    t.micro_batch = 8;
    t.algo = kEngineAlgo;
    t.engine_config = key;
    t.time_ms = 0.0625;
    t.samples = 9;
    t.workspace_bytes = 3 << 20;
    engines.push_back(t);
  }
  ASSERT_TRUE(store->PutTimings(device, problem, engines, "new-worker").ok());
  auto both = store->GetTimings(device, problem);
  ASSERT_TRUE(both.ok());
  ASSERT_EQ(both->entries.size(), 8u);
  EXPECT_EQ(both->entries[0], engines[0]);  // micro-batch 8: engines (algo -1) first, by key
  EXPECT_EQ(both->entries[1], engines[1]);
  EXPECT_EQ(both->entries[2], legacy->entries[0]);

  auto fails_with = [&](const std::string& values, const std::string& sqlstate) {
    ExpectRejected(
        "INSERT INTO timings (device_id, problem_id, micro_batch, algo, engine_config, time_ms, "
        "status) VALUES ($1, $2, " +
            values + ")",
        d, p, sqlstate);
  };
  fails_with("8, -1, 'eng7', 0.5, 'ok'", "23505");  // (device, problem, mb, algo, key) unique
  fails_with("8, -1, '', 0.5, 'ok'", "23514");      // a legacy algorithm is >= 0
  fails_with("8, 2, 'eng9', 0.5, 'ok'", "23514");   // an engine configuration's algo is -1
  fails_with("8, -1, 'cfg9', 0.5, 'ok'", "23514");  // keys start with 'eng'
  fails_with("8, -1, 'eng' || repeat('1', 2000), 0.5, 'ok'", "23514");  // bounded length
}

// 0008 on a database at version 7: the measured tables of grouped problems (legacy algorithms and
// engine configurations alike: workers before it pruned runtime-compiled engines on cold probes)
// are dropped, so that the next plan request queues them again; their framework's own times and
// every row of a dense problem stay.
TEST_F(MigrationsTest, GroupedProblemsAreMeasuredAgain) {
  constexpr int kRemeasureVersion = 8;
  ASSERT_GE(EmbeddedMigrations().size(), static_cast<size_t>(kRemeasureVersion));
  ASSERT_EQ(EmbeddedMigrations()[kRemeasureVersion - 1].name, "0008_remeasure_grouped_problems");
  ApplyMigrationsThrough(kRemeasureVersion - 1);
  const DeviceFingerprint device = H100();
  const ConvProblem dense = Conv3x3(64);
  ConvProblem depthwise = Conv3x3(64);
  depthwise.groups = 64;
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    InsertDevice(tx, device);
    for (const ConvProblem& problem : {dense, depthwise}) {
      InsertProblem(tx, problem);
      for (const auto& [algo, key] : {std::pair<int, std::string>{1, ""},
                                      {kEngineAlgo, "eng5"},
                                      {kFrameworkAlgo, "torch-2.11.0/benchmark"}}) {
        InsertTiming(tx, device, problem, algo, key, "now");
      }
    }
    tx.commit();
  }
  auto [store, summary] = MigrateFrom(kRemeasureVersion - 1);
  ASSERT_NE(store, nullptr);

  auto kept = store->GetTimings(device, dense);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->entries.size(), 3u);
  auto grouped = store->GetTimings(device, depthwise);
  ASSERT_TRUE(grouped.ok()) << grouped.status().ToString();
  ASSERT_EQ(grouped->entries.size(), 1u);
  EXPECT_EQ(grouped->entries[0].algo, kFrameworkAlgo);
}

// 0009 on a database at version 8: a framework's own time older than a timing of the same device
// and problem (taken while a worker was benchmarking it) is dropped; one taken after the
// problem's timings, and the timings themselves, stay.
TEST_F(MigrationsTest, FrameworkTimesTakenDuringBenchmarksAreForgotten) {
  constexpr int kForgetVersion = 9;
  ASSERT_GE(EmbeddedMigrations().size(), static_cast<size_t>(kForgetVersion));
  ASSERT_EQ(EmbeddedMigrations()[kForgetVersion - 1].name, "0009_forget_contended_framework_times");
  ApplyMigrationsThrough(kForgetVersion - 1);
  const DeviceFingerprint device = H100();
  const ConvProblem contended = Conv3x3(64);
  const ConvProblem quiet = Conv3x3(128);
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    InsertDevice(tx, device);
    // The contended problem's framework time at 12:00:05, its timings until 12:00:30; the quiet
    // one's framework time at 12:01:00, after its timings.
    for (const auto& [problem, framework_at] :
         {std::pair<ConvProblem, std::string>{contended, "12:00:05"}, {quiet, "12:01:00"}}) {
      InsertProblem(tx, problem);
      for (const auto& [algo, key, at] :
           {std::tuple<int, std::string, std::string>{1, "", "12:00:10"},
            {kEngineAlgo, "eng5", "12:00:30"},
            {kFrameworkAlgo, "torch-2.11.0/benchmark", framework_at}}) {
        InsertTiming(tx, device, problem, algo, key, "2026-11-26 " + at);
      }
    }
    tx.commit();
  }
  auto [store, summary] = MigrateFrom(kForgetVersion - 1);
  ASSERT_NE(store, nullptr);

  auto forgotten = store->GetTimings(device, contended);
  ASSERT_TRUE(forgotten.ok()) << forgotten.status().ToString();
  ASSERT_EQ(forgotten->entries.size(), 2u);
  for (const auto& entry : forgotten->entries) EXPECT_NE(entry.algo, kFrameworkAlgo);
  auto kept = store->GetTimings(device, quiet);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->entries.size(), 3u);
}

// Migrate(up_to) stops after that version, so a data-only dump of that schema can be restored
// and the data migrations after it still apply to its rows; a version outside the embedded ones
// is refused before anything runs.
TEST_F(MigrationsTest, MigratesUpToAVersionThenTheRest) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  for (int bad : {0, -1, Store::LatestSchemaVersion() + 1}) {
    auto refused = store->Migrate(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("is not in [1, "), std::string::npos);
  }
  EXPECT_EQ(Count("SELECT count(*) FROM information_schema.tables WHERE table_name = 'timings'"),
            0);
  auto partial = store->Migrate(3);
  ASSERT_TRUE(partial.ok()) << partial.status().ToString();
  EXPECT_EQ(partial->from_version, 0);
  EXPECT_EQ(partial->to_version, 3);
  ASSERT_EQ(partial->applied.size(), 3u);
  EXPECT_EQ(partial->applied[2], "0003_plan_cache");
  auto same = store->Migrate(2);  // already past it: nothing to do
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_TRUE(same->applied.empty());
  EXPECT_EQ(same->to_version, 3);
  auto rest = store->Migrate();
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_EQ(rest->from_version, 3);
  EXPECT_EQ(rest->to_version, Store::LatestSchemaVersion());
  EXPECT_EQ(rest->applied.size(), EmbeddedMigrations().size() - 3);
}

// The schema guards its data even against writers that bypass the store.
TEST_F(MigrationsTest, ConstraintsRejectBadRows) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Migrate().ok());
  auto device = store->UpsertDevice(H100());
  auto problem = store->UpsertProblem(Conv3x3(64));
  ASSERT_TRUE(device.ok() && problem.ok());
  const auto d = static_cast<int64_t>(*device);
  const auto p = static_cast<int64_t>(*problem);

  auto fails_with = [&](const std::string& sql, const std::string& sqlstate) {
    ExpectRejected(sql, d, p, sqlstate);
  };
  const std::string timing =
      "INSERT INTO timings (device_id, problem_id, micro_batch, algo, time_ms, status) "
      "VALUES ($1, $2, ";
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec_params(timing + "4, 1, 0.5, 'ok')", d, p);
    tx.commit();
  }
  fails_with(timing + "4, 1, 0.7, 'ok')", "23505");     // (device, problem, mb, algo) unique
  fails_with(timing + "0, 1, 0.5, 'ok')", "23514");     // micro_batch >= 1
  fails_with(timing + "8, 1, -1, 'ok')", "23514");      // time_ms >= 0
  fails_with(timing + "8, 1, 'NaN', 'ok')", "23514");   // time_ms finite
  fails_with(timing + "8, 1, 0.5, 'great')", "23514");  // status in the list
  fails_with(
      "INSERT INTO timings (device_id, problem_id, micro_batch, algo, time_ms, status) "
      "VALUES ($1::bigint # 1, $2, 1, 1, 0.5, 'ok')",
      "23503");  // unknown device
  const std::string job =
      "INSERT INTO jobs (device_id, problem_id, max_micro_batch, policy) "
      "VALUES ($1, $2, ";
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec_params(job + "64, 'all')", d, p);
    tx.commit();
  }
  fails_with(job + "128, 'all')", "23505");       // one live job per (device, problem)
  fails_with(job + "0, 'all')", "23514");         // max_micro_batch >= 1
  fails_with(job + "64, 'sometimes')", "23514");  // policy in the list
  fails_with("UPDATE jobs SET state = 'running' WHERE device_id = $1 AND problem_id = $2",
             "23514");  // running needs a lease holder
  // Workspace limits: NULL, or 0 to 1 TiB.
  const std::string live = " WHERE device_id = $1 AND problem_id = $2";
  for (const char* column : {"workspace_limit", "claimed_workspace_limit"}) {
    fails_with("UPDATE jobs SET " + std::string(column) + " = -1" + live, "23514");
    fails_with("UPDATE jobs SET " + std::string(column) + " = 1099511627777" + live, "23514");
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    for (const char* value : {"0", "1099511627776", "NULL"}) {
      tx.exec_params("UPDATE jobs SET " + std::string(column) + " = " + value + live, d, p);
    }
    tx.commit();
  }
}

// 0012 on a database at version 11: every job keeps asking for every micro-batch size of its
// policy (workspace_limit NULL), and a job claimed before the migration is not re-queued on
// completion for a limit it never had.
TEST_F(MigrationsTest, JobsBeforeWorkspaceLimitsMeasureEverySize) {
  constexpr int kLimitVersion = 12;
  ASSERT_GE(EmbeddedMigrations().size(), static_cast<size_t>(kLimitVersion));
  ASSERT_EQ(EmbeddedMigrations()[kLimitVersion - 1].name, "0012_job_workspace_limit");
  ApplyMigrationsThrough(kLimitVersion - 1);
  const DeviceFingerprint device = H100();
  int64_t queued = 0;
  int64_t running = 0;
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    InsertDevice(tx, device);
    InsertProblem(tx, Conv3x3(64));
    InsertProblem(tx, Conv3x3(32));
    tx.exec_params("INSERT INTO workers (id, host, device_id) VALUES ('worker-a', 'node1', $1)",
                   static_cast<int64_t>(device.Hash()));
    queued =
        tx.exec_params1(
              "INSERT INTO jobs (device_id, problem_id, max_micro_batch, policy) "
              "VALUES ($1, $2, 64, 'power_of_two') RETURNING id",
              static_cast<int64_t>(device.Hash()), static_cast<int64_t>(StableHash(Conv3x3(64))))[0]
            .as<int64_t>();
    running =
        tx.exec_params1(
              "INSERT INTO jobs (device_id, problem_id, max_micro_batch, policy, state, "
              "claimed_max_micro_batch, claimed_policy, worker_id, lease_expires_at, "
              "attempts, started_at) VALUES ($1, $2, 64, 'power_of_two', 'running', 64, "
              "'power_of_two', 'worker-a', now() + interval '1 hour', 1, now()) "
              "RETURNING id",
              static_cast<int64_t>(device.Hash()), static_cast<int64_t>(StableHash(Conv3x3(32))))[0]
            .as<int64_t>();
    tx.commit();
  }
  auto [store, summary] = MigrateFrom(kLimitVersion - 1);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(summary.applied.front(), "0012_job_workspace_limit");
  EXPECT_EQ(Count("SELECT count(*) FROM jobs WHERE workspace_limit IS NULL AND "
                  "claimed_workspace_limit IS NULL"),
            2);
  for (const int64_t id : {queued, running}) {
    auto job = store->GetJob(id);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_EQ(job->workspace_limit, std::nullopt);
  }

  // The running job completes as claimed; the queued one is claimed for every size.
  auto done = store->CompleteJob(running, "worker-a", testing_util::SampleTimings(64, 2));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(*done, JobState::kDone);
  auto claimed = store->ClaimJob(device.Hash(), "worker-a", std::chrono::seconds(60));
  ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status().ToString();
  EXPECT_EQ((*claimed)->id, queued);
  EXPECT_EQ((*claimed)->workspace_limit, std::nullopt);
}

// Migration 0004 on a database at schema 3: a device whose name held ';' and '=' (stored under
// the old '_' key) moves to its escaped key and id with its timings, jobs and workers; a device
// without those characters keeps key and id; fma problems become storable.
TEST_F(MigrationsTest, EscapedDeviceKeysMigrationMovesRowsAndKeepsPlainKeys) {
  ApplyMigrationsThrough(3);
  DeviceFingerprint evil = H100();
  evil.name = "Evil;GPU=1";
  // Migration 0004 writes v1 keys (the key version of its time, kFingerprintKeyVersion now):
  // the keys as C++ computed them then, so that the SQL FNV-1a is checked against Fnv1a64.
  const auto v1_key = [](const DeviceFingerprint& f) {
    const std::string key = f.Key();
    return "v1" + key.substr(key.find(';'));
  };
  const std::string old_evil_key =
      "v1;backend=cudnn;name=Evil_GPU_1;cc=9.0;sm=132;mem=85045854208;cudnn=91400;cuda=13000;"
      "blas=";
  ASSERT_EQ(v1_key(evil),
            "v1;backend=cudnn;name=Evil%3BGPU%3D1;cc=9.0;sm=132;mem=85045854208;"
            "cudnn=91400;cuda=13000;blas=");
  const int64_t old_id = std::bit_cast<int64_t>(Fnv1a64(old_evil_key));
  const int64_t new_id = std::bit_cast<int64_t>(Fnv1a64(v1_key(evil)));
  const int64_t plain_id = std::bit_cast<int64_t>(Fnv1a64(v1_key(H100())));
  const std::string problem_key = CanonicalKey(Conv3x3(64));
  const int64_t problem_id = std::bit_cast<int64_t>(StableHash(Conv3x3(64)));
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    const std::string device_columns =
        "INSERT INTO devices (id, fingerprint_key, backend, name, cc_major, cc_minor, sm_count, "
        "memory_bytes, cudnn_version, cuda_runtime_version) VALUES ($1, $2, 'cudnn', $3, 9, 0, "
        "132, 85045854208, 91400, 13000)";
    tx.exec_params(device_columns, old_id, old_evil_key, evil.name);
    tx.exec_params(device_columns, plain_id, v1_key(H100()), H100().name);
    tx.exec_params(
        "INSERT INTO problems (id, canonical_key, op, c, h, w, k, r, s, pad_h, pad_w, "
        "stride_h, stride_w, dilation_h, dilation_w, groups, data_type, compute_type, "
        "layout, math) VALUES ($1, $2, 'fwd', 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, "
        "1, 'fp32', 'fp32', 'nchw', 'default')",
        problem_id, problem_key);
    for (const int64_t device : {old_id, plain_id}) {
      tx.exec_params(
          "INSERT INTO timings (device_id, problem_id, micro_batch, algo, time_ms, "
          "status) VALUES ($1, $2, 1, 0, 0.5, 'ok')",
          device, problem_id);
      tx.exec_params(
          "INSERT INTO jobs (device_id, problem_id, max_micro_batch, policy) VALUES "
          "($1, $2, 8, 'all')",
          device, problem_id);
      tx.exec_params("INSERT INTO plans (hash, device_id, body) VALUES ($1, $1, 'x')", device);
    }
    tx.exec_params("INSERT INTO workers (id, device_id) VALUES ('evil-worker', $1)", old_id);
    tx.commit();
  }

  auto [store, summary] = MigrateFrom(3);
  ASSERT_NE(store, nullptr);

  auto count = [&](const std::string& sql, int64_t id) {
    pqxx::connection conn(url());
    pqxx::nontransaction tx(conn);
    return tx.exec_params1(sql, id)[0].as<int64_t>();
  };
  // The escaped key's id as C++ computes it, so the SQL FNV-1a agrees with Fnv1a64.
  EXPECT_EQ(count("SELECT count(*) FROM devices WHERE id = $1", old_id), 0);
  EXPECT_EQ(count("SELECT count(*) FROM devices WHERE id = $1", new_id), 1);
  EXPECT_EQ(count("SELECT count(*) FROM timings WHERE device_id = $1", new_id), 1);
  EXPECT_EQ(count("SELECT count(*) FROM jobs WHERE device_id = $1", new_id), 1);
  EXPECT_EQ(count("SELECT count(*) FROM workers WHERE device_id = $1", new_id), 1);
  EXPECT_EQ(count("SELECT count(*) FROM plans WHERE device_id = $1", new_id), 0);
  // The plain device is untouched, plan included.
  EXPECT_EQ(count("SELECT count(*) FROM timings WHERE device_id = $1", plain_id), 1);
  EXPECT_EQ(count("SELECT count(*) FROM plans WHERE device_id = $1", plain_id), 1);

  // v1 devices hold timings of the older method: kept, but no device of this version sees them,
  // and the catalog lists only this version's devices.
  auto evil_timings = store->GetTimings(evil, Conv3x3(64));
  ASSERT_TRUE(evil_timings.ok()) << evil_timings.status().ToString();
  EXPECT_TRUE(evil_timings->entries.empty());
  auto devices = store->ListDevices();
  ASSERT_TRUE(devices.ok());
  EXPECT_TRUE(devices->empty()) << devices->front().fingerprint.Key();
  ASSERT_TRUE(store->RegisterWorker("v2-worker", "host", evil).ok());
  devices = store->ListDevices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_EQ(devices->front().hash, evil.Hash());

  ConvProblem fma = Conv3x3(64);
  fma.math = MathMode::kFma;
  EXPECT_TRUE(store->UpsertProblem(fma).ok());
}

}  // namespace
}  // namespace ucudnn::store
