// The worker daemon in-process against a real PostgreSQL: draining the queue, two workers sharing
// it, a mix of device models, a database restart under a running worker, and the offline CSV
// round trip through ImportTimingsFile. CPU backend, tiny problems.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "support/postgres_fixture.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/store/import.h"
#include "ucudnn/store/store.h"
#include "ucudnn/worker/daemon.h"
#include "ucudnn/worker/offline.h"
#include "ucudnn/worker/worker_main.h"
#include "worker/fanout_util.h"
#include "worker/worker_test_util.h"

namespace ucudnn::worker {
namespace {

using namespace ucudnn::worker::testing;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

struct EnqueuedJob {
  int64_t id = 0;
  ConvProblem problem;
  int64_t max_micro_batch = 0;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
};

class WorkerDaemonTest : public test_support::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (HasFatalFailure()) return;
    store_ = OpenStore();
    ASSERT_NE(store_, nullptr);
    auto migrated = store_->Migrate();
    ASSERT_TRUE(migrated.ok()) << migrated.status().ToString();
  }

  std::unique_ptr<store::Store> OpenStore() {
    store::StoreOptions options;
    options.url = url();
    options.pool_size = 16;
    // Short back-off: the restart test should not wait seconds after the database is back.
    options.reconnect_backoff_initial = std::chrono::milliseconds(50);
    options.reconnect_backoff_max = std::chrono::milliseconds(300);
    auto store = store::Store::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  EnqueuedJob Enqueue(const DeviceFingerprint& device, const ConvProblem& problem,
                      int64_t max_micro_batch, BatchPolicy policy) {
    auto r = store_->EnqueueJob(device, problem, max_micro_batch, policy);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r.ok() && r->created);
    return {r.ok() ? r->job_id : -1, problem, max_micro_batch, policy};
  }

  store::Job GetJob(int64_t id) {
    auto job = store_->GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : store::Job{};
  }

  // The job is done by `worker_id` and its timing rows are exactly one table: every size x
  // algorithm once, all measured by that worker, measured times positive.
  void ExpectDoneOnce(const EnqueuedJob& e, ConvBackend& backend, const std::string& worker_id) {
    SCOPED_TRACE("job " + std::to_string(e.id) + " " + CanonicalKey(e.problem));
    const store::Job job = GetJob(e.id);
    EXPECT_EQ(job.state, store::JobState::kDone);
    EXPECT_EQ(job.worker_id, worker_id);
    auto records = store_->GetTimingRecords(backend.fingerprint(), e.problem);
    ASSERT_TRUE(records.ok()) << records.status().ToString();
    EXPECT_EQ(records->size(), ExpectedTimings(backend, e.problem, e.max_micro_batch, e.policy));
    std::set<std::pair<int64_t, int>> keys;
    int ok = 0;
    for (const store::TimingRecord& r : *records) {
      EXPECT_EQ(r.measured_by, worker_id);
      keys.insert({r.timing.micro_batch, r.timing.algo});
      if (r.timing.status == TimingStatus::kOk) {
        ++ok;
        EXPECT_GT(r.timing.time_ms, 0);
      }
    }
    EXPECT_EQ(keys.size(), records->size());
    EXPECT_GT(ok, 0);
  }

  std::unique_ptr<store::Store> store_;
};

TEST_F(WorkerDaemonTest, OnceDrainsItsFingerprintsQueueAndWritesTimings) {
  auto devices = CpuDevice();
  ConvBackend& backend = *devices[0].backend;
  const DeviceFingerprint device = backend.fingerprint();
  std::vector<EnqueuedJob> jobs = {
      Enqueue(device, TinyProblem(ConvOp::kForward, 4), 4, BatchPolicy::kPowerOfTwo),
      Enqueue(device, TinyProblem(ConvOp::kBackwardData, 4), 3, BatchPolicy::kAll),
      Enqueue(device, TinyProblem(ConvOp::kBackwardFilter, 4), 4, BatchPolicy::kUndivided),
      Enqueue(device, TinyProblem(ConvOp::kForward, 8), 2, BatchPolicy::kPowerOfTwo),
  };
  // Another device model's job stays queued: a worker claims its own fingerprint only.
  RenamedCpuBackend other("another cpu model");
  const EnqueuedJob foreign =
      Enqueue(other.fingerprint(), TinyProblem(ConvOp::kForward, 4), 4, BatchPolicy::kAll);

  DaemonConfig config = FastConfig("solo");
  config.once = true;
  Daemon daemon(*store_, std::move(devices), config);
  ASSERT_EQ(daemon.worker_ids(), std::vector<std::string>{"solo:cpu"});
  const Status run = daemon.Run();
  ASSERT_TRUE(run.ok()) << run.ToString();

  const DaemonStats stats = daemon.stats();
  EXPECT_EQ(stats.claimed, 4);
  EXPECT_EQ(stats.completed, 4);
  EXPECT_EQ(stats.failed + stats.released + stats.abandoned, 0);
  for (const EnqueuedJob& job : jobs) {
    ExpectDoneOnce(job, backend, "solo:cpu");
    EXPECT_EQ(GetJob(job.id).attempts, 1);
  }
  EXPECT_EQ(GetJob(foreign.id).state, store::JobState::kQueued);
  EXPECT_EQ(GetJob(foreign.id).attempts, 0);

  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status().ToString();
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ(workers->front().id, "solo:cpu");
  EXPECT_EQ(workers->front().host, "test-host");
  EXPECT_EQ(workers->front().device, device);
}

