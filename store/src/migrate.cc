// Schema migrations: the embedded migrations/*.sql applied in order, each in its own
// transaction, under a transaction-level advisory lock so concurrent migrators (two servers
// starting at once) apply each migration exactly once.
#include <spdlog/spdlog.h>

#include <pqxx/except>
#include <pqxx/nontransaction>
#include <pqxx/transaction>

#include "store_impl.h"
#include "ucudnn/store/migrations.h"

namespace ucudnn::store {

namespace {

// Key of the advisory lock held by migrators: "ucudnnmg" as ASCII.
constexpr int64_t kMigrationLockKey = 0x756375646e6e6d67;

constexpr const char* kCreateMigrationsTable =
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "  version    INTEGER PRIMARY KEY CHECK (version > 0),"
    "  name       TEXT NOT NULL,"
    "  applied_at TIMESTAMPTZ NOT NULL DEFAULT now())";

int CurrentVersion(pqxx::transaction_base& tx) {
  // to_regclass is NULL while the table does not exist: an empty database is version 0.
  pqxx::row exists = tx.exec_params1("SELECT to_regclass('schema_migrations') IS NOT NULL");
  if (!exists[0].as<bool>()) return 0;
  pqxx::row row = tx.exec_params1("SELECT coalesce(max(version), 0) FROM schema_migrations");
  return row[0].as<int>();
}

Status TooNew(int database_version) {
  return FailedPrecondition("database schema version " + std::to_string(database_version) +
                            " is newer than this binary's newest (" +
                            std::to_string(Store::LatestSchemaVersion()) +
                            "): upgrade ucudnn before using this database");
}

}  // namespace

Status CheckSchemaVersion(int database_version) {
  const int latest = Store::LatestSchemaVersion();
  if (database_version > latest) return TooNew(database_version);
  if (database_version < latest) {
    return FailedPrecondition("database schema version " + std::to_string(database_version) +
                              " is older than this binary's (" + std::to_string(latest) +
                              "): run `ucudnn migrate` (or let the server migrate at start)");
  }
  return Status::Ok();
}

int Store::LatestSchemaVersion() {
  const auto& migrations = EmbeddedMigrations();
  return migrations.empty() ? 0 : migrations.back().version;
}

Status Store::RecheckSchema() {
  UCUDNN_ASSIGN_OR_RETURN(const int version, SchemaVersion());
  const bool too_new = version > LatestSchemaVersion();
  if (too_new != impl_->schema_too_new.exchange(too_new)) {
    if (too_new) {
      spdlog::error("store: {}; writes stopped (nothing is enqueued, claimed or stored)",
                    TooNew(version).message());
    } else {
      spdlog::info("store: database schema version {} is known again: writes resumed", version);
    }
  }
  return too_new ? TooNew(version) : Status::Ok();
}

bool Store::schema_too_new() const { return impl_->schema_too_new.load(); }

Result<int> Store::SchemaVersion() {
  return impl_->Run("schema version", [&](pqxx::connection& conn) -> Result<int> {
    pqxx::read_transaction tx(conn);
    return CurrentVersion(tx);
  });
}

Result<MigrationSummary> Store::Migrate(std::optional<int> up_to) {
  if (up_to && (*up_to < 1 || *up_to > LatestSchemaVersion())) {
    return InvalidArgument("migrate: version " + std::to_string(*up_to) + " is not in [1, " +
                           std::to_string(LatestSchemaVersion()) + "]");
  }
  return impl_->Run("migrate", [&](pqxx::connection& conn) -> Result<MigrationSummary> {
    MigrationSummary summary;
    bool first = true;
    while (true) {
      pqxx::work tx(conn);
      // Held until this transaction ends; a second migrator waits here, then sees our work.
      // A migration may rewrite big tables: no per-statement limit, and waiting for the lock
      // behind another migrator is expected.
      tx.exec("SET LOCAL statement_timeout = 0");
      tx.exec_params("SELECT pg_advisory_xact_lock($1)", kMigrationLockKey);
      tx.exec(kCreateMigrationsTable);
      const int version = CurrentVersion(tx);
      if (first) {
        summary.from_version = version;
        first = false;
      }
      summary.to_version = version;
      if (version > LatestSchemaVersion()) return TooNew(version);

      const EmbeddedMigration* next = nullptr;
      for (const EmbeddedMigration& m : EmbeddedMigrations()) {
        if (m.version > version) {
          next = &m;
          break;
        }
      }
      if (next == nullptr || (up_to && next->version > *up_to)) {
        tx.commit();
        break;
      }
      spdlog::info("store: applying migration {} (schema {} -> {})", next->name, version,
                   next->version);
      try {
        tx.exec(std::string(next->sql));
      } catch (const pqxx::sql_error&) {
        // Name the migration that failed; the transaction rolls it back whole.
        return internal::MapCurrentException("migration " + std::string(next->name)).status;
      }
      tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", next->version,
                     std::string(next->name));
      tx.commit();
      summary.applied.emplace_back(next->name);
      summary.to_version = next->version;
    }
    if (summary.applied.empty()) {
      spdlog::info("store: schema is current (version {})", summary.to_version);
    } else {
      spdlog::info("store: applied {} migration(s); schema version {} -> {}",
                   summary.applied.size(), summary.from_version, summary.to_version);
    }
    return summary;
  });
}

}  // namespace ucudnn::store
