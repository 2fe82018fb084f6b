// What an operator hits first when starting the services (issue 14): a second server on an
// address already taken fails at start instead of sharing the port, and a server started with
// --no-migrate before the migration finished waits for the schema instead of exiting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <csignal>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "e2e/e2e_fixture.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "ucudnn/store/store.h"

namespace ucudnn::e2e {
namespace {

using ::testing::HasSubstr;

class OpsTest : public E2eTest {
 protected:
  // ucudnn-server with only the flags given (plus the database), as a bare child process: for
  // servers expected to fail or to wait before they listen.
  std::unique_ptr<ChildProcess> SpawnServer(const std::string& name,
                                            const std::string& database_url,
                                            const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {ServerBinary(), "--database-url", database_url, "--log-level",
                                     "info"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    std::string error;
    auto process = ChildProcess::Spawn(argv, LogPath("server_" + name), &error);
    EXPECT_NE(process, nullptr) << error;
    return process;
  }

  // A server and a CPU worker registered with it; the worker null when either failed.
  std::pair<ServerProcess*, WorkerProcess*> StartServerAndWorker() {
    ServerProcess* server = StartServer("s1");
    WorkerProcess* worker = server != nullptr ? StartWorker("w1") : nullptr;
    const bool registered = worker != nullptr && WaitWorkersRegistered(1);
    EXPECT_TRUE(registered);
    return {server, registered ? worker : nullptr};
  }

  // The exit status of a process expected to exit on its own; -1 when it did not.
  static int ExitCode(ChildProcess& process) {
    const auto status = process.WaitExit(seconds(30));
    if (!status.has_value() || !WIFEXITED(*status)) return -1;
    return WEXITSTATUS(*status);
  }
};

TEST_F(OpsTest, ASecondServerOnATakenAddressFailsAtStart) {
  ServerProcess* first = StartServer("first", {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_NE(first, nullptr);
  // Logged just after the gRPC address, which StartServer waited for.
  std::string metrics_address;
  ASSERT_TRUE(WaitUntil([&] {
    std::smatch match;
    const std::string log = first->process().Log();
    static const std::regex kMetrics(R"(metrics at http://127\.0\.0\.1:([0-9]+)/metrics)");
    if (!std::regex_search(log, match, kMetrics)) return false;
    metrics_address = "127.0.0.1:" + match[1].str();
    return true;
  })) << first->process().Log();

  // The gRPC address taken: exits at once (not retried for --start-timeout) and says why.
  auto same_grpc =
      SpawnServer("same_grpc", url(),
                  {"--listen", first->address(), "--metrics-listen=", "--start-timeout", "10m"});
  ASSERT_NE(same_grpc, nullptr);
  EXPECT_EQ(ExitCode(*same_grpc), 1) << same_grpc->Log();
  EXPECT_THAT(same_grpc->Log(), HasSubstr("cannot listen on " + first->address()));
  // ... and only that: no raw line of gRPC core's ("E1126 06:12:00.1 42 chttp2_server.cc:...]
  // UNKNOWN:No address added ...") before it (issue 22).
  static const std::regex kGrpcCoreLine("^[EWI][0-9]{4} [0-9:.]+ +[0-9]+ [a-z_./]+:[0-9]+\\]",
                                        std::regex::multiline);
  EXPECT_FALSE(std::regex_search(same_grpc->Log(), kGrpcCoreLine)) << same_grpc->Log();

  // The metrics address taken: the same.
  auto same_metrics = SpawnServer(
      "same_metrics", url(),
      {"--listen", "127.0.0.1:0", "--metrics-listen", metrics_address, "--start-timeout", "10m"});
  ASSERT_NE(same_metrics, nullptr);
  EXPECT_EQ(ExitCode(*same_metrics), 1) << same_metrics->Log();
  EXPECT_THAT(same_metrics->Log(), HasSubstr("metrics: cannot listen on " + metrics_address));

  // The first server still serves alone.
  v1::ListDevicesResponse devices;
  auto context = ContextWithDeadline(seconds(10));
  const grpc::Status listed =
      first->Catalog()->ListDevices(context.get(), v1::ListDevicesRequest(), &devices);
  EXPECT_TRUE(listed.ok()) << Describe(listed);
  EXPECT_TRUE(first->process().Running());
}

TEST_F(OpsTest, ServerWithoutMigrateWaitsForTheSchemaThenServes) {
  test_support::PostgresServer* postgres = test_support::SharedPostgres();
  ASSERT_NE(postgres, nullptr);
  auto empty = postgres->CreateDatabase("schema_wait");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();

  auto server = SpawnServer(
      "waiting", *empty,
      {"--listen", "127.0.0.1:0", "--metrics-listen=", "--no-migrate", "--schema-wait", "5m"});
  ASSERT_NE(server, nullptr);
  // It says what it waits for, and keeps waiting.
  ASSERT_TRUE(WaitUntil([&] {
    return server->Log().find("is older than this binary's") != std::string::npos &&
           server->Log().find("retrying in") != std::string::npos;
  })) << server->Log();
  EXPECT_TRUE(server->Running()) << server->Log();
  EXPECT_THAT(server->Log(), ::testing::Not(HasSubstr("listening on")));

  // The migration job finishes: the server comes up without being restarted.
  store::StoreOptions options;
  options.url = *empty;
  auto store = store::Store::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->Migrate().ok());
  EXPECT_TRUE(WaitUntil([&] { return server->Log().find("listening on") != std::string::npos; }))
      << server->Log();
  EXPECT_TRUE(server->Running());

  // --schema-wait 0: the old behaviour, an immediate FAILED_PRECONDITION.
  auto other = postgres->CreateDatabase("schema_no_wait");
  ASSERT_TRUE(other.ok());
  auto impatient = SpawnServer(
      "impatient", *other,
      {"--listen", "127.0.0.1:0", "--metrics-listen=", "--no-migrate", "--schema-wait", "0"});
  ASSERT_NE(impatient, nullptr);
  EXPECT_EQ(ExitCode(*impatient), 1) << impatient->Log();
  EXPECT_THAT(impatient->Log(), HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(impatient->Log(), HasSubstr("is older than this binary's"));
}

// A schema migrated past the running binaries (issue 22): the server turns NOT_SERVING and
// enqueues nothing, the worker claims nothing, both say why and keep running; once the schema is
// one they know again, both resume.
TEST_F(OpsTest, ANewerSchemaStopsTheRunningServerAndWorkerFromWriting) {
  auto [server, worker] = StartServerAndWorker();
  ASSERT_NE(worker, nullptr);
  const auto serving = [&] {
    auto stub = grpc::health::v1::Health::NewStub(server->NewChannel());
    grpc::health::v1::HealthCheckResponse response;
    const auto status = stub->Check(ContextWithDeadline(seconds(2)).get(), {}, &response);
    return status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  };
  ASSERT_TRUE(serving());

  ASSERT_TRUE(Query("INSERT INTO schema_migrations (version, name) VALUES (9999, 'future') "
                    "RETURNING version")
                  .ok());
  EXPECT_TRUE(WaitUntil([&] { return !serving(); }, seconds(30)));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return worker->process().Log().find("newer than this binary's newest") != std::string::npos;
      },
      seconds(30)))
      << worker->process().LogTail();