TEST_F(WorkerDaemonTest, TwoWorkersNeverClaimTheSameJob) {
  auto devices_a = CpuDevice();
  auto devices_b = CpuDevice();
  ConvBackend& backend = *devices_a[0].backend;
  std::vector<EnqueuedJob> jobs;
  for (int64_t channels = 1; channels <= 5; ++channels) {
    for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
      jobs.push_back(
          Enqueue(backend.fingerprint(), TinyProblem(op, channels), 4, BatchPolicy::kPowerOfTwo));
    }
  }
  DaemonConfig config_a = FastConfig("alpha");
  DaemonConfig config_b = FastConfig("beta");
  config_a.once = config_b.once = true;
  Daemon a(*store_, std::move(devices_a), config_a);
  Daemon b(*store_, std::move(devices_b), config_b);
  Status run_a, run_b;
  std::thread thread_a([&] { run_a = a.Run(); });
  std::thread thread_b([&] { run_b = b.Run(); });
  thread_a.join();
  thread_b.join();
  ASSERT_TRUE(run_a.ok()) << run_a.ToString();
  ASSERT_TRUE(run_b.ok()) << run_b.ToString();

  EXPECT_EQ(a.stats().claimed + b.stats().claimed, static_cast<int64_t>(jobs.size()));
  EXPECT_EQ(a.stats().completed + b.stats().completed, static_cast<int64_t>(jobs.size()));
  for (const EnqueuedJob& job : jobs) {
    const store::Job stored = GetJob(job.id);
    ASSERT_THAT(stored.worker_id, ::testing::AnyOf("alpha:cpu", "beta:cpu"));
    EXPECT_EQ(stored.attempts, 1);
    ExpectDoneOnce(job, backend, stored.worker_id);
  }
}

TEST_F(WorkerDaemonTest, EachDeviceModelClaimsOnlyItsOwnJobs) {
  std::vector<BenchmarkDevice> devices;
  devices.push_back({"gpu0", std::make_unique<RenamedCpuBackend>("model A")});
  devices.push_back({"gpu1", std::make_unique<RenamedCpuBackend>("model B")});
  devices.push_back({"gpu2", std::make_unique<RenamedCpuBackend>("model A")});
  ConvBackend& model_a = *devices[0].backend;
  ConvBackend& model_b = *devices[1].backend;
  std::vector<EnqueuedJob> jobs_a, jobs_b;
  for (int64_t channels = 1; channels <= 3; ++channels) {
    jobs_a.push_back(Enqueue(model_a.fingerprint(), TinyProblem(ConvOp::kForward, channels), 4,
                             BatchPolicy::kPowerOfTwo));
    jobs_b.push_back(Enqueue(model_b.fingerprint(), TinyProblem(ConvOp::kBackwardData, channels), 4,
                             BatchPolicy::kPowerOfTwo));
  }
  DaemonConfig config = FastConfig("mix");
  config.once = true;
  Daemon daemon(*store_, std::move(devices), config);
  const std::vector<uint64_t> hashes = daemon.device_hashes();
  ASSERT_EQ(hashes.size(), 3u);
  EXPECT_EQ(hashes[0], hashes[2]);
  EXPECT_NE(hashes[0], hashes[1]);
  const Status run = daemon.Run();
  ASSERT_TRUE(run.ok()) << run.ToString();

  for (const EnqueuedJob& job : jobs_a) {
    const store::Job stored = GetJob(job.id);
    ASSERT_THAT(stored.worker_id, ::testing::AnyOf("mix:gpu0", "mix:gpu2"));
    ExpectDoneOnce(job, model_a, stored.worker_id);
  }
  for (const EnqueuedJob& job : jobs_b) ExpectDoneOnce(job, model_b, "mix:gpu1");
  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  EXPECT_EQ(workers->size(), 3u);
}

TEST_F(WorkerDaemonTest, BenchmarkErrorsAreRecordedUntilTheJobFails) {
  auto broken = std::make_unique<RenamedCpuBackend>("broken device");
  broken->FailAllocations();
  const DeviceFingerprint device = broken->fingerprint();
  std::vector<BenchmarkDevice> devices;
  devices.push_back({"gpu0", std::move(broken)});
  const EnqueuedJob job =
      Enqueue(device, TinyProblem(ConvOp::kForward, 4), 4, BatchPolicy::kPowerOfTwo);
  DaemonConfig config = FastConfig("broken");
  config.once = true;
  config.max_attempts = 2;
  Daemon daemon(*store_, std::move(devices), config);
  const Status run = daemon.Run();
  ASSERT_TRUE(run.ok()) << run.ToString();

  EXPECT_EQ(daemon.stats().claimed, 2);
  EXPECT_EQ(daemon.stats().failed, 2);
  EXPECT_EQ(daemon.stats().completed, 0);
  const store::Job stored = GetJob(job.id);
  EXPECT_EQ(stored.state, store::JobState::kFailed);
  EXPECT_EQ(stored.attempts, 2);
  EXPECT_THAT(stored.error, HasSubstr("out of device memory"));
  auto records = store_->GetTimingRecords(device, job.problem);
  ASSERT_TRUE(records.ok());
  EXPECT_TRUE(records->empty());
}

