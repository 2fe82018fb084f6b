// The real ucudnn-worker binary as a child process against a real PostgreSQL: SIGKILL mid-job
// (another worker finishes the job once the lease expired, timings exactly once), SIGTERM (exit 0,
// the job done or back in the queue), a stalled worker that lost its lease (writes nothing),
// --once, --help and the backend refusal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <pqxx/pqxx>
#include <regex>
#include <thread>

#include <httplib.h>

#include "support/postgres_fixture.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/store/store.h"
#include "ucudnn/worker/daemon.h"
#include "worker/worker_test_util.h"

namespace ucudnn::worker {
namespace {

using namespace ucudnn::worker::testing;  // NOLINT(google-build-using-namespace)
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

class WorkerProcessTest : public test_support::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (HasFatalFailure()) return;
    auto store = store::Store::Open(url(), 8);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    auto migrated = store_->Migrate();
    ASSERT_TRUE(migrated.ok()) << migrated.status().ToString();
    cpu_ = std::move(MakeBackend("cpu")).value();
  }

  std::string LogPath(const std::string& name) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return ::testing::TempDir() + "/ucudnn_worker_" + info->name() + "_" + name + "_" +
           std::to_string(getpid()) + ".log";
  }

  // Flags of a child worker on the CPU backend with a 2 s lease.
  std::vector<std::string> ChildFlags(std::vector<std::string> extra) {
    std::vector<std::string> flags = {"--database-url",      url(),   "--backend",       "cpu",
                                      "--worker-id-prefix",  "child", "--lease-seconds", "2",
                                      "--heartbeat-seconds", "0.5",   "--poll-seconds",  "0.1",
                                      "--log-level",         "debug"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }

  int64_t EnqueueSlowJob() {
    auto r =
        store_->EnqueueJob(cpu_->fingerprint(), SlowProblem(), kSlowMaxMicroBatch, kSlowPolicy);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->job_id : -1;
  }

  store::Job GetJob(int64_t id) {
    auto job = store_->GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : store::Job{};
  }

  bool RunningBy(int64_t id, const std::string& worker) {
    auto job = store_->GetJob(id);
    return job.ok() && job->state == store::JobState::kRunning && job->worker_id == worker;
  }

  std::vector<store::TimingRecord> Records(const ConvProblem& p) {
    auto records = store_->GetTimingRecords(cpu_->fingerprint(), p);
    EXPECT_TRUE(records.ok()) << records.status().ToString();
    return records.ok() ? *records : std::vector<store::TimingRecord>{};
  }

  // Every size x algorithm of SlowProblem() exactly once, all by `worker`.
  void ExpectSlowTimingsOnceBy(const std::string& worker) {
    const auto records = Records(SlowProblem());
    EXPECT_EQ(records.size(),
              ExpectedTimings(*cpu_, SlowProblem(), kSlowMaxMicroBatch, kSlowPolicy));
    for (const auto& r : records) EXPECT_EQ(r.measured_by, worker);
  }

  // An in-process worker that keeps polling until stopped.
  struct Rescuer {
    Rescuer(store::Store& store, const std::string& prefix)
        : daemon(store, CpuDevice(), FastConfig(prefix)), thread([this] { run = daemon.Run(); }) {}
    ~Rescuer() { Stop(); }
    void Stop() {
      if (thread.joinable()) {
        daemon.RequestStop();
        thread.join();
      }
    }
    Daemon daemon;
    Status run;
    std::thread thread;
  };

  std::unique_ptr<store::Store> store_;
  std::unique_ptr<ConvBackend> cpu_;
};

bool ExitedWith(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

TEST_F(WorkerProcessTest, SigkillLeavesTheJobToAnotherWorkerAfterTheLeaseExpires) {
  const int64_t id = EnqueueSlowJob();
  ChildWorker child(ChildFlags(SlowFlags()), LogPath("child"));
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(WaitUntil([&] { return RunningBy(id, "child:cpu"); })) << child.Log();
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_TRUE(RunningBy(id, "child:cpu")) << "the job must still be running when killed\n"
                                          << child.Log();
  child.Signal(SIGKILL);
  const auto status = child.WaitExit(seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);

  // The dead worker's job is still running under its lease, with nothing written.
  EXPECT_TRUE(RunningBy(id, "child:cpu"));
  EXPECT_TRUE(Records(SlowProblem()).empty());

  Rescuer rescuer(*store_, "rescuer");
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state == store::JobState::kDone; }))
      << "job state " << store::ToString(GetJob(id).state);
  rescuer.Stop();
  ASSERT_TRUE(rescuer.run.ok()) << rescuer.run.ToString();
  const store::Job job = GetJob(id);
  EXPECT_EQ(job.worker_id, "rescuer:cpu");
  EXPECT_EQ(job.attempts, 2);
  EXPECT_EQ(rescuer.daemon.stats().completed, 1);
  ExpectSlowTimingsOnceBy("rescuer:cpu");
}

