// Commands that talk to PostgreSQL directly (operators, batch imports).
#include <cstdio>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "ucudnn/store/import.h"
#include "ucudnn/store/store.h"

namespace ucudnn::cli {

namespace {

Result<std::unique_ptr<store::Store>> OpenStore(const std::string& url) {
  if (url.empty()) {
    return InvalidArgument("--database-url (or UCUDNN_DATABASE_URL) is required");
  }
  return store::Store::Open(url, 1);
}

}  // namespace

int RunMigrate(const std::string& database_url, int to_version) {
  auto db = OpenStore(database_url);
  if (!db.ok()) return Fail(db.status());
  auto summary = (*db)->Migrate(to_version > 0 ? std::optional<int>(to_version) : std::nullopt);
  if (!summary.ok()) return Fail(summary.status());
  if (summary->applied.empty()) {
    std::printf("schema is current (version %d)\n", summary->to_version);
  } else {
    std::printf("migrated from version %d to %d:", summary->from_version, summary->to_version);
    for (const std::string& name : summary->applied) std::printf(" %s", name.c_str());
    std::printf("\n");
  }
  return 0;
}

int RunImport(const std::string& database_url, const std::string& file) {
  auto db = OpenStore(database_url);
  if (!db.ok()) return Fail(db.status());
  auto imported = store::ImportTimingsFile(**db, file);
  if (!imported.ok()) return Fail(imported.status());
  std::printf("imported %lld timings from %s\n", static_cast<long long>(*imported), file.c_str());
  return 0;
}

}  // namespace ucudnn::cli