// A sticky CUDA error mid-table: no timing is written, the attempt counts as failed and the job
// goes back to the queue (attempts left), the device's thread stops, and with no device left the
// daemon stops by itself and says why, so the process exits non-zero for its supervisor to
// restart it. A job that keeps killing devices fails for good after its attempts.
TEST_F(WorkerDaemonTest, ALostDeviceFailsTheAttemptAndStopsTheWorker) {
  auto flaky = std::make_unique<RenamedCpuBackend>("flaky gpu");
  flaky->LoseDeviceAfterRuns(5);  // a few configurations into the first job
  RenamedCpuBackend& backend = *flaky;
  const DeviceFingerprint device = flaky->fingerprint();
  std::vector<BenchmarkDevice> devices;
  devices.push_back({"gpu0", std::move(flaky)});
  const EnqueuedJob first =
      Enqueue(device, TinyProblem(ConvOp::kForward, 4), 8, BatchPolicy::kPowerOfTwo);
  const EnqueuedJob second =
      Enqueue(device, TinyProblem(ConvOp::kBackwardData, 4), 8, BatchPolicy::kPowerOfTwo);
  DaemonConfig config = FastConfig("flaky");  // not --once: it must stop on its own
  Daemon daemon(*store_, std::move(devices), config);
  const Status run = daemon.Run();
  EXPECT_EQ(run.code(), StatusCode::kDeviceLost) << run.ToString();
  EXPECT_THAT(run.message(), HasSubstr("gpu0"));
  EXPECT_THAT(run.message(), HasSubstr("cudaErrorIllegalAddress"));
  EXPECT_TRUE(backend.lost());

  const DaemonStats stats = daemon.stats();
  EXPECT_EQ(stats.claimed, 1);
  EXPECT_EQ(stats.failed, 1);
  EXPECT_EQ(stats.devices_lost, 1);
  EXPECT_EQ(stats.completed + stats.released + stats.abandoned, 0);
  for (const EnqueuedJob& e : {first, second}) {
    const store::Job job = GetJob(e.id);
    EXPECT_EQ(job.state, store::JobState::kQueued);
    if (e.id == first.id) {
      EXPECT_EQ(job.attempts, 1);
      EXPECT_THAT(job.error, HasSubstr("cudaErrorIllegalAddress"));
    } else {
      EXPECT_EQ(job.attempts, 0);
      EXPECT_TRUE(job.error.empty()) << job.error;
    }
    auto records = store_->GetTimingRecords(device, e.problem);
    ASSERT_TRUE(records.ok()) << records.status().ToString();
    EXPECT_TRUE(records->empty());
  }

  // A healthy worker of the same model takes the job over.
  std::vector<BenchmarkDevice> healthy;
  healthy.push_back({"gpu0", std::make_unique<RenamedCpuBackend>("flaky gpu")});
  ConvBackend& healthy_backend = *healthy[0].backend;
  DaemonConfig again = FastConfig("healthy");
  again.once = true;
  Daemon replacement(*store_, std::move(healthy), again);
  const Status rerun = replacement.Run();
  ASSERT_TRUE(rerun.ok()) << rerun.ToString();
  ExpectDoneOnce(first, healthy_backend, "healthy:gpu0");
  ExpectDoneOnce(second, healthy_backend, "healthy:gpu0");
}