TEST_F(WorkerProcessTest, SigtermExitsZeroAndReleasesTheJobAfterTheDrainTime) {
  const int64_t id = EnqueueSlowJob();
  std::vector<std::string> flags = SlowFlags();
  flags.insert(flags.end(), {"--drain-seconds", "0.5"});
  ChildWorker child(ChildFlags(flags), LogPath("child"));
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(WaitUntil([&] { return RunningBy(id, "child:cpu"); })) << child.Log();
  child.Signal(SIGTERM);
  const auto status = child.WaitExit(seconds(30));
  ASSERT_TRUE(status.has_value()) << "no exit after SIGTERM\n" << child.Log();
  EXPECT_TRUE(ExitedWith(*status, 0)) << child.Log();

  // Never stuck running: done, or back in the queue with nothing written.
  const store::Job job = GetJob(id);
  ASSERT_THAT(job.state, ::testing::AnyOf(store::JobState::kDone, store::JobState::kQueued))
      << child.Log();
  if (job.state == store::JobState::kQueued) {
    EXPECT_TRUE(Records(SlowProblem()).empty());
    EXPECT_EQ(job.attempts, 0);
    EXPECT_THAT(child.Log(), HasSubstr("released"));
    // ... and the next worker takes it at once, with no lease to wait for.
    Rescuer rescuer(*store_, "next");
    ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state == store::JobState::kDone; }));
    rescuer.Stop();
    ExpectSlowTimingsOnceBy("next:cpu");
  } else {
    ExpectSlowTimingsOnceBy("child:cpu");
  }
}

TEST_F(WorkerProcessTest, SigtermWithinTheDrainTimeFinishesTheJob) {
  const int64_t id = EnqueueSlowJob();
  std::vector<std::string> flags = SlowFlags();
  flags.insert(flags.end(), {"--drain-seconds", "120"});
  ChildWorker child(ChildFlags(flags), LogPath("child"));
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(WaitUntil([&] { return RunningBy(id, "child:cpu"); })) << child.Log();
  child.Signal(SIGTERM);
  const auto status = child.WaitExit(seconds(120));
  ASSERT_TRUE(status.has_value()) << child.Log();
  EXPECT_TRUE(ExitedWith(*status, 0)) << child.Log();
  const store::Job job = GetJob(id);
  EXPECT_EQ(job.state, store::JobState::kDone) << child.Log();
  EXPECT_EQ(job.worker_id, "child:cpu");
  ExpectSlowTimingsOnceBy("child:cpu");
}

TEST_F(WorkerProcessTest, AStalledWorkerThatLostItsLeaseWritesNothing) {
  const int64_t id = EnqueueSlowJob();
  ChildWorker child(ChildFlags(SlowFlags()), LogPath("child"));
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(WaitUntil([&] { return RunningBy(id, "child:cpu"); })) << child.Log();
  // Frozen (like a long GC pause or a suspended VM): no renewals, the lease runs out.
  {
    Rescuer rescuer(*store_, "rescuer");
    bool rescued = false;
    // A child frozen inside a renewal's transaction would hold the job's row lock (claims skip
    // locked rows): then let it go on a moment and freeze it again.
    for (int attempt = 0; attempt < 3 && !rescued; ++attempt) {
      child.Signal(SIGSTOP);
      rescued = WaitUntil([&] { return GetJob(id).state == store::JobState::kDone; }, seconds(15));
      if (!rescued) {
        child.Signal(SIGCONT);
        std::this_thread::sleep_for(milliseconds(100));
      }
    }
    ASSERT_TRUE(rescued) << child.Log();
    rescuer.Stop();
    ASSERT_TRUE(rescuer.run.ok());
  }
  child.Signal(SIGCONT);
  ASSERT_TRUE(WaitUntil([&] { return child.Log().find("lost the lease") != std::string::npos; }))
      << child.Log();
  child.Signal(SIGTERM);
  const auto status = child.WaitExit(seconds(30));
  ASSERT_TRUE(status.has_value()) << child.Log();
  EXPECT_TRUE(ExitedWith(*status, 0)) << child.Log();
  EXPECT_THAT(child.Log(), HasSubstr("abandoned"));

  const store::Job job = GetJob(id);
  EXPECT_EQ(job.state, store::JobState::kDone);
  EXPECT_EQ(job.worker_id, "rescuer:cpu");
  ExpectSlowTimingsOnceBy("rescuer:cpu");
}