  // A plan request that would enqueue the tiny network's benchmarks enqueues nothing.
  v1::GetPlanResponse planned;
  (void)server->Planner()->GetPlan(ContextWithDeadline(seconds(30)).get(),
                                   PlanRequestFor(TinyNetwork(1), 0), &planned);
  EXPECT_EQ(QueryOr("SELECT count(*) FROM jobs"), 0);
  // A job queued behind their backs (by a store that has not re-checked) is not claimed.
  auto store = store::Store::Open(url(), 1);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const ConvProblem problem = TinyNetwork(2).front().problem;
  ASSERT_TRUE((*store)->EnqueueJob(CpuDevice(), problem, 4, BatchPolicy::kPowerOfTwo).ok());
  std::this_thread::sleep_for(seconds(1));  // 10 of the worker's poll intervals
  EXPECT_EQ(QueryOr("SELECT count(*) FROM jobs WHERE state = 'queued'"), 1);
  EXPECT_TRUE(server->process().Running());
  EXPECT_TRUE(worker->process().Running());

  // The binaries upgraded, as it were: the schema is theirs again, and they resume.
  ASSERT_TRUE(Query("DELETE FROM schema_migrations WHERE version = 9999 RETURNING version").ok());
  EXPECT_TRUE(WaitUntil([&] { return serving(); }, seconds(30)));
  EXPECT_TRUE(WaitUntil([&] {
    return QueryOr("SELECT count(*) FROM jobs WHERE state = 'done'") == 1;
  })) << worker->process().LogTail();
}

// A worker stopped cleanly (SIGTERM) is listed not alive at once, not once its heartbeat ages
// out (issue 22).
TEST_F(OpsTest, ACleanlyStoppedWorkerIsNotListedAlive) {
  auto [server, worker] = StartServerAndWorker();
  ASSERT_NE(worker, nullptr);
  const auto alive_workers = [&] {
    v1::ListWorkersRequest request;
    request.set_alive_only(true);
    v1::ListWorkersResponse response;
    const grpc::Status status =
        server->Catalog()->ListWorkers(ContextWithDeadline(seconds(10)).get(), request, &response);
    return status.ok() ? response.workers_size() : -1;
  };
  ASSERT_TRUE(WaitUntil([&] { return alive_workers() == 1; }));
  worker->process().Signal(SIGTERM);
  const auto status = worker->process().WaitExit(seconds(30));
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << worker->process().LogTail();
  EXPECT_EQ(alive_workers(), 0);
  EXPECT_EQ(QueryOr("SELECT count(*) FROM workers WHERE stopped_at IS NOT NULL"), 1);
}

}  // namespace
}  // namespace ucudnn::e2e
