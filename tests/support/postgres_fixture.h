// A throw-away PostgreSQL 15 for integration tests (library `ucudnn_test_postgres`).
//
// One cluster per test binary, started on first use: initdb + postgres in a fresh temporary
// directory, listening on 127.0.0.1 at a free port (unix socket in the same directory),
// fsync off. It is stopped and its directory removed when the tests end, also when a test fails;
// on a crash (SIGABRT, SIGSEGV, ...) or SIGTERM/SIGINT the server is killed, and directories
// left by killed test binaries are removed by the next run. PostgreSQL refuses to run as root:
// when the tests run as root, initdb and postgres run as the system user `ucudnn-test` (created
// with useradd when missing).
//
// Usage, one fresh database per test:
//
//   class MyTest : public ucudnn::test_support::PostgresTest {};
//   TEST_F(MyTest, Works) { auto store = Store::Open(url()); ... }
//
// Fault tests call postgres().Stop() / Start() / Restart(); the port stays the same, so URLs
// stay valid. The server is a child of the test process, started from the thread that first
// uses it (normally the main thread): it is killed if that thread ends.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "ucudnn/core/status.h"

namespace ucudnn::test_support {

struct Identity;  // internal: the user PostgreSQL runs as

class PostgresServer {
 public:
  // initdb + start. kUnavailable (with the server log) when PostgreSQL is missing or fails.
  static Result<std::unique_ptr<PostgresServer>> Launch();
  ~PostgresServer();  // stops the server and removes its directory
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Fast shutdown (clients are disconnected); waits until the server exited.
  Status Stop();
  // Starts it again on the same port and directory; waits until it accepts connections.
  Status Start();
  Status Restart();
  bool running() const { return pid_ > 0; }

  int port() const { return port_; }
  const std::string& directory() const { return dir_; }
  // "postgresql://postgres@127.0.0.1:PORT/DATABASE"
  std::string UrlFor(std::string_view database) const;
  // Creates an empty database with a unique name (containing `hint` in a safe form) and returns
  // its URL.
  Result<std::string> CreateDatabase(std::string_view hint = "");
  // Runs `sql` (one or more statements, no parameters) in `database` as the superuser.
  Status Execute(std::string_view database, const std::string& sql);
  // The end of the server log, for failure messages.
  std::string LogTail(size_t bytes = 4000) const;

 private:
  PostgresServer() = default;
  Status StartOnce();
  // Fills directory()/data: a copy of the cached template, else initdb (then caches a
  // template). True when copied.
  Result<bool> InitDataDirectory(const Identity& who);

  std::string bindir_;
  std::string dir_;  // temporary directory: data/, the socket, server.log
  std::string log_path_;
  int port_ = 0;
  int pid_ = 0;   // postmaster pid while running
  int uid_ = -1;  // run as this user (-1: as ourselves)
  int gid_ = -1;
  int database_counter_ = 0;
};

// The server of this test binary, launched on first call; nullptr (and `error` set) when it
// cannot start.
PostgresServer* SharedPostgres(Status* error = nullptr);

// Base fixture: SetUp creates a fresh database in the shared server (the test fails with the
// server's log when PostgreSQL cannot start).
class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override;
  PostgresServer& postgres() { return *server_; }
  const std::string& url() const { return url_; }

 private:
  PostgresServer* server_ = nullptr;
  std::string url_;
};

}  // namespace ucudnn::test_support