TEST_F(WorkerProcessTest, OnceDrainsTheQueueAndExitsZero) {
  std::vector<int64_t> ids;
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    auto r =
        store_->EnqueueJob(cpu_->fingerprint(), TinyProblem(op, 2), 4, BatchPolicy::kPowerOfTwo);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ids.push_back(r->job_id);
  }
  ChildWorker child(ChildFlags({"--once", "--min-runs", "1", "--max-runs", "1"}), LogPath("child"));
  ASSERT_TRUE(child.started());
  const auto status = child.WaitExit(seconds(60));
  ASSERT_TRUE(status.has_value()) << child.Log();
  EXPECT_TRUE(ExitedWith(*status, 0)) << child.Log();
  for (int64_t id : ids) {
    const store::Job job = GetJob(id);
    EXPECT_EQ(job.state, store::JobState::kDone);
    EXPECT_EQ(job.worker_id, "child:cpu");
    const auto records = Records(job.problem);
    EXPECT_EQ(records.size(), ExpectedTimings(*cpu_, job.problem, 4, BatchPolicy::kPowerOfTwo));
  }
  const std::string log = child.Log();
  EXPECT_THAT(log, HasSubstr("backend: cpu"));
  EXPECT_THAT(log, HasSubstr("queue drained"));
}

// A database migrated by a newer ucudnn is refused as the server and the CLI refuse it: exit 1
// with the store's message, before registering or claiming anything.
TEST_F(WorkerProcessTest, RefusesANewerSchemaWithoutClaimingOrWriting) {
  const int64_t id = EnqueueSlowJob();
  ASSERT_GT(id, 0);
  const int newer = store::Store::LatestSchemaVersion() + 1;
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future')",
                   newer);
    tx.commit();
  }
  ChildWorker child(ChildFlags({"--once"}), LogPath("child"));
  ASSERT_TRUE(child.started());
  const auto status = child.WaitExit(seconds(60));
  ASSERT_TRUE(status.has_value()) << child.Log();
  EXPECT_TRUE(ExitedWith(*status, 1)) << child.Log();
  EXPECT_THAT(child.Log(), HasSubstr(store::CheckSchemaVersion(newer).message()));
  const store::Job job = GetJob(id);
  EXPECT_EQ(job.state, store::JobState::kQueued);
  EXPECT_EQ(job.attempts, 0);
  EXPECT_TRUE(Records(SlowProblem()).empty());
  pqxx::connection conn(url());
  pqxx::nontransaction tx(conn);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM workers")[0].as<int64_t>(), 0);
}

TEST_F(WorkerProcessTest, HelpAndBackendChoice) {
  {
    ChildWorker help({"--help"}, LogPath("help"));
    const auto status = help.WaitExit(seconds(30));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(ExitedWith(*status, 0));
    EXPECT_THAT(help.Log(), HasSubstr("UCUDNN_DATABASE_URL"));
    EXPECT_THAT(help.Log(), HasSubstr("--lease-seconds"));
  }
  {
    ChildWorker bad({"--database-url", url(), "--lease-seconds", "-1"}, LogPath("bad"));
    const auto status = bad.WaitExit(seconds(30));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(ExitedWith(*status, 2));
    EXPECT_THAT(bad.Log(), HasSubstr("--lease-seconds"));
  }
  if (GpuCount() == 0) {
    // auto on a machine without a GPU: refused, saying how to run on the CPU.
    ChildWorker refused({"--database-url", url()}, LogPath("auto"));
    const auto status = refused.WaitExit(seconds(30));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(ExitedWith(*status, 1)) << refused.Log();
    EXPECT_THAT(refused.Log(), HasSubstr("--backend cpu"));
  }
}

// The compile helper's mode (started by the worker itself, compile_pool.h): bad arguments are a
// usage error; without a GPU it cannot start.
TEST_F(WorkerProcessTest, CompileHelperModeChecksItsArguments) {
  const std::string dir = ::testing::TempDir();
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--compile-helper", "0"},
                                             {"--compile-helper", "x", dir},
                                             {"--compile-helper", "-1", dir}}) {
    ChildWorker bad(args, LogPath("compile_helper_bad"));
    const auto status = bad.WaitExit(seconds(30));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(ExitedWith(*status, 2)) << bad.Log();
  }
  if (GpuCount() == 0) {
    ChildWorker no_gpu({"--compile-helper", "0", dir}, LogPath("compile_helper_no_gpu"));
    const auto status = no_gpu.WaitExit(seconds(30));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(ExitedWith(*status, 1)) << no_gpu.Log();
    EXPECT_THAT(no_gpu.Log(), HasSubstr("compile helper"));
  }
}

