// A small thread-safe pool of PostgreSQL connections. Broken connections are dropped and
// replaced lazily; after a failed connect, new connects wait for an exponential back-off and
// callers get kUnavailable at once meanwhile, so a database restart never blocks or throws.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <pqxx/connection>
#include <string>
#include <vector>

#include "ucudnn/core/backoff.h"
#include "ucudnn/core/status.h"
#include "ucudnn/store/store.h"

namespace ucudnn::store::internal {

class ConnectionPool {
 public:
  struct Config {
    std::string url;
    int size = 4;
    std::chrono::milliseconds acquire_timeout{10000};
    std::chrono::milliseconds backoff_initial{100};
    std::chrono::milliseconds backoff_max{5000};
    std::chrono::milliseconds statement_timeout{30000};
    // Run on every new connection (e.g. to define prepared statements); may throw pqxx errors.
    std::function<void(pqxx::connection&)> on_connect;
  };

  // A borrowed connection; goes back to the pool when destroyed (or is dropped if marked lost).
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();
    pqxx::connection& conn() { return *conn_; }
    void MarkLost() { lost_ = true; }

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, std::unique_ptr<pqxx::connection> conn);
    ConnectionPool* pool_;
    std::unique_ptr<pqxx::connection> conn_;
    bool lost_ = false;
  };

  explicit ConnectionPool(Config config);
  ~ConnectionPool();

  // A connection: an idle one, else a new one while fewer than `size` are open, else waits up to
  // acquire_timeout. kUnavailable when the database cannot be reached or the pool stays busy.
  Result<Lease> Acquire();
  PoolStats Stats() const;

  // Opens a standalone connection configured like pooled ones (statement timeout, on_connect
  // not run); the error text is libpq's. Used by Open to tell bad URLs from a down database.
  static std::unique_ptr<pqxx::connection> ConnectOrThrow(const std::string& url,
                                                          std::chrono::milliseconds timeout);

 private:
  Result<std::unique_ptr<pqxx::connection>> Connect();
  void Return(std::unique_ptr<pqxx::connection> conn, bool lost);

  const Config config_;
  mutable std::mutex mu_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_;
  int open_ = 0;  // idle + lent + being connected
  int in_use_ = 0;
  int64_t connects_ = 0;
  int64_t lost_ = 0;
  std::chrono::steady_clock::time_point next_connect_;  // back-off: no connect before this
  Backoff backoff_;  // guarded by mu_; counts the failed connects since the last success
  std::string last_connect_error_;
};

}  // namespace ucudnn::store::internal
