// The schema migrations embedded in the library at build time (from migrations/NNNN_name.sql by
// store/cmake/embed_migrations.cmake), so binaries and bundles carry their schema with them.
#pragma once

#include <string_view>
#include <vector>

namespace ucudnn::store {

struct EmbeddedMigration {
  int version = 0;        // 1, 2, ... without gaps
  std::string_view name;  // "0001_init"
  std::string_view sql;   // the file's text, one or more statements
};

// Every embedded migration, ordered by version. Store::Migrate() applies them.
const std::vector<EmbeddedMigration>& EmbeddedMigrations();

}  // namespace ucudnn::store