// The metrics endpoint (--metrics-port), scraped while the worker benchmarks a job on the CPU
// backend and after it finished; the log shows the job's progress too.
TEST_F(WorkerProcessTest, MetricsEndpointShowsTheJobInHandAndItsProgress) {
  const int64_t id = EnqueueSlowJob();
  const int64_t total =
      static_cast<int64_t>(ExpectedTimings(*cpu_, SlowProblem(), kSlowMaxMicroBatch, kSlowPolicy));
  ChildWorker child(
      ChildFlags({"--metrics-port", "0", "--warmup-runs", "1", "--min-runs", "3", "--max-runs", "3",
                  "--config-budget-ms", "5000", "--prune-margin", "-1"}),
      LogPath("child"));
  ASSERT_TRUE(child.started());
  int port = 0;
  ASSERT_TRUE(WaitUntil([&] {
    std::smatch match;
    const std::string log = child.Log();
    static const std::regex kMetrics(R"(metrics at http://127\.0\.0\.1:([0-9]+)/metrics)");
    if (!std::regex_search(log, match, kMetrics)) return false;
    port = std::stoi(match[1].str());
    return true;
  })) << child.Log();
  httplib::Client http("127.0.0.1", port);
  auto scrape = [&]() -> std::string {
    auto result = http.Get("/metrics");
    return result && result->status == 200 ? result->body : "";
  };
  const std::string worker = "{worker=\"child:cpu\"}";
  const std::string in_hand = "ucudnn_worker_current_job" + worker + " " + std::to_string(id);
  const std::string of_total =
      "ucudnn_worker_current_job_configurations_total" + worker + " " + std::to_string(total);
  // While the job runs: it is in hand, with part of its configurations done.
  std::string during;
  ASSERT_TRUE(WaitUntil(
      [&] {
        during = scrape();
        return during.find(in_hand) != std::string::npos &&
               during.find("ucudnn_worker_current_job_configurations_done" + worker + " 0\n") ==
                   std::string::npos;
      },
      seconds(120)))
      << during << child.Log();
  EXPECT_THAT(during, HasSubstr(of_total));
  EXPECT_THAT(during, HasSubstr("ucudnn_worker_jobs_total{outcome=\"claimed\"} 1"));
  EXPECT_THAT(during, HasSubstr("ucudnn_worker_jobs_total{outcome=\"completed\"} 0"));
  EXPECT_THAT(during,
              ::testing::Not(HasSubstr("ucudnn_worker_last_heartbeat_timestamp_seconds 0\n")));
  // Served by the shared endpoint (ucudnn::metrics, prometheus-cpp's exposer).
  EXPECT_THAT(during, HasSubstr("# TYPE exposer_scrapes_total counter"));

  // Once done: idle, the job counted, every configuration counted once.
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state == store::JobState::kDone; }, seconds(180)))
      << child.Log();
  std::string after;
  ASSERT_TRUE(WaitUntil([&] {
    after = scrape();
    return after.find("ucudnn_worker_jobs_total{outcome=\"completed\"} 1") != std::string::npos;
  })) << after;
  EXPECT_THAT(after, HasSubstr("ucudnn_worker_current_job" + worker + " 0\n"));
  EXPECT_THAT(after, HasSubstr("ucudnn_worker_configurations_measured_total " +
                               std::to_string(total) + "\n"));
  EXPECT_EQ(static_cast<int64_t>(Records(SlowProblem()).size()), total);
  // The log's progress lines: configurations done of the total.
  EXPECT_THAT(child.Log(), ::testing::ContainsRegex("job " + std::to_string(id) + " .*: [0-9]+/" +
                                                    std::to_string(total) + " configurations"));
}

TEST_F(WorkerProcessTest, MetricsPortInUseFailsAtStart) {
  httplib::Server taken;
  const int port = taken.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  ChildWorker child(ChildFlags({"--metrics-port", std::to_string(port)}), LogPath("child"));
  ASSERT_TRUE(child.started());
  const auto status = child.WaitExit(seconds(60));
  ASSERT_TRUE(status.has_value()) << child.Log();
  EXPECT_TRUE(ExitedWith(*status, 1)) << child.Log();
  EXPECT_THAT(child.Log(),
              HasSubstr("metrics: cannot listen on 127.0.0.1:" + std::to_string(port)));
}

}  // namespace
}  // namespace ucudnn::worker
