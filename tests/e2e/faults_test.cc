// Faults of the whole system, each on real processes: a worker SIGKILLed in the middle of a job,
// PostgreSQL restarted under load, the server SIGKILLed while a training client runs, a
// read-only database and a full disk.
#include <gmock/gmock.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "e2e/e2e_fixture.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "session.h"
#include "support/operands.h"
#include "support/problems.h"
#include "ucudnn/store/store.h"

namespace ucudnn::e2e {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using test_support::HostOperands;
using test_support::MakeOperands;

// Slack on top of a call's deadline before it counts as hung: gRPC delivers DEADLINE_EXCEEDED a
// little after the deadline, on a loaded 2-core machine sometimes a lot after. Bounds a hang,
// not a speed.
constexpr double kDeadlineSlackSeconds = 3.0;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class FaultTest : public E2eTest {
 protected:
  // Health of `server` as grpc.health.v1 reports it ("" = the whole server).
  static bool Serving(const ServerProcess& server) {
    auto stub = grpc::health::v1::Health::NewStub(server.NewChannel());
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    const auto status = stub->Check(ContextWithDeadline(seconds(2)).get(), request, &response);
    return status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }

  // GetPlan, retried while the answer is UNAVAILABLE (the database is coming back); the last
  // status.
  static grpc::Status GetPlanRetrying(const ServerProcess& server,
                                      const v1::GetPlanRequest& request,
                                      v1::GetPlanResponse* response, milliseconds deadline,
                                      milliseconds give_up = seconds(60)) {
    auto stub = server.Planner();
    grpc::Status status;
    WaitUntil(
        [&] {
          status = stub->GetPlan(ContextWithDeadline(deadline).get(), request, response);
          return status.error_code() != grpc::StatusCode::UNAVAILABLE;
        },
        give_up);
    return status;
  }

  static v1::SubmitTimingsRequest Submission(const ConvProblem& problem, int count) {
    v1::SubmitTimingsRequest request;
    *request.mutable_device() = ToProto(CpuDevice());
    *request.mutable_problem() = ToProto(problem);
    request.set_measured_by("e2e-submitter");
    for (int i = 0; i < count; ++i) {
      v1::Timing* t = request.add_timings();
      t->set_micro_batch(1 + i / 2);
      t->set_algo(i % 2);
      t->set_time_ms(0.5 + 0.001 * i);
      t->set_samples(3);
      t->set_workspace_bytes(static_cast<uint64_t>(i) * 64);
      t->set_status(v1::TIMING_STATUS_OK);
    }
    return request;
  }

  static grpc::Status Submit(const ServerProcess& server, const v1::SubmitTimingsRequest& request,
                             v1::SubmitTimingsResponse* response) {
    auto context = ContextWithDeadline(seconds(30));
    context->AddMetadata("authorization", std::string("Bearer ") + kToken);
    return server.Timings()->SubmitTimings(context.get(), request, response);
  }
};

// A problem whose benchmark job takes many seconds with the victim's flags below (40 timed runs
// of 36 configurations; the direct algorithm dominates), so the victim is surely killed in the
// middle of it. The rescuer measures with the fast flags.
Kernel SlowKernel() {
  return {test_support::SquareConv(ConvOp::kBackwardFilter, 32, 16, 32), 12, "slow/bwd_filter"};
}

TEST_F(FaultTest, WorkerKilledMidJobTheJobCompletesOnTheOtherWorker) {
  ServerProcess* server = StartServer("a");
  ASSERT_NE(server, nullptr);
  // A 2 s lease: the victim's job is claimable again 2 s after its last renewal.
  WorkerProcess* victim = StartWorker("victim",
                                      {"--lease-seconds", "2", "--warmup-runs", "2", "--min-runs",
                                       "40", "--max-runs", "40", "--config-budget-ms", "5000"},
                                      /*fast=*/false);
  ASSERT_NE(victim, nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(1));

  v1::GetPlanRequest request = PlanRequestFor({SlowKernel()}, /*max_wait_ms=*/90000);
  request.set_policy(v1::BATCH_POLICY_ALL);  // 12 sizes x 3 algorithms
  // The client waits through the kill: its call must end with the complete plan.
  grpc::Status client_status;
  v1::GetPlanResponse response;
  std::thread client([&] {
    client_status =
        server->Planner()->GetPlan(ContextWithDeadline(seconds(120)).get(), request, &response);
  });
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{client};

  const std::string running_by_victim =
      "SELECT count(*) FROM jobs WHERE state = 'running' AND worker_id = 'victim:cpu'";
  ASSERT_TRUE(WaitUntil([&] {
    auto n = Query(running_by_victim);
    return n.ok() && *n == 1;
  })) << victim->process().LogTail();
  WorkerProcess* rescuer = StartWorker("rescuer", {"--lease-seconds", "5"});
  ASSERT_NE(rescuer, nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(2));
  auto still_running = Query(running_by_victim);
  ASSERT_TRUE(still_running.ok() && *still_running == 1)
      << "the job must still be running when the victim is killed";
  KillHard(victim->process());

  client.join();
  ASSERT_TRUE(client_status.ok()) << Describe(client_status);
  EXPECT_EQ(response.plan().status(), v1::PLAN_STATUS_COMPLETE) << response.plan().DebugString();
  EXPECT_GT(response.waited_ms(), 0u);

  // One job, claimed twice, completed by the rescuer; every timing written once, by it.
  auto jobs = store::Store::Open(url(), 1);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  auto list = (*jobs)->ListJobs(std::nullopt, 10);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  const store::Job& job = list->front();
  EXPECT_EQ(job.state, store::JobState::kDone);
  EXPECT_EQ(job.attempts, 2);
  EXPECT_EQ(job.worker_id, "rescuer:cpu");
  auto records = (*jobs)->GetTimingRecords(CpuDevice(), SlowKernel().problem);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_EQ(records->size(), ExpectedTimings(SlowKernel().problem, 12, BatchPolicy::kAll));
  std::set<std::pair<int64_t, int>> keys;
  for (const auto& r : *records) {
    EXPECT_EQ(r.measured_by, "rescuer:cpu");
    keys.emplace(r.timing.micro_batch, r.timing.algo);
  }
  EXPECT_EQ(keys.size(), records->size());
  auto rows = Query("SELECT count(*) FROM timings");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(static_cast<size_t>(*rows), records->size());
  EXPECT_TRUE(server->process().Running());
  EXPECT_TRUE(rescuer->process().Running());
}

TEST_F(FaultTest, PostgresRestartedUnderLoadNothingHangsAndEverythingRecovers) {
  // Every size of the policy: each done job's table is then the policy's whole (counted below).
  ServerProcess* a = StartServer("a", {"--search-sizes", "all"});
  ServerProcess* b = StartServer("b", {"--search-sizes", "all"});
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_TRUE(StartWorker("w1") != nullptr);
  ASSERT_TRUE(StartWorker("w2") != nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(2));
  {
    v1::GetPlanResponse warm;
    const auto status = a->Planner()->GetPlan(ContextWithDeadline(seconds(90)).get(),
                                              PlanRequestFor(TinyNetwork(0), 60000), &warm);
    ASSERT_TRUE(status.ok()) << Describe(status);
    ASSERT_EQ(warm.plan().status(), v1::PLAN_STATUS_COMPLETE);
  }

  struct Call {
    grpc::StatusCode code;
    double seconds;
    double deadline_seconds;
    std::string what;
    int server;
    Clock::time_point start;
    std::string message;
  };
  std::mutex mu;
  std::vector<Call> calls;
  std::atomic<bool> stop{false};
  auto load = [&](int thread_index) {
    std::unique_ptr<v1::PlannerService::Stub> planners[2] = {a->Planner(), b->Planner()};
    std::unique_ptr<v1::CatalogService::Stub> catalogs[2] = {a->Catalog(), b->Catalog()};
    for (int i = 0; !stop.load(); ++i) {
      const int s = (thread_index + i) % 2;
      const auto start = Clock::now();
      grpc::Status status;
      double deadline = 0;
      std::string what;
      switch (i % 3) {
        case 0: {  // planned already: answered from the caches
          deadline = 2;
          what = "GetPlan(warm)";
          v1::GetPlanResponse r;
          status = planners[s]->GetPlan(ContextWithDeadline(milliseconds(2000)).get(),
                                        PlanRequestFor(TinyNetwork(0), 0), &r);
          break;
        }
        case 1: {  // new problems: enqueues and waits for the workers
          deadline = 3;
          what = "GetPlan(new)";
          v1::GetPlanResponse r;
          status = planners[s]->GetPlan(ContextWithDeadline(milliseconds(3000)).get(),
                                        PlanRequestFor(TinyNetwork(1 + (i / 3) % 3), 1500), &r);
          break;
        }
        default: {
          deadline = 2;
          what = "ListJobs";
          v1::ListJobsResponse r;
          status = catalogs[s]->ListJobs(ContextWithDeadline(milliseconds(2000)).get(),
                                         v1::ListJobsRequest(), &r);
          break;
        }
      }
      {
        std::lock_guard lock(mu);
        calls.push_back({status.error_code(), SecondsSince(start), deadline, what, s, start,
                         status.error_message()});
      }
      // Failures come back at once while the database is away: leave the cores to the rest.
      std::this_thread::sleep_for(milliseconds(5));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(load, t);
  struct Stopper {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Stopper() {
      stop = true;
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } stopper{stop, threads};

  std::this_thread::sleep_for(seconds(1));
  const Status stopped = postgres().Stop();
  ASSERT_TRUE(stopped.ok()) << stopped.ToString();
  std::this_thread::sleep_for(seconds(2));  // the outage, under load
  const Status started = postgres().Start();
  ASSERT_TRUE(started.ok()) << started.ToString();
  const auto restarted = Clock::now();
  // Load through the recovery, until both servers answered a call started after the restart.
  auto recovered = [&](int server) {
    std::lock_guard lock(mu);
    for (const auto& call : calls) {
      if (call.server == server && call.start > restarted && call.code == grpc::StatusCode::OK &&
          call.what != "GetPlan(warm)") {
        return std::optional<double>(std::chrono::duration<double>(call.start - restarted).count());
      }
    }
    return std::optional<double>();
  };
  const bool both_recovered =
      WaitUntil([&] { return recovered(0).has_value() && recovered(1).has_value(); }, seconds(30));
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_TRUE(both_recovered) << "a server did not answer from the database again under load";

  // No call outlived its deadline (beyond the slack): nothing hangs on a dead database.
  std::map<std::string, int> by_code;
  std::map<grpc::StatusCode, std::string> example;
  double worst_overrun = -1e9;
  for (const auto& call : calls) {
    ++by_code[call.what + " " + std::to_string(static_cast<int>(call.code))];
    example.emplace(call.code, call.message);
    worst_overrun = std::max(worst_overrun, call.seconds - call.deadline_seconds);
    EXPECT_LE(call.seconds, call.deadline_seconds + kDeadlineSlackSeconds)
        << call.what << " ended with code " << static_cast<int>(call.code);
  }
  std::string summary;
  for (const auto& [key, n] : by_code) summary += key + ": " + std::to_string(n) + "; ";
  std::cout << "[          ] " << calls.size() << " calls (what code: count) " << summary
            << "worst overrun of a deadline " << worst_overrun << " s; first database answer "
            << "after the restart: server a " << recovered(0).value_or(-1) << " s, server b "
            << recovered(1).value_or(-1) << " s\n";
  for (const auto& [code, message] : example) {
    std::cout << "[          ] e.g. code " << static_cast<int>(code) << ": " << message << "\n";
  }
  // Every failure was a clean UNAVAILABLE or DEADLINE_EXCEEDED, nothing else.
  for (const auto& [code, message] : example) {
    EXPECT_THAT(code, AnyOf(grpc::StatusCode::OK, grpc::StatusCode::UNAVAILABLE,
                            grpc::StatusCode::DEADLINE_EXCEEDED))
        << message;
  }
  ASSERT_GT(calls.size(), 20u);

  // Recovery without restarting anything: both servers plan a new network, which the workers
  // benchmark against the restarted database.
  v1::GetPlanResponse fresh;
  const v1::GetPlanRequest request = PlanRequestFor(TinyNetwork(7), 60000);
  auto status = GetPlanRetrying(*b, request, &fresh, seconds(90));
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(fresh.plan().status(), v1::PLAN_STATUS_COMPLETE) << fresh.plan().DebugString();
  v1::GetPlanResponse again;
  status = GetPlanRetrying(*a, request, &again, seconds(30));
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(again.plan().plan_hash(), fresh.plan().plan_hash());
  EXPECT_TRUE(WaitUntil([&] { return Serving(*a) && Serving(*b); }, seconds(30)));

  // Every job done in the meantime wrote its whole table once: no timing lost or doubled.
  ASSERT_TRUE(WaitUntil([&] {
    auto live = Query("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')");
    return live.ok() && *live == 0;
  }));
  const size_t per_problem = ExpectedTimings(TinyNetwork(0)[0].problem, 8);
  auto incomplete = Query(
      "SELECT count(*) FROM jobs j WHERE j.state = 'done' AND (SELECT count(*) FROM timings t "
      "WHERE t.device_id = j.device_id AND t.problem_id = j.problem_id) <> " +
      std::to_string(per_problem));
  ASSERT_TRUE(incomplete.ok()) << incomplete.status().ToString();
  EXPECT_EQ(*incomplete, 0);
  auto failed = Query("SELECT count(*) FROM jobs WHERE state = 'failed'");
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(*failed, 0);
  auto orphans = Query(
      "SELECT count(*) FROM (SELECT DISTINCT device_id, problem_id FROM timings) t WHERE NOT "
      "EXISTS (SELECT 1 FROM jobs j WHERE j.device_id = t.device_id AND j.problem_id = "
      "t.problem_id AND j.state = 'done')");
  ASSERT_TRUE(orphans.ok());
  EXPECT_EQ(*orphans, 0);

  for (auto& s : servers_) EXPECT_TRUE(s->process().Running()) << s->name();
  for (auto& w : workers_) EXPECT_TRUE(w->process().Running()) << w->worker_id();
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
    norm += b[i] * static_cast<double>(b[i]);
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

TEST_F(FaultTest, ServerKilledWhileAClientRunsStepsContinueOnTheFallback) {
  ServerProcess* server = StartServer("a");
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(StartWorker("w1") != nullptr);
  constexpr uint64_t kLimit = 1 << 20;
  // Two kernels the cluster has timings for.
  const std::vector<Kernel> known = {TinyNetwork(0)[0], TinyNetwork(0)[1]};
  {
    v1::GetPlanResponse r;
    const auto status = server->Planner()->GetPlan(ContextWithDeadline(seconds(90)).get(),
                                                   PlanRequestFor(known, 60000, kLimit), &r);
    ASSERT_TRUE(status.ok()) << Describe(status);
    ASSERT_EQ(r.plan().status(), v1::PLAN_STATUS_COMPLETE);
  }

  // The training client: the client library's session on the CPU backend.
  CpuBackend backend;
  ClientConfig config;
  config.server = server->address();
  config.token = kToken;  // it asks for benchmarks
  config.cache_path = "";
  config.deadline_ms = 1000;
  config.retry_initial_ms = 20;
  config.retry_max_ms = 200;
  auto session = client::Session::Create(backend, config);
  ASSERT_NE(session, nullptr);
  auto workspace = backend.Allocate(kLimit);
  ASSERT_TRUE(workspace.ok()) << workspace.status().ToString();

  // A kernel no worker ever benchmarked: first seen after the server died.
  const Kernel unknown = TinyNetwork(5)[1];
  std::vector<Kernel> kernels = known;
  std::vector<HostOperands> operands;
  for (size_t i = 0; i < known.size(); ++i) {
    operands.push_back(MakeOperands(known[i].problem, known[i].mini_batch, 10 * i + 1));
  }
  int steps = 0;
  auto step = [&]() {
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Kernel& k = kernels[i];
      const Status status =
          session->Execute(k.problem, k.mini_batch, operands[i].Bind(k.problem.op),
                           (*workspace)->data(), kLimit, 1.0f, 0.0f);
      EXPECT_TRUE(status.ok()) << "step " << steps << " kernel " << k.name << ": "
                               << status.ToString();
      if (!status.ok()) return false;
    }
    ++steps;
    return true;
  };

  // Steps run (undivided at first), then on the plans once they arrived.
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (!step()) return true;
        return session->Stats().kernels_planned == known.size();
      },
      seconds(30)))
      << "the session never received its plans";
  ASSERT_EQ(session->Stats().kernels_planned, known.size());
  const ClientStats before_kill = session->Stats();

  KillHard(server->process());

  kernels.push_back(unknown);
  operands.push_back(MakeOperands(unknown.problem, unknown.mini_batch, 99));
  // Steps go on: the planned kernels on their plans, the new one undivided, while the session's
  // requests for it fail.
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (!step()) return true;
        return session->Stats().plan_request_failures > before_kill.plan_request_failures;
      },
      seconds(20)));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(step());
  const ClientStats after = session->Stats();
  EXPECT_GT(after.planned_calls, before_kill.planned_calls);
  EXPECT_GT(after.fallback_calls, before_kill.fallback_calls);
  EXPECT_EQ(after.kernels_planned, known.size());
  bool reported = false;
  for (const auto& report : session->Kernels()) {
    if (report.problem != CanonicalKey(unknown.problem)) continue;
    reported = true;
    EXPECT_NE(report.state, KernelReport::State::kPlanned);
    EXPECT_GT(report.fallback_calls, 0u);
  }
  EXPECT_TRUE(reported);

  // The fallback computed the right thing.
  HostOperands reference = MakeOperands(unknown.problem, unknown.mini_batch, 99);
  ASSERT_TRUE(backend
                  .Run(unknown.problem, unknown.mini_batch, kCpuAlgoDirect,
                       reference.Bind(unknown.problem.op), nullptr, 0, 1.0f, 0.0f)
                  .ok());
  EXPECT_LT(RelativeError(operands.back().out, reference.out), 1e-4);
  // And so did the plans.
  for (size_t i = 0; i < known.size(); ++i) {
    HostOperands ref = MakeOperands(known[i].problem, known[i].mini_batch, 10 * i + 1);
    ASSERT_TRUE(backend
                    .Run(known[i].problem, known[i].mini_batch, kCpuAlgoDirect,
                         ref.Bind(known[i].problem.op), nullptr, 0, 1.0f, 0.0f)
                    .ok());
    EXPECT_LT(RelativeError(operands[i].out, ref.out), 1e-4) << known[i].name;
  }

  // A raw stub to the dead server fails fast with UNAVAILABLE, within its deadline.
  const auto start = Clock::now();
  v1::GetPlanResponse r;
  const auto status = server->Planner()->GetPlan(ContextWithDeadline(seconds(2)).get(),
                                                 PlanRequestFor(known, 0), &r);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << Describe(status);
  EXPECT_LE(SecondsSince(start), 2.0 + kDeadlineSlackSeconds);
}

