// Store's internals shared by its source files (store.cc, migrate.cc).
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <pqxx/connection>
#include <string_view>
#include <utility>

#include "connection_pool.h"
#include "errors.h"
#include "ucudnn/store/store.h"

namespace ucudnn::store {

class Store::Impl {
 public:
  explicit Impl(const StoreOptions& options);

  // Runs fn(connection&) on a pooled connection and turns every exception into a Status that
  // starts with `operation`. fn returns a Status or a Result<T>; so does Run.
  template <typename Fn>
  auto Run(std::string_view operation, Fn&& fn) -> decltype(fn(std::declval<pqxx::connection&>())) {
    auto lease = pool.Acquire();
    if (!lease.ok()) return lease.status().WithContext(std::string(operation));
    try {
      return fn(lease->conn());
    } catch (...) {
      internal::MappedError mapped = internal::MapCurrentException(operation);
      if (mapped.connection_lost || !lease->conn().is_open()) {
        lease->MarkLost();
        spdlog::warn("store: {} (connection dropped; it is replaced on next use)",
                     mapped.status.ToString());
      } else {
        spdlog::debug("store: {}", mapped.status.ToString());
      }
      return mapped.status;
    }
  }

  // kFailedPrecondition while the last RecheckSchema() found a schema newer than this binary's:
  // the first thing every write method does.
  Status WritesAllowed() const {
    if (!schema_too_new.load()) return Status::Ok();
    return FailedPrecondition("writes stopped: the database schema is newer than this binary's " +
                              std::to_string(Store::LatestSchemaVersion()) + " (upgrade ucudnn)");
  }

  StoreOptions options;
  internal::ConnectionPool pool;
  std::atomic<bool> schema_too_new{false};
};

}  // namespace ucudnn::store