// A completion whose reply was lost (CheckHolder): recognised from the job and the timing rows,
// also when it found the job widened and re-queued it with no holder.
TEST_F(WorkerDaemonTest, RecognisesItsCommittedCompletionOfAWidenedJob) {
  auto devices = CpuDevice();
  ConvBackend& backend = *devices[0].backend;
  const DeviceFingerprint device = backend.fingerprint();
  const std::string me = "me:cpu";
  const std::string other = "other:cpu";
  ASSERT_TRUE(store_->RegisterWorker(me, "test-host", device).ok());
  ASSERT_TRUE(store_->RegisterWorker(other, "test-host", device).ok());
  const EnqueuedJob e = Enqueue(device, TinyProblem(ConvOp::kForward, 4), 2, BatchPolicy::kAll);
  auto claimed = store_->ClaimJob(device.Hash(), me, std::chrono::seconds(60));
  ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status().ToString();
  const store::Job mine = **claimed;
  auto table = BenchmarkProblem(backend, e.problem, 2, BatchPolicy::kAll, FastBenchmarkOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  auto rows = [&] {
    auto records = store_->GetTimingRecords(device, e.problem);
    EXPECT_TRUE(records.ok()) << records.status().ToString();
    return records.ok() ? *records : std::vector<store::TimingRecord>{};
  };
  // Still held by us: nothing committed yet.
  EXPECT_FALSE(CompletionCommitted(mine, GetJob(e.id), rows(), table->entries, me));

  // Widened while we measured: our completion writes the rows and re-queues the job, unheld.
  auto widened = store_->EnqueueJob(device, e.problem, 4, BatchPolicy::kAll);
  ASSERT_TRUE(widened.ok() && widened->widened);
  auto completed = store_->CompleteJob(e.id, me, table->entries);
  ASSERT_TRUE(completed.ok()) << completed.status().ToString();
  ASSERT_EQ(*completed, store::JobState::kQueued);
  store::Job requeued = GetJob(e.id);
  EXPECT_EQ(requeued.state, store::JobState::kQueued);
  EXPECT_EQ(requeued.worker_id, "");
  EXPECT_TRUE(CompletionCommitted(mine, requeued, rows(), table->entries, me));

  // Claimed again by another worker meanwhile: still our completion.
  auto theirs = store_->ClaimJob(device.Hash(), other, std::chrono::seconds(60));
  ASSERT_TRUE(theirs.ok() && theirs->has_value()) << theirs.status().ToString();
  EXPECT_TRUE(CompletionCommitted(mine, GetJob(e.id), rows(), table->entries, me));
  // ... but not the other worker's: the rows are ours.
  EXPECT_FALSE(CompletionCommitted(**theirs, GetJob(e.id), rows(), table->entries, other));
  // Rows of ours older than a claim do not prove a completion of that claim.
  store::Job later_claim = **theirs;
  requeued.worker_id = "";
  requeued.state = store::JobState::kQueued;
  EXPECT_FALSE(CompletionCommitted(later_claim, requeued, rows(), table->entries, me));
  // A plain completion: done with us as the holder.
  store::Job done = mine;
  done.state = store::JobState::kDone;
  done.worker_id = me;
  EXPECT_TRUE(CompletionCommitted(mine, done, {}, table->entries, me));
}

// A worker with a small --workspace-cap (or little free memory) re-measuring a problem leaves
// the measurements of a worker with a larger cap in place; the rest of its table is written. The
// same for an offline file imported over them.
TEST_F(WorkerDaemonTest, WorkerLimitsNeverReplaceMeasurements) {
  auto devices = CpuDevice();
  ConvBackend& backend = *devices[0].backend;
  const DeviceFingerprint device = backend.fingerprint();
  const ConvProblem problem = TinyProblem(ConvOp::kForward, 4);
  auto measured =
      BenchmarkProblem(backend, problem, 4, BatchPolicy::kPowerOfTwo, FastBenchmarkOptions());
  ASSERT_TRUE(measured.ok()) << measured.status().ToString();
  // Queued first (a problem whose timings are all stored gets no job), then measured by the
  // big-cap worker before this one runs the job.
  const EnqueuedJob job = Enqueue(device, problem, 4, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(store_->PutTimings(device, problem, measured->entries, "big-cap:cpu").ok());
  DaemonConfig config = FastConfig("small-cap");
  config.once = true;
  config.benchmark.workspace_cap_bytes = 1;  // only the direct algorithm (no workspace) runs
  Daemon daemon(*store_, std::move(devices), config);
  ASSERT_TRUE(daemon.Run().ok());
  EXPECT_EQ(GetJob(job.id).state, store::JobState::kDone);

  auto records = store_->GetTimingRecords(device, problem);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), measured->entries.size());
  int kept = 0, ours = 0;
  for (const store::TimingRecord& r : *records) {
    SCOPED_TRACE("b=" + std::to_string(r.timing.micro_batch) +
                 " algo=" + std::to_string(r.timing.algo));
    EXPECT_EQ(r.timing.status, TimingStatus::kOk) << r.timing.error;
    if (r.timing.workspace_bytes > 1) {
      EXPECT_EQ(r.measured_by, "big-cap:cpu");
      ++kept;
    } else {
      EXPECT_EQ(r.measured_by, "small-cap:cpu");
      ++ours;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(ours, 0);

  // An offline file measured under the same small cap, imported over them.
  const std::string dir = ::testing::TempDir() + "/ucudnn_limits_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  OfflineRequest request;
  request.kernels = {{problem, 4, "conv/fwd"}};
  request.benchmark = FastBenchmarkOptions();
  request.benchmark.workspace_cap_bytes = 1;
  request.output = dir + "/small_cap.csv";
  auto offline_devices = CpuDevice();
  ASSERT_TRUE(RunOffline(offline_devices, request).ok());
  auto imported = ImportTimingsFileWithSummary(*store_, request.output);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(imported->kept_stored, kept);
  EXPECT_EQ(imported->rows, ours);
  records = store_->GetTimingRecords(device, problem);
  ASSERT_TRUE(records.ok());
  for (const store::TimingRecord& r : *records) {
    EXPECT_EQ(r.timing.status, TimingStatus::kOk) << r.timing.error;
    EXPECT_EQ(r.measured_by, r.timing.workspace_bytes > 1 ? "big-cap:cpu" : "import:small_cap.csv");
  }
  std::filesystem::remove_all(dir);
}

TEST_F(WorkerDaemonTest, CarriesOnAcrossADatabaseRestart) {
  auto devices = CpuDevice();
  ConvBackend& backend = *devices[0].backend;
  std::vector<EnqueuedJob> jobs;
  // Big enough (a few hundred ms each) that work is left when the database goes down.
  for (int64_t k = 9; k <= 16; ++k) {
    ConvProblem p = TinyProblem(ConvOp::kBackwardFilter, 16);
    p.h = p.w = 16;
    p.k = k;
    jobs.push_back(Enqueue(backend.fingerprint(), p, 8, BatchPolicy::kAll));
  }
  auto count_done = [&] {
    int done = 0;
    for (const EnqueuedJob& job : jobs) {
      auto stored = store_->GetJob(job.id);
      done += stored.ok() && stored->state == store::JobState::kDone;
    }
    return done;
  };

  DaemonConfig config = FastConfig("steady");
  config.benchmark.warmup_runs = 1;
  config.benchmark.min_runs = 3;
  config.benchmark.max_runs = 3;
  Daemon daemon(*store_, std::move(devices), config);
  Status run;
  std::thread thread([&] { run = daemon.Run(); });

  ASSERT_TRUE(WaitUntil([&] { return count_done() >= 1; }));
  const int done_before = count_done();
  const Status restarted = postgres().Restart();
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  ASSERT_TRUE(WaitUntil([&] { return store_->Ping().ok(); }));
  const int done_after_restart = count_done();
  const bool all_done = WaitUntil([&] { return count_done() == static_cast<int>(jobs.size()); });
  daemon.RequestStop();
  thread.join();
  ASSERT_TRUE(all_done) << "done: " << count_done() << " of " << jobs.size();
  ASSERT_TRUE(run.ok()) << run.ToString();
  // The restart happened with work left, and the same worker finished all of it.
  EXPECT_LT(done_before, static_cast<int>(jobs.size()));
  EXPECT_LT(done_after_restart, static_cast<int>(jobs.size()));
  EXPECT_EQ(daemon.stats().completed, static_cast<int64_t>(jobs.size()));
  for (const EnqueuedJob& job : jobs) ExpectDoneOnce(job, backend, "steady:cpu");
}

// With job notifications a worker whose queue was empty claims a new job at once, not at its
// next poll (a minute here): a cold model's jobs arrive in bursts.
TEST_F(WorkerDaemonTest, AJobQueuedWhileTheWorkerWaitsIsClaimedAtOnce) {
  auto devices = CpuDevice();
  ConvBackend& backend = *devices[0].backend;
  DaemonConfig config = FastConfig("listener");
  config.poll = std::chrono::milliseconds(60000);
  config.jobs_listen_url = url();
  Daemon daemon(*store_, std::move(devices), config);
  Status run;
  std::thread thread([&] { run = daemon.Run(); });
  // Registered, its first claim found the queue empty, and the listener has had time to LISTEN.
  ASSERT_TRUE(WaitUntil([&] { return daemon.stats().last_heartbeat_unix_seconds > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(daemon.stats().claimed, 0);

  const EnqueuedJob job =
      Enqueue(backend.fingerprint(), TinyProblem(ConvOp::kForward, 4), 2, BatchPolicy::kAll);
  const bool done = WaitUntil([&] { return GetJob(job.id).state == store::JobState::kDone; },
                              std::chrono::seconds(20));
  daemon.RequestStop();
  thread.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_TRUE(done) << "the job waited for the poll";
  ExpectDoneOnce(job, backend, "listener:cpu");
}

TEST_F(WorkerDaemonTest, StopWithoutDrainReleasesTheJobInHand) {
  auto devices = CpuDevice();
  const DeviceFingerprint device = devices[0].backend->fingerprint();
  const EnqueuedJob job = Enqueue(device, SlowProblem(), kSlowMaxMicroBatch, kSlowPolicy);
  DaemonConfig config = FastConfig("quitter");
  config.benchmark.min_runs = config.benchmark.max_runs = 10;
  config.benchmark.config_time_budget_ms = 5000;
  config.drain = std::chrono::milliseconds(0);
  Daemon daemon(*store_, std::move(devices), config);
  Status run;
  std::thread thread([&] { run = daemon.Run(); });
  ASSERT_TRUE(WaitUntil([&] { return GetJob(job.id).state == store::JobState::kRunning; }));
  daemon.RequestStop();
  thread.join();
  ASSERT_TRUE(run.ok()) << run.ToString();

  const store::Job stored = GetJob(job.id);
  if (stored.state == store::JobState::kDone) {
    GTEST_SKIP() << "the job finished before the stop request; nothing to release";
  }
  EXPECT_EQ(stored.state, store::JobState::kQueued);
  EXPECT_EQ(stored.attempts, 0);  // a release gives the attempt back
  EXPECT_EQ(daemon.stats().released, 1);
  auto records = store_->GetTimingRecords(device, job.problem);
  ASSERT_TRUE(records.ok());
  EXPECT_TRUE(records->empty());
}

// The one case of this file that needs a GPU: the cudnn backend on every visible GPU, one
// benchmarking thread and worker per GPU, each claiming the jobs of its own fingerprint. With
// several GPUs of one model, four jobs per GPU are queued and every GPU's thread must finish some
// of them: the threads work side by side, not one after another.
TEST_F(WorkerDaemonTest, BenchmarksOnEveryGpuWithTheCudnnBackend) {
  if (GpuCount() == 0) GTEST_SKIP() << "no GPU visible: the cudnn backend cannot run here";
  WorkerOptions options;
  options.backend = "auto";
  auto devices = MakeBenchmarkDevices(options);
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), static_cast<size_t>(GpuCount()));
  std::map<uint64_t, int> gpus_of_fingerprint;
  for (const BenchmarkDevice& device : *devices) {
    EXPECT_EQ(device.backend->fingerprint().backend, "cudnn");
    ++gpus_of_fingerprint[device.backend->fingerprint().Hash()];
  }
  std::vector<std::pair<EnqueuedJob, ConvBackend*>> jobs;
  std::set<uint64_t> enqueued;
  for (const BenchmarkDevice& device : *devices) {
    const uint64_t hash = device.backend->fingerprint().Hash();
    if (!enqueued.insert(hash).second) continue;
    const int count = std::max(3, 4 * gpus_of_fingerprint[hash]);
    for (int i = 0; i < count; ++i) {
      const ConvOp op = static_cast<ConvOp>(i % 3);
      jobs.emplace_back(Enqueue(device.backend->fingerprint(), TinyProblem(op, 8 + i), 8,
                                BatchPolicy::kPowerOfTwo),
                        device.backend.get());
    }
  }
  const size_t gpu_count = devices->size();
  DaemonConfig config = FastConfig("gpu-node");
  config.once = true;
  Daemon daemon(*store_, std::move(devices).value(), config);
  const Status run = daemon.Run();
  ASSERT_TRUE(run.ok()) << run.ToString();
  std::map<std::string, int> jobs_of_worker;
  for (const auto& [job, backend] : jobs) {
    const store::Job stored = GetJob(job.id);
    EXPECT_THAT(stored.worker_id, ::testing::StartsWith("gpu-node:gpu"));
    ++jobs_of_worker[stored.worker_id];
    ExpectDoneOnce(job, *backend, stored.worker_id);
  }
  std::string share;
  for (const auto& [worker, n] : jobs_of_worker) share += worker + ": " + std::to_string(n) + " ";
  std::cout << "[          ] jobs per GPU worker: " << share << "\n";
  EXPECT_EQ(jobs_of_worker.size(), gpu_count) << "not every GPU's thread finished a job: " << share;
}

TEST_F(WorkerDaemonTest, OfflineCsvRoundTripsThroughImport) {
  auto devices = CpuDevice();
  ConvBackend& backend = *devices[0].backend;
  const std::string dir =
      ::testing::TempDir() + "/ucudnn_worker_offline_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/timings.csv";

  OfflineRequest request;
  request.kernels = {
      {TinyProblem(ConvOp::kForward, 3), 4, "conv1/fwd"},
      {TinyProblem(ConvOp::kBackwardData, 3), 4, "conv1/bwd_data"},
      {TinyProblem(ConvOp::kBackwardFilter, 3), 4, "conv1/bwd_filter"},
      {TinyProblem(ConvOp::kForward, 3), 2, "conv1_again/fwd"},  // same problem: measured once
  };
  request.policy = BatchPolicy::kPowerOfTwo;
  request.benchmark = FastBenchmarkOptions();
  request.output = path;
  request.notes = {"network: tiny test; batch: 4"};
  auto summary = RunOffline(devices, request);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->problems, 3);
  EXPECT_EQ(summary->device, backend.fingerprint());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto header = ParseDeviceHeader(text.str());
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(*header, backend.fingerprint());
  EXPECT_THAT(text.str(), HasSubstr("# network: tiny test; batch: 4"));
  auto tables = ReadTimingCsvFile(path);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_EQ(tables->size(), 3u);

  auto imported = ImportTimingsFileWithSummary(*store_, path);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(imported->problems, 3);
  EXPECT_EQ(imported->rows, summary->timings);
  // Again, through the name the CLI calls: the rows are replaced, not added.
  auto again = store::ImportTimingsFile(*store_, path);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, summary->timings);

  auto by_key = [](std::vector<Timing> v) {
    std::sort(v.begin(), v.end(), [](const Timing& x, const Timing& y) {
      return std::pair(x.micro_batch, x.algo) < std::pair(y.micro_batch, y.algo);
    });
    return v;
  };
  for (const auto& [key, entry] : *tables) {
    SCOPED_TRACE(key);
    EXPECT_EQ(entry.table.entries.size(),
              ExpectedTimings(backend, entry.problem, 4, BatchPolicy::kPowerOfTwo));
    EXPECT_EQ(entry.mini_batch, 4);
    EXPECT_EQ(entry.layer, "conv1");
    auto stored = store_->GetTimings(backend.fingerprint(), entry.problem);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    EXPECT_EQ(by_key(stored->entries), by_key(entry.table.entries));
    auto records = store_->GetTimingRecords(backend.fingerprint(), entry.problem);
    ASSERT_TRUE(records.ok());
    for (const auto& r : *records) EXPECT_EQ(r.measured_by, "import:timings.csv");
  }

  // A file without the device header needs the device named.
  const std::string bare = dir + "/bare.csv";
  {
    auto csv = WriteTimingCsv(*tables);
    ASSERT_TRUE(csv.ok());
    std::ofstream(bare) << *csv;
  }
  const Status refused = ImportTimingsFile(*store_, bare).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("device"));
  RenamedCpuBackend other("named on import");
  auto named = ImportTimingsFileWithSummary(*store_, bare, other.fingerprint());
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->rows, summary->timings);
  // ... and a named device must agree with a header.
  EXPECT_EQ(ImportTimingsFileWithSummary(*store_, path, other.fingerprint()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ImportTimingsFile(*store_, dir + "/missing.csv").status().code(),
            StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// Fan-out: three workers of one fingerprint share a network's queue (one job per problem), and
// every timing of every job is stored exactly once, by the worker that completed the job.
TEST_F(WorkerDaemonTest, ThreeWorkersDrainANetworksQueueStoringEveryTimingOnce) {
  const std::string device_name = "fan-out model";
  const SleepingBackend reference(device_name, std::chrono::microseconds(0));
  auto kernels = NetworkKernels("resnet18", 8);
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  std::vector<EnqueuedJob> jobs;
  for (const Kernel& k : UniqueKernels(*kernels)) {
    jobs.push_back(Enqueue(reference.fingerprint(), k.problem, 8, BatchPolicy::kPowerOfTwo));
  }
  ASSERT_GT(jobs.size(), 20u);
  const DrainResult drained =
      DrainWithWorkers(*store_, 3, device_name, std::chrono::microseconds(500), FastConfig("x"));
  ASSERT_TRUE(drained.status.ok()) << drained.status.ToString();
  EXPECT_EQ(drained.claimed, static_cast<int64_t>(jobs.size()));
  EXPECT_EQ(drained.completed, static_cast<int64_t>(jobs.size()));
  SleepingBackend backend(device_name, std::chrono::microseconds(0));
  for (const EnqueuedJob& job : jobs) {
    const store::Job stored = GetJob(job.id);
    ASSERT_THAT(stored.worker_id, ::testing::AnyOf("fan0:gpu0", "fan1:gpu0", "fan2:gpu0"));
    EXPECT_EQ(stored.attempts, 1);
    ExpectDoneOnce(job, backend, stored.worker_id);
  }
}

// A GPU whose activity the test switches: idle for its first `idle_samples` samples, then busy
// (another process, high utilization) until `idle_again`.
class SwitchedProbe : public GpuActivityProbe {
 public:
  explicit SwitchedProbe(int idle_samples) : idle_samples_(idle_samples) {}
  std::string_view name() const override { return "switched"; }
  Result<GpuActivitySample> Sample() override {
    const int n = samples++;
    if (idle_again.load() || n < idle_samples_) return GpuActivitySample{{1}, 0, {}};
    return GpuActivitySample{{1, 2}, 95, {1, 2}};
  }
  std::atomic<bool> idle_again{false};
  std::atomic<int> samples{0};

 private:
  const int idle_samples_;
};

// One device of `name` gated by `probe` (the worker's pid is 1), polling every 5 ms.
std::vector<BenchmarkDevice> GatedDevice(const std::string& name,
                                         std::unique_ptr<GpuActivityProbe> probe,
                                         std::chrono::milliseconds max_pause) {
  IdleGateConfig gate_config;
  gate_config.self_pid = 1;
  gate_config.poll = std::chrono::milliseconds(5);
  gate_config.sample_interval = std::chrono::milliseconds(0);
  gate_config.max_pause = max_pause;
  std::vector<BenchmarkDevice> devices;
  devices.emplace_back("gpu0", std::make_unique<RenamedCpuBackend>(name),
                       std::make_unique<IdleGate>(std::move(probe), gate_config));
  return devices;
}

// The idle gate: while another process uses the GPU nothing is claimed; once it is idle the job
// is measured and its timings are stored with what the gate saw.
TEST_F(WorkerDaemonTest, ABusyGpuIsNotClaimedAndTimingsRecordTheirConditions) {
  auto probe = std::make_unique<SwitchedProbe>(0);
  SwitchedProbe& gpu = *probe;
  auto devices = GatedDevice("gated model", std::move(probe), std::chrono::milliseconds(0));
  ConvBackend& backend = *devices[0].backend;
  const EnqueuedJob job =
      Enqueue(backend.fingerprint(), TinyProblem(ConvOp::kForward, 4), 4, BatchPolicy::kPowerOfTwo);
  DaemonConfig config = FastConfig("gated");
  config.once = true;
  Daemon daemon(*store_, std::move(devices), config);
  Status run;
  std::thread runner([&] { run = daemon.Run(); });
  ASSERT_TRUE(WaitUntil([&] { return gpu.samples.load() >= 20; }));
  EXPECT_EQ(daemon.stats().claimed, 0);
  EXPECT_EQ(GetJob(job.id).state, store::JobState::kQueued);
  EXPECT_GE(daemon.stats().idle_gate_pauses, 1);
  gpu.idle_again = true;
  runner.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  ExpectDoneOnce(job, backend, "gated:gpu0");
  auto records = store_->GetTimingRecords(backend.fingerprint(), job.problem);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  for (const store::TimingRecord& r : *records) {
    EXPECT_THAT(r.conditions, ::testing::HasSubstr("\"idle_gate\": \"switched\""));
    EXPECT_THAT(r.conditions, ::testing::HasSubstr("\"contended\": false"));
  }
}

// Rows written without conditions (imports, framework times, rows from before the column) read
// as unknown.
TEST_F(WorkerDaemonTest, TimingsWithoutConditionsReadUnknown) {
  auto backend = std::move(MakeBackend("cpu")).value();
  Timing t;
  t.micro_batch = 1;
  t.algo = 0;
  t.time_ms = 0.5;
  t.samples = 3;
  const ConvProblem problem = TinyProblem(ConvOp::kForward, 4);
  ASSERT_TRUE(store_->PutTimings(backend->fingerprint(), problem, {t}, "test").ok());
  auto records = store_->GetTimingRecords(backend->fingerprint(), problem);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ(records->front().conditions, "{\"idle_gate\": \"unknown\"}");
}

// A GPU busy for longer than the gate's max pause mid-benchmark: what was measured is stored
// (nothing lost), the job goes back to the queue, nothing is claimed while the GPU stays busy,
// and once it is idle the job is measured to the end and done.
TEST_F(WorkerDaemonTest, APauseLongerThanTheMaximumStoresWhatWasMeasuredAndReleasesTheJob) {
  // Idle for the claim (3 samples) and three configurations (a look before and after each),
  // then busy until the test says otherwise.
  auto probe = std::make_unique<SwitchedProbe>(9);
  SwitchedProbe& turning = *probe;
  auto devices = GatedDevice("paused model", std::move(probe), std::chrono::milliseconds(50));
  ConvBackend& backend = *devices[0].backend;
  const EnqueuedJob job =
      Enqueue(backend.fingerprint(), TinyProblem(ConvOp::kForward, 4), 4, BatchPolicy::kPowerOfTwo);
  DaemonConfig config = FastConfig("paused");
  config.once = true;
  Daemon daemon(*store_, std::move(devices), config);
  Status run;
  std::thread runner([&] { run = daemon.Run(); });
  ASSERT_TRUE(WaitUntil([&] { return daemon.stats().released == 1; }));
  EXPECT_EQ(GetJob(job.id).state, store::JobState::kQueued);
  auto partial = store_->GetTimingRecords(backend.fingerprint(), job.problem);
  ASSERT_TRUE(partial.ok()) << partial.status().ToString();
  EXPECT_EQ(partial->size(), 3u);
  for (const store::TimingRecord& r : *partial) EXPECT_EQ(r.timing.status, TimingStatus::kOk);
  // Still busy: not claimed again.
  const int seen = turning.samples.load();
  ASSERT_TRUE(WaitUntil([&] { return turning.samples.load() >= seen + 6; }));
  EXPECT_EQ(daemon.stats().claimed, 1);
  turning.idle_again = true;
  runner.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(daemon.stats().claimed, 2);
  ExpectDoneOnce(job, backend, "paused:gpu0");
}

// The search prior: a configuration that lost by a wide margin on two nearby problems this
// device's done jobs measured is not timed at large micro-batch sizes of a new problem; with
// use_prior off (--exhaustive) it is.
TEST_F(WorkerDaemonTest, ConfigurationsThatLostOnEveryNearbyProblemAreNotTimedAtLargeSizes) {
  auto make_devices = [] {
    std::vector<BenchmarkDevice> devices;
    devices.emplace_back("gpu0", std::make_unique<RenamedCpuBackend>("prior model"));
    return devices;
  };
  RenamedCpuBackend reference("prior model");
  const DeviceFingerprint device = reference.fingerprint();
  ASSERT_TRUE(store_->RegisterWorker("seed:gpu0", "test-host", device).ok());
  // Two nearby problems done, algorithm 1 four times slower than algorithm 0 at 16 and 32.
  for (int64_t channels : {4, 8}) {
    const EnqueuedJob seed =
        Enqueue(device, TinyProblem(ConvOp::kForward, channels), 32, BatchPolicy::kPowerOfTwo);
    auto claimed = store_->ClaimJob(device.Hash(), "seed:gpu0", std::chrono::seconds(30));
    ASSERT_TRUE(claimed.ok() && claimed->has_value());
    std::vector<Timing> timings;
    for (int64_t b : MicroBatchSizes(BatchPolicy::kPowerOfTwo, 32)) {
      for (int algo : {0, 1, 2}) {
        Timing t;
        t.micro_batch = b;
        t.algo = algo;
        t.time_ms = (algo == 1 ? 4.0 : 1.0 + 0.1 * algo) * static_cast<double>(b);
        t.samples = 5;
        timings.push_back(t);
      }
    }
    ASSERT_TRUE(store_->CompleteJob(seed.id, "seed:gpu0", timings).ok());
  }
  for (bool use_prior : {true, false}) {
    SCOPED_TRACE(use_prior ? "with the prior" : "exhaustive");
    ConvProblem problem = TinyProblem(ConvOp::kForward, 6);
    problem.k = use_prior ? 6 : 7;  // a new problem each time
    const EnqueuedJob job = Enqueue(device, problem, 32, BatchPolicy::kPowerOfTwo);
    DaemonConfig config = FastConfig(use_prior ? "prior" : "full");
    config.once = true;
    config.use_prior = use_prior;
    config.benchmark.prune_margin = 0.10;  // the prior works with the probes
    config.benchmark.skip_factor = 0;
    Daemon daemon(*store_, make_devices(), config);
    ASSERT_TRUE(daemon.Run().ok());
    auto records = store_->GetTimingRecords(device, job.problem);
    ASSERT_TRUE(records.ok()) << records.status().ToString();
    int left_out = 0;
    for (const store::TimingRecord& r : *records) {
      if (IsWorkerLimit(r.timing)) {
        EXPECT_EQ(r.timing.algo, 1);
        EXPECT_GE(r.timing.micro_batch, kPriorFromMicroBatch);
        EXPECT_THAT(r.timing.error, ::testing::HasSubstr("nearby problems"));
        ++left_out;
      }
    }
    EXPECT_EQ(left_out, use_prior ? 2 : 0);
  }
}

}  // namespace
}  // namespace ucudnn::worker