TEST_F(FaultTest, ReadOnlyDatabaseGivesClearErrorsNoCrashAndRecovers) {
  ServerProcess* server = StartServer("a");
  ASSERT_NE(server, nullptr);
  WorkerProcess* worker = StartWorker("w1");
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(1));

  const std::string db = DatabaseName(url());
  const std::string drop_connections =
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + db +
      "' AND pid <> pg_backend_pid()";
  ASSERT_TRUE(postgres()
                  .Execute("postgres",
                           "ALTER DATABASE \"" + db + "\" SET default_transaction_read_only = on")
                  .ok());
  // Connections pick the setting up when they (re)connect.
  ASSERT_TRUE(postgres().Execute("postgres", drop_connections).ok());
  auto before = CountRows(url());
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  // A plan for a new network needs to enqueue jobs: refused, saying why.
  v1::GetPlanResponse plan;
  auto status =
      GetPlanRetrying(*server, PlanRequestFor(TinyNetwork(0), 0), &plan, seconds(5), seconds(30));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << Describe(status);
  EXPECT_THAT(status.error_message(), HasSubstr("read-only"));

  // Timing submissions too.
  v1::SubmitTimingsResponse submitted;
  status = Submit(*server, Submission(TinyNetwork(0)[0].problem, 4), &submitted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << Describe(status);
  EXPECT_THAT(status.error_message(), HasSubstr("read-only"));

  // Reads still work.
  v1::ListDevicesResponse devices;
  status = server->Catalog()->ListDevices(ContextWithDeadline(seconds(5)).get(),
                                          v1::ListDevicesRequest(), &devices);
  EXPECT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(devices.devices_size(), 1);  // the worker's, registered before

  // Nothing was written; nobody crashed (the worker keeps trying to claim and heartbeat).
  std::this_thread::sleep_for(seconds(1));
  auto after = CountRows(url());
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, *before);
  EXPECT_TRUE(server->process().Running());
  EXPECT_TRUE(worker->process().Running());

  // Writable again: the same processes plan and benchmark.
  ASSERT_TRUE(
      postgres()
          .Execute("postgres", "ALTER DATABASE \"" + db + "\" RESET default_transaction_read_only")
          .ok());
  ASSERT_TRUE(postgres().Execute("postgres", drop_connections).ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        status = server->Planner()->GetPlan(ContextWithDeadline(seconds(90)).get(),
                                            PlanRequestFor(TinyNetwork(0), 60000), &plan);
        return status.error_code() != grpc::StatusCode::UNAVAILABLE &&
               status.error_code() != grpc::StatusCode::FAILED_PRECONDITION;
      },
      seconds(60)));
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(plan.plan().status(), v1::PLAN_STATUS_COMPLETE);
  status = Submit(*server, Submission(TinyNetwork(3)[0].problem, 4), &submitted);
  EXPECT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(submitted.stored(), 4);
}

