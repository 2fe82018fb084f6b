// The base fixture of the end-to-end tests: a fresh database in the test binary's throw-away
// PostgreSQL, and servers and workers started as child processes, all killed when the test ends
// (their logs printed when it failed).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "e2e/e2e_util.h"
#include "support/postgres_fixture.h"
#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::e2e {

class E2eTest : public test_support::PostgresTest {
 protected:
  void TearDown() override {
    if (HasFailure()) {
      for (auto& s : servers_) std::cerr << s->process().LogTail() << "\n";
      for (auto& w : workers_) std::cerr << w->process().LogTail() << "\n";
    }
    // Logs of a passing test are not kept.
    std::vector<std::string> logs;
    if (!HasFailure()) {
      for (auto& s : servers_) logs.push_back(s->process().log_path());
      for (auto& w : workers_) logs.push_back(w->process().log_path());
    }
    // Workers first: they would only log reconnection attempts once the servers are gone.
    workers_.clear();
    servers_.clear();
    for (const auto& log : logs) std::remove(log.c_str());
    test_support::PostgresTest::TearDown();
  }

  // Starts a server; nullptr (and a test failure) when it cannot start.
  ServerProcess* StartServer(const std::string& name, std::vector<std::string> extra = {}) {
    auto server = ServerProcess::Start(url(), name, std::move(extra));
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (!server.ok()) return nullptr;
    servers_.push_back(std::move(server).value());
    return servers_.back().get();
  }

  // Starts a CPU worker with the fast benchmark settings (plus `extra`).
  WorkerProcess* StartWorker(const std::string& prefix, std::vector<std::string> extra = {},
                             bool fast = true) {
    std::vector<std::string> flags = fast ? FastBenchmarkFlags() : std::vector<std::string>{};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto worker = WorkerProcess::Start(url(), prefix, std::move(flags));
    EXPECT_TRUE(worker.ok()) << worker.status().ToString();
    if (!worker.ok()) return nullptr;
    workers_.push_back(std::move(worker).value());
    return workers_.back().get();
  }

  // Waits until `count` workers are registered.
  bool WaitWorkersRegistered(int64_t count) {
    return WaitUntil([&] {
      auto n = QueryInt(url(), "SELECT count(*) FROM workers");
      return n.ok() && *n >= count;
    });
  }

  // Timings one complete benchmark job of `problem` up to `max_micro_batch` writes.
  static size_t ExpectedTimings(const ConvProblem& problem, int64_t max_micro_batch,
                                BatchPolicy policy = BatchPolicy::kPowerOfTwo) {
    static CpuBackend backend;
    return MicroBatchSizes(policy, max_micro_batch).size() * backend.Algorithms(problem.op).size();
  }

  Result<int64_t> Query(const std::string& sql) { return QueryInt(url(), sql); }
  // The query's integer, or -1 when it failed.
  int64_t QueryOr(const std::string& sql) {
    const Result<int64_t> n = Query(sql);
    return n.ok() ? *n : -1;
  }

  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
};

// Kills `process` (the whole group) and checks it was the kill that ended it.
inline void KillHard(ChildProcess& process) {
  process.Signal(SIGKILL);
  const auto status = process.WaitExit(seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
}

// An E2eTest that runs grpcurl lines through `buf curl` (tests/tools/grpcurl_via_buf.sh), skipped
// where buf is not installed.
class BufE2eTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped()) return;
    buf_ = BufBinary();
    if (buf_.empty()) GTEST_SKIP() << "buf is not installed (the README's commands install it)";
  }

  std::string buf_;
};

}  // namespace ucudnn::e2e