// A tmpfs mounted for the test and detached when it ends.
class ScopedTmpfs {
 public:
  ScopedTmpfs(std::string path, const char* size) : path_(std::move(path)) {
    std::filesystem::create_directories(path_);
    if (mount("tmpfs", path_.c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~ScopedTmpfs() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

TEST_F(FaultTest, FullDiskGivesResourceExhaustedNothingPartialAndNoCrash) {
  ScopedTmpfs disk(::testing::TempDir() + "ucudnn_e2e_full_disk_" + std::to_string(getpid()), "1m");
  if (!disk.mounted()) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs to fill (" << disk.error()
                 << "); needs root with CAP_SYS_ADMIN";
  }
  // The tablespace directory must belong to the user PostgreSQL runs as.
  struct stat data_dir {};
  ASSERT_EQ(stat((postgres().directory() + "/data").c_str(), &data_dir), 0);
  ASSERT_EQ(chown(disk.path().c_str(), data_dir.st_uid, data_dir.st_gid), 0);
  ASSERT_EQ(chmod(disk.path().c_str(), 0700), 0);

  ServerProcess* server = StartServer("a");  // migrates the schema
  ASSERT_NE(server, nullptr);
  const std::string db = DatabaseName(url());
  const std::string tablespace = "e2e_full_" + std::to_string(getpid());
  ASSERT_TRUE(postgres()
                  .Execute("postgres",
                           "CREATE TABLESPACE " + tablespace + " LOCATION '" + disk.path() + "'")
                  .ok())
      << postgres().LogTail();
  auto move_timings = [&](const std::string& to) {
    return postgres().Execute(db, "ALTER TABLE timings SET TABLESPACE " + to +
                                      "; ALTER INDEX timings_pkey SET TABLESPACE " + to +
                                      "; ALTER INDEX timings_problem_id SET TABLESPACE " + to);
  };
  ASSERT_TRUE(move_timings(tablespace).ok()) << postgres().LogTail();
  struct Restore {
    std::function<void()> f;
    ~Restore() { f(); }
  } restore{[&] {
    (void)move_timings("pg_default");
    (void)postgres().Execute("postgres", "DROP TABLESPACE IF EXISTS " + tablespace);
  }};

  auto before = CountRows(url());
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  // About 8 MB of rows and index for a 1 MiB disk.
  v1::SubmitTimingsResponse submitted;
  const auto status = Submit(*server, Submission(TinyNetwork(0)[0].problem, 60000), &submitted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << Describe(status);
  EXPECT_THAT(status.error_message(), HasSubstr("disk is full"));
  auto after = CountRows(url());
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, *before) << "the failed transaction left rows behind";

  // The server lives on and writes what still fits (jobs are on the other disk).
  EXPECT_TRUE(server->process().Running());
  v1::GetPlanResponse plan;
  const auto planned = server->Planner()->GetPlan(ContextWithDeadline(seconds(10)).get(),
                                                  PlanRequestFor(TinyNetwork(0), 0), &plan);
  ASSERT_TRUE(planned.ok()) << Describe(planned);
  EXPECT_EQ(plan.plan().status(), v1::PLAN_STATUS_PARTIAL);
  EXPECT_EQ(plan.plan().missing_size(), static_cast<int>(kTinyNetworkProblems));
  auto jobs = Query("SELECT count(*) FROM jobs");
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(static_cast<size_t>(*jobs), kTinyNetworkProblems);
}

}  // namespace
}  // namespace ucudnn::e2e
