// The benchmark job queue: idempotent enqueue, exclusive claims, leases, completion, failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "store_test_util.h"

namespace ucudnn::store {
namespace {

using namespace std::chrono_literals;
using test_support::H100;
using testing_util::A100;
using testing_util::Conv3x3;
using testing_util::SampleTimings;
using testing_util::StoreTest;

class JobsTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(store_->RegisterWorker("worker-a", "node1", H100()).ok());
    ASSERT_TRUE(store_->RegisterWorker("worker-b", "node2", H100()).ok());
  }

  int64_t Enqueue(const ConvProblem& p, const DeviceFingerprint& d = H100(), int64_t max = 64) {
    auto r = store_->EnqueueJob(d, p, max, BatchPolicy::kPowerOfTwo);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->job_id : 0;
  }

  // Makes the job's lease run out now (instead of sleeping through it).
  void ExpireLease(int64_t job_id) {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec_params("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
                   job_id);
    tx.commit();
  }

  int64_t LiveJobs() {
    auto depth = store_->QueueDepth();
    EXPECT_TRUE(depth.ok());
    return depth.ok() ? *depth : -1;
  }
};

// A caller whose view of the timings is stale (a job finished since it read them; a server's
// timings cache) asks again: the timings are there, so nothing is enqueued and the answer is the
// finished job. Timings deleted to be measured again make a new job.
TEST_F(JobsTest, EnqueueOfMeasuredProblemMakesNoJobUntilTheTimingsAreGone) {
  const int64_t first = Enqueue(Conv3x3(64), H100(), 64);
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_TRUE(store_->CompleteJob(first, "worker-a", SampleTimings(64, 2)).ok());

  for (const auto& [max, policy] :
       std::vector<std::pair<int64_t, BatchPolicy>>{{64, BatchPolicy::kPowerOfTwo},
                                                    {32, BatchPolicy::kPowerOfTwo},
                                                    {64, BatchPolicy::kUndivided}}) {
    auto again = store_->EnqueueJob(H100(), Conv3x3(64), max, policy);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->state, JobState::kDone);
    EXPECT_EQ(again->job_id, first);
    EXPECT_FALSE(again->created);
  }
  EXPECT_EQ(LiveJobs(), 0);

  // Timings deleted (to be measured again): a new job.
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec("DELETE FROM timings");
    tx.commit();
  }
  auto remeasure = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(remeasure.ok()) << remeasure.status().ToString();
  EXPECT_TRUE(remeasure->created);
  EXPECT_NE(remeasure->job_id, first);
  EXPECT_EQ(remeasure->state, JobState::kQueued);
}

// Sizes not measured yet (policy all measures 3, 5, ...) make a new job after a finished one.
TEST_F(JobsTest, EnqueueOfSizesNotMeasuredAfterAFinishedJobMakesANewJob) {
  const int64_t first = Enqueue(Conv3x3(64), H100(), 64);
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_TRUE(store_->CompleteJob(first, "worker-a", SampleTimings(64, 2)).ok());
  auto wider = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kAll);
  ASSERT_TRUE(wider.ok()) << wider.status().ToString();
  EXPECT_TRUE(wider->created);
  EXPECT_NE(wider->job_id, first);
  EXPECT_EQ(wider->state, JobState::kQueued);
}

TEST_F(JobsTest, EnqueueIsIdempotentAndWidens) {
  auto first = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->created);
  EXPECT_EQ(first->state, JobState::kQueued);

  auto same = store_->EnqueueJob(H100(), Conv3x3(64), 32, BatchPolicy::kUndivided);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->job_id, first->job_id);
  EXPECT_FALSE(same->created);
  EXPECT_FALSE(same->widened);  // a smaller request is covered

  auto larger = store_->EnqueueJob(H100(), Conv3x3(64), 256, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(larger.ok());
  EXPECT_EQ(larger->job_id, first->job_id);
  EXPECT_TRUE(larger->widened);
  auto wider = store_->EnqueueJob(H100(), Conv3x3(64), 128, BatchPolicy::kAll);
  ASSERT_TRUE(wider.ok());
  EXPECT_TRUE(wider->widened);

  auto job = store_->GetJob(first->job_id);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->max_micro_batch, 256);
  EXPECT_EQ(job->policy, BatchPolicy::kAll);
  EXPECT_EQ(job->problem, Conv3x3(64));
  EXPECT_EQ(job->device_hash, H100().Hash());
  EXPECT_EQ(job->problem_hash, StableHash(Conv3x3(64)));
  EXPECT_EQ(LiveJobs(), 1);

  // Another device or problem is another job.
  EXPECT_NE(Enqueue(Conv3x3(64), A100()), first->job_id);
  EXPECT_NE(Enqueue(Conv3x3(32)), first->job_id);
  EXPECT_EQ(LiveJobs(), 3);

  EXPECT_EQ(store_->EnqueueJob(H100(), Conv3x3(64), 0, BatchPolicy::kAll).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(JobsTest, ConcurrentEnqueuesMakeExactlyOneLiveJob) {
  constexpr int kThreads = 12;
  auto shared = OpenStore(/*pool_size=*/6);
  ASSERT_NE(shared, nullptr);
  std::atomic<bool> go{false};
  std::vector<Result<EnqueueResult>> results(kThreads, Internal("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      while (!go) std::this_thread::yield();
      // Every request differs in its bound, so several also race to widen.
      results[i] = shared->EnqueueJob(H100(), Conv3x3(96), 16 + i, BatchPolicy::kPowerOfTwo);
    });
  }
  go = true;
  for (auto& t : threads) t.join();

  std::set<int64_t> ids;
  int created = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ids.insert(r->job_id);
    created += r->created ? 1 : 0;
  }
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(created, 1);
  EXPECT_EQ(LiveJobs(), 1);
  auto job = store_->GetJob(*ids.begin());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->max_micro_batch, 16 + kThreads - 1);  // the largest request won
}

TEST_F(JobsTest, TwoClaimersNeverGetTheSameJob) {
  constexpr int kJobs = 24;
  std::set<int64_t> enqueued;
  for (int i = 0; i < kJobs; ++i) enqueued.insert(Enqueue(Conv3x3(8 + i)));
  ASSERT_EQ(enqueued.size(), static_cast<size_t>(kJobs));

  // Separate stores: separate connections, as two worker processes would have.
  auto store_a = OpenStore(1);
  auto store_b = OpenStore(1);
  ASSERT_TRUE(store_a && store_b);
  std::vector<int64_t> claimed_a, claimed_b;
  auto claim_all = [](Store* store, const char* worker, std::vector<int64_t>* out) {
    while (true) {
      auto job = store->ClaimJob(H100().Hash(), worker, 60s);
      ASSERT_TRUE(job.ok()) << job.status().ToString();
      if (!job->has_value()) return;
      EXPECT_EQ((*job)->state, JobState::kRunning);
      EXPECT_EQ((*job)->worker_id, worker);
      out->push_back((*job)->id);
    }
  };
  std::thread a(claim_all, store_a.get(), "worker-a", &claimed_a);
  std::thread b(claim_all, store_b.get(), "worker-b", &claimed_b);
  a.join();
  b.join();

  std::set<int64_t> all(claimed_a.begin(), claimed_a.end());
  for (int64_t id : claimed_b) {
    EXPECT_TRUE(all.insert(id).second) << "job " << id << " claimed twice";
  }
  EXPECT_EQ(all, enqueued);
  EXPECT_EQ(claimed_a.size() + claimed_b.size(), static_cast<size_t>(kJobs));
}

TEST_F(JobsTest, ClaimsOnlyJobsOfItsOwnDevice) {
  const int64_t a100_job = Enqueue(Conv3x3(64), A100());
  const int64_t h100_job = Enqueue(Conv3x3(64), H100());
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
  ASSERT_TRUE(claimed->has_value());
  EXPECT_EQ((*claimed)->id, h100_job);
  auto nothing = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(nothing.ok());
  EXPECT_FALSE(nothing->has_value());  // the A100 job stays queued for an A100 worker
  auto a100 = store_->GetJob(a100_job);
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->state, JobState::kQueued);
}

TEST_F(JobsTest, GetJobsReadsTheExistingJobsOfManyIdsInOneCall) {
  const int64_t a100_job = Enqueue(Conv3x3(64), A100());
  const int64_t h100_job = Enqueue(Conv3x3(128), H100());
  ASSERT_TRUE(store_->ClaimJob(H100().Hash(), "worker-a", 60s).ok());
  auto jobs = store_->GetJobs({h100_job, 987654321, a100_job});
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);  // the unknown id is left out
  for (const Job& job : *jobs) {
    auto one = store_->GetJob(job.id);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(job.state, one->state);
    EXPECT_EQ(job.max_micro_batch, one->max_micro_batch);
  }
  EXPECT_EQ((*jobs)[0].id, std::min(a100_job, h100_job));
  EXPECT_EQ((*jobs)[1].id, std::max(a100_job, h100_job));
  auto none = store_->GetJobs({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(JobsTest, ClaimNeedsARegisteredWorker) {
  Enqueue(Conv3x3(64));
  auto claimed = store_->ClaimJob(H100().Hash(), "stranger", 60s);
  EXPECT_EQ(claimed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->ClaimJob(H100().Hash(), "worker-a", 0ms).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(JobsTest, ExpiredLeaseIsReclaimedAndTheOldHolderWritesNothing) {
  const int64_t id = Enqueue(Conv3x3(64));
  auto first = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->attempts, 1);
  EXPECT_FALSE((*first)->lease_expires_at.empty());
  EXPECT_TRUE(store_->RenewLease(id, "worker-a", 60s).ok());

  // A live lease is not claimable.
  auto blocked = store_->ClaimJob(H100().Hash(), "worker-b", 60s);
  ASSERT_TRUE(blocked.ok());
  EXPECT_FALSE(blocked->has_value());

  ExpireLease(id);  // worker-a "died"
  auto second = store_->ClaimJob(H100().Hash(), "worker-b", 60s);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->id, id);
  EXPECT_EQ((*second)->attempts, 2);
  EXPECT_EQ((*second)->worker_id, "worker-b");

  // worker-a comes back: its lease is gone; nothing it sends is stored.
  Status renew = store_->RenewLease(id, "worker-a", 60s);
  EXPECT_EQ(renew.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(renew.message().find("worker-b"), std::string::npos) << renew.message();
  auto late = store_->CompleteJob(id, "worker-a", SampleTimings(64, 3, 1.0));
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
  auto table = store_->GetTimings(H100(), Conv3x3(64));
  ASSERT_TRUE(table.ok());
  EXPECT_TRUE(table->entries.empty());
  EXPECT_EQ(store_->FailJob(id, "worker-a", "x", 3).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->ReleaseJob(id, "worker-a").code(), StatusCode::kFailedPrecondition);

  // The holder completes: timings and done state together, exactly once.
  const auto timings = SampleTimings(64, 3, 2.0);
  auto done = store_->CompleteJob(id, "worker-b", timings);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(*done, JobState::kDone);
  auto records = store_->GetTimingRecords(H100(), Conv3x3(64));
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), timings.size());
  for (const auto& r : *records) EXPECT_EQ(r.measured_by, "worker-b");
  auto job = store_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kDone);
  EXPECT_TRUE(job->lease_expires_at.empty());
  EXPECT_EQ(LiveJobs(), 0);

  // Completing twice is refused: the job is no longer running.
  EXPECT_EQ(store_->CompleteJob(id, "worker-b", timings).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->RenewLease(987654, "worker-b", 60s).code(), StatusCode::kNotFound);
}

TEST_F(JobsTest, FailedJobRetriesThenFailsAfterMaxAttempts) {
  const int64_t id = Enqueue(Conv3x3(64));
  constexpr int kMaxAttempts = 3;
  for (int attempt = 1; attempt <= kMaxAttempts; ++attempt) {
    auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
    ASSERT_TRUE(claimed.ok() && claimed->has_value()) << "attempt " << attempt;
    EXPECT_EQ((*claimed)->attempts, attempt);
    auto state = store_->FailJob(
        id, "worker-a", "CUDNN_STATUS_EXECUTION_FAILED #" + std::to_string(attempt), kMaxAttempts);
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    EXPECT_EQ(*state, attempt < kMaxAttempts ? JobState::kQueued : JobState::kFailed);
  }
  auto job = store_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kFailed);
  EXPECT_EQ(job->error, "CUDNN_STATUS_EXECUTION_FAILED #3");
  auto nothing = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(nothing.ok());
  EXPECT_FALSE(nothing->has_value());
  // Within the cool-down, asking again enqueues nothing: the failed job and its error answer.
  auto again = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->job_id, id);
  EXPECT_EQ(again->state, JobState::kFailed);
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->error, "CUDNN_STATUS_EXECUTION_FAILED #3");
  EXPECT_EQ(LiveJobs(), 0);

  // Without a cool-down, a failed job is not live: asking again makes a fresh one.
  auto eager = OpenStore(2, 0s);
  ASSERT_NE(eager, nullptr);
  auto fresh = eager->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh->created);
  EXPECT_NE(fresh->job_id, id);
}

TEST_F(JobsTest, RetryRequeuesAFailedJobWithItsAttemptsReset) {
  const int64_t id = Enqueue(Conv3x3(64));
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_EQ(*store_->FailJob(id, "worker-a", "out of memory", 1), JobState::kFailed);

  // Only failed jobs, and only known ones.
  EXPECT_EQ(store_->RetryJob(987654).status().code(), StatusCode::kNotFound);
  const int64_t other = Enqueue(Conv3x3(32));
  auto queued = store_->RetryJob(other);
  EXPECT_EQ(queued.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(queued.status().message().find("only failed jobs"), std::string::npos)
      << queued.status().message();

  auto retried = store_->RetryJob(id);
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_EQ(retried->id, id);
  EXPECT_EQ(retried->state, JobState::kQueued);
  EXPECT_EQ(retried->attempts, 0);
  EXPECT_TRUE(retried->worker_id.empty());
  // It is the live job of its problem again: enqueueing finds it, a worker claims it.
  auto enqueued = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(enqueued.ok());
  EXPECT_EQ(enqueued->job_id, id);
  EXPECT_EQ(enqueued->state, JobState::kQueued);
  auto reclaimed = store_->ClaimJob(H100().Hash(), "worker-b", 60s);
  ASSERT_TRUE(reclaimed.ok() && reclaimed->has_value());
  EXPECT_EQ((*reclaimed)->id, id);  // still the oldest job
  EXPECT_EQ((*reclaimed)->attempts, 1);

  // A failed job whose problem got a new live job meanwhile is not retried beside it.
  ASSERT_EQ(*store_->FailJob(id, "worker-b", "out of memory again", 1), JobState::kFailed);
  auto eager = OpenStore(2, 0s);
  ASSERT_NE(eager, nullptr);
  auto fresh = eager->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(fresh.ok() && fresh->created);
  auto beside = store_->RetryJob(id);
  EXPECT_EQ(beside.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(beside.status().message().find(std::to_string(fresh->job_id)), std::string::npos)
      << beside.status().message();
}

TEST_F(JobsTest, OperatorCancelsQueuedJobsOnlyAndTheirProblemsCanBeEnqueuedAgain) {
  const int64_t running = Enqueue(Conv3x3(16));
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_EQ((*claimed)->id, running);
  const int64_t one = Enqueue(Conv3x3(32));
  const int64_t two = Enqueue(Conv3x3(64));
  const int64_t elsewhere = Enqueue(Conv3x3(64), A100());

  // One job: only a queued one, only a known one.
  EXPECT_EQ(store_->CancelQueuedJobs(987654, std::nullopt).status().code(), StatusCode::kNotFound);
  auto busy = store_->CancelQueuedJobs(running, std::nullopt);
  EXPECT_EQ(busy.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.status().message().find("is running"), std::string::npos)
      << busy.status().message();
  auto single = store_->CancelQueuedJobs(one, std::nullopt);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  ASSERT_EQ(single->size(), 1u);
  EXPECT_EQ((*single)[0].id, one);
  EXPECT_EQ((*single)[0].state, JobState::kQueued);
  EXPECT_EQ(store_->GetJob(one).status().code(), StatusCode::kNotFound);

  // Every queued job of one device: the other device's and the running job stay.
  auto h100 = store_->CancelQueuedJobs(0, H100().Hash());
  ASSERT_TRUE(h100.ok()) << h100.status().ToString();
  ASSERT_EQ(h100->size(), 1u);
  EXPECT_EQ((*h100)[0].id, two);
  EXPECT_TRUE(store_->GetJob(elsewhere).ok());
  auto still_running = store_->GetJob(running);
  ASSERT_TRUE(still_running.ok());
  EXPECT_EQ(still_running->state, JobState::kRunning);
  EXPECT_EQ(*store_->QueueDepth(), 2);

  // Every queued job of every device.
  auto all = store_->CancelQueuedJobs(0, std::nullopt);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].id, elsewhere);
  EXPECT_EQ(*store_->QueueDepth(), 1);
  auto none = store_->CancelQueuedJobs(0, std::nullopt);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  // A cancelled problem asked for again is enqueued afresh.
  auto again = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->created);
  EXPECT_NE(again->job_id, two);
}

TEST_F(JobsTest, JobWhoseWorkersKeepDyingFailsAfterMaxAttempts) {
  const int64_t id = Enqueue(Conv3x3(64));
  constexpr int kMaxAttempts = 3;
  // The first attempt fails properly; the next ones die with the lease held.
  auto first = store_->ClaimJob(H100().Hash(), "worker-a", 60s, kMaxAttempts);
  ASSERT_TRUE(first.ok() && first->has_value());
  ASSERT_EQ(*store_->FailJob(id, "worker-a", "CUDNN_STATUS_INTERNAL_ERROR", kMaxAttempts),
            JobState::kQueued);
  for (int attempt = 2; attempt <= kMaxAttempts; ++attempt) {
    auto claimed = store_->ClaimJob(H100().Hash(), "worker-b", 60s, kMaxAttempts);
    ASSERT_TRUE(claimed.ok() && claimed->has_value()) << "attempt " << attempt;
    EXPECT_EQ((*claimed)->attempts, attempt);
    ExpireLease(id);
  }
  // Listed as expired while nobody has looked at it yet, and counted so.
  auto expired = store_->ListJobs("expired", 10);
  ASSERT_TRUE(expired.ok()) << expired.status().ToString();
  ASSERT_EQ(expired->size(), 1u);
  EXPECT_TRUE((*expired)[0].lease_expired);
  EXPECT_EQ((*expired)[0].state, JobState::kRunning);
  auto running = store_->ListJobs(JobState::kRunning, 10);
  ASSERT_TRUE(running.ok());
  EXPECT_TRUE(running->empty());
  auto counts = store_->JobCountsByDevice();
  ASSERT_TRUE(counts.ok() && counts->size() == 1u);
  EXPECT_EQ((*counts)[0].expired, 1);
  EXPECT_EQ((*counts)[0].running, 0);

  // The next claim of the device fails it instead of handing it out a fourth time.
  auto next = store_->ClaimJob(H100().Hash(), "worker-a", 60s, kMaxAttempts);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_FALSE(next->has_value());
  auto job = store_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kFailed);
  EXPECT_FALSE(job->lease_expired);
  EXPECT_TRUE(job->lease_expires_at.empty());
  EXPECT_EQ(job->error,
            "lease expired on attempt 3 of 3: worker worker-b stopped renewing it (worker died?); "
            "earlier error: CUDNN_STATUS_INTERNAL_ERROR");
  EXPECT_EQ(LiveJobs(), 0);
  // The old holder cannot bring it back.
  EXPECT_EQ(store_->RenewLease(id, "worker-b", 60s).code(), StatusCode::kFailedPrecondition);

  // An expired lease with attempts left is simply claimed again, by any device's claim only for
  // its own jobs.
  const int64_t other = Enqueue(Conv3x3(32));
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s, kMaxAttempts);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ExpireLease(other);
  ASSERT_TRUE(store_->RegisterWorker("worker-c", "node3", A100()).ok());
  auto elsewhere = store_->ClaimJob(A100().Hash(), "worker-c", 60s, 1);
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_FALSE(elsewhere->has_value());
  EXPECT_EQ(store_->GetJob(other)->state, JobState::kRunning);  // not another device's to fail
  auto again = store_->ClaimJob(H100().Hash(), "worker-b", 60s, kMaxAttempts);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->id, other);
  EXPECT_EQ((*again)->attempts, 2);
  EXPECT_EQ(store_->ClaimJob(H100().Hash(), "worker-b", 60s, 0).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(JobsTest, EnqueueJobsWritesABatchInOneTransaction) {
  std::vector<JobRequest> batch = {
      {Conv3x3(16), 32, BatchPolicy::kPowerOfTwo},
      {Conv3x3(32), 64, BatchPolicy::kUndivided},
      {Conv3x3(16), 128, BatchPolicy::kAll},  // the same problem again: one job, widest wins
  };
  auto results = store_->EnqueueJobs(H100(), batch);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 3u);
  EXPECT_EQ((*results)[0].job_id, (*results)[2].job_id);
  EXPECT_NE((*results)[0].job_id, (*results)[1].job_id);
  for (const auto& r : *results) {
    EXPECT_TRUE(r.created);
    EXPECT_EQ(r.state, JobState::kQueued);
  }
  auto widest = store_->GetJob((*results)[0].job_id);
  ASSERT_TRUE(widest.ok());
  EXPECT_EQ(widest->max_micro_batch, 128);
  EXPECT_EQ(widest->policy, BatchPolicy::kAll);
  EXPECT_EQ(LiveJobs(), 2);

  // All or nothing: one bad entry, and nothing of the batch is written.
  ConvProblem bad = Conv3x3(48);
  bad.c = 0;
  auto refused = store_->EnqueueJobs(
      H100(), {{Conv3x3(48), 32, BatchPolicy::kPowerOfTwo}, {bad, 32, BatchPolicy::kPowerOfTwo}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("jobs[1]: problem: c"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(LiveJobs(), 2);
  auto empty = store_->EnqueueJobs(H100(), {});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_F(JobsTest, ImportCompletesTheQueuedJobsItCovers) {
  const int64_t covered = Enqueue(Conv3x3(64), H100(), 64);
  const int64_t wider = Enqueue(Conv3x3(32), H100(), 128);
  const int64_t elsewhere = Enqueue(Conv3x3(64), A100(), 64);
  auto imported = store_->ImportTimings(
      H100(), {{Conv3x3(64), SampleTimings(64, 2)}, {Conv3x3(32), SampleTimings(64, 2)}},
      "import:test");
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(store_->GetJob(covered)->state, JobState::kDone);
  EXPECT_EQ(store_->GetJob(wider)->state, JobState::kQueued);  // 128 is still missing
  EXPECT_EQ(store_->GetJob(elsewhere)->state, JobState::kQueued);
  EXPECT_EQ(LiveJobs(), 2);
}

TEST_F(JobsTest, ReleasedJobIsQueuedAgainWithoutSpendingAnAttempt) {
  const int64_t id = Enqueue(Conv3x3(64));
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_TRUE(store_->ReleaseJob(id, "worker-a").ok());
  auto job = store_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kQueued);
  EXPECT_EQ(job->attempts, 0);
  EXPECT_TRUE(job->worker_id.empty());
  auto again = store_->ClaimJob(H100().Hash(), "worker-b", 60s);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->id, id);
  EXPECT_EQ((*again)->attempts, 1);
}

TEST_F(JobsTest, JobWidenedWhileRunningIsQueuedAgainAfterCompletion) {
  const int64_t id = Enqueue(Conv3x3(64), H100(), 64);
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  EXPECT_EQ((*claimed)->max_micro_batch, 64);

  auto widened = store_->EnqueueJob(H100(), Conv3x3(64), 256, BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(widened.ok());
  EXPECT_EQ(widened->job_id, id);
  EXPECT_EQ(widened->state, JobState::kRunning);
  EXPECT_TRUE(widened->widened);

  auto state = store_->CompleteJob(id, "worker-a", SampleTimings(64, 2));
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(*state, JobState::kQueued);
  auto table = store_->GetTimings(H100(), Conv3x3(64));
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->entries.size(), SampleTimings(64, 2).size());  // kept, not lost

  auto again = store_->ClaimJob(H100().Hash(), "worker-b", 60s);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->id, id);
  EXPECT_EQ((*again)->max_micro_batch, 256);
  auto done = store_->CompleteJob(id, "worker-b", SampleTimings(256, 2));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(*done, JobState::kDone);
}

// A job carries the per-kernel workspace limit it is measured for (std::nullopt: every size of
// its policy). A live job asked again is widened like its max_micro_batch and policy: a smaller
// limit needs more sizes, none is wider than any; a larger or equal limit changes nothing.
TEST_F(JobsTest, EnqueueKeepsTheWorkspaceLimitAndWidensItToTheSmallerOrToNone) {
  const ConvProblem problem = Conv3x3(64);
  auto first = store_->EnqueueJob(H100(), problem, 64, BatchPolicy::kPowerOfTwo, 4096);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->created);
  auto limit = [&]() -> std::optional<uint64_t> {
    auto job = store_->GetJob(first->job_id);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->workspace_limit : std::optional<uint64_t>(12345);
  };
  EXPECT_EQ(limit(), std::optional<uint64_t>(4096));

  struct Step {
    std::optional<uint64_t> asked;
    bool widened;
    std::optional<uint64_t> then;
  };
  for (const Step& step :
       std::vector<Step>{{8192, false, 4096},                 // larger: covered
                         {4096, false, 4096},                 // equal: covered
                         {1024, true, 1024},                  // smaller: widened
                         {0, true, 0},                        // no workspace at all
                         {std::nullopt, true, std::nullopt},  // every size: wider than any limit
                         {0, false, std::nullopt},            // none covers every limit
                         {std::nullopt, false, std::nullopt}}) {  // and itself
    auto again = store_->EnqueueJob(H100(), problem, 64, BatchPolicy::kPowerOfTwo, step.asked);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->job_id, first->job_id);
    EXPECT_FALSE(again->created);
    const std::string asked = step.asked ? std::to_string(*step.asked) : "none";
    EXPECT_EQ(again->widened, step.widened) << asked;
    EXPECT_EQ(limit(), step.then) << asked;
  }
  EXPECT_EQ(LiveJobs(), 1);

  // Widened for its max_micro_batch, a job keeps its wider limit.
  auto other = store_->EnqueueJob(H100(), Conv3x3(32), 64, BatchPolicy::kPowerOfTwo, 1024);
  ASSERT_TRUE(other.ok());
  auto larger = store_->EnqueueJob(H100(), Conv3x3(32), 128, BatchPolicy::kPowerOfTwo, 2048);
  ASSERT_TRUE(larger.ok());
  EXPECT_TRUE(larger->widened);
  auto job = store_->GetJob(other->job_id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->max_micro_batch, 128);
  EXPECT_EQ(job->workspace_limit, std::optional<uint64_t>(1024));

  // A job asked for without a limit has none; listings show the limit.
  Enqueue(Conv3x3(16));
  auto listed = store_->ListJobs(std::nullopt, 10);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 3u);
  for (const Job& j : *listed) {
    const std::optional<uint64_t> expected =
        j.id == other->job_id ? std::optional<uint64_t>(1024) : std::nullopt;
    EXPECT_EQ(j.workspace_limit, expected) << "job " << j.id;
  }

  // At most the contract's 1 TiB.
  EXPECT_TRUE(
      store_->EnqueueJob(H100(), Conv3x3(8), 64, BatchPolicy::kAll, kMaxJobWorkspaceLimit).ok());
  auto too_large =
      store_->EnqueueJob(H100(), Conv3x3(8), 64, BatchPolicy::kAll, kMaxJobWorkspaceLimit + 1);
  EXPECT_EQ(too_large.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(too_large.status().message(),
            "workspace_limit: at most 1 TiB (1099511627776), got 1099511627777");
}

// One EnqueueJobs call asking for a problem more than once: the widest limit wins.
TEST_F(JobsTest, EnqueueJobsTakesTheWidestWorkspaceLimitOfAProblem) {
  auto results =
      store_->EnqueueJobs(H100(), {{Conv3x3(16), 64, BatchPolicy::kPowerOfTwo, 4096},
                                   {Conv3x3(16), 64, BatchPolicy::kPowerOfTwo, 1024},
                                   {Conv3x3(16), 64, BatchPolicy::kPowerOfTwo, 2048},
                                   {Conv3x3(32), 64, BatchPolicy::kPowerOfTwo, 1024},
                                   {Conv3x3(32), 64, BatchPolicy::kPowerOfTwo, std::nullopt},
                                   {Conv3x3(32), 64, BatchPolicy::kPowerOfTwo, 512},
                                   {Conv3x3(64), 64, BatchPolicy::kPowerOfTwo, 0}});
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 7u);
  auto limit_of = [&](size_t i) {
    auto job = store_->GetJob((*results)[i].job_id);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->workspace_limit : std::optional<uint64_t>(12345);
  };
  EXPECT_EQ(limit_of(0), std::optional<uint64_t>(1024));
  EXPECT_EQ(limit_of(3), std::nullopt);
  EXPECT_EQ(limit_of(6), std::optional<uint64_t>(0));
  EXPECT_EQ(LiveJobs(), 3);

  // A bad limit refuses the whole batch, naming the entry.
  auto refused = store_->EnqueueJobs(
      H100(), {{Conv3x3(48), 32, BatchPolicy::kPowerOfTwo, 1},
               {Conv3x3(48), 32, BatchPolicy::kPowerOfTwo, kMaxJobWorkspaceLimit + 1}});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("jobs[1]: workspace_limit: at most 1 TiB"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(LiveJobs(), 3);
}

// The claim returns the limit the worker measures for; a request that limit covers changes
// nothing and the job is done on completion.
TEST_F(JobsTest, ClaimReturnsTheWorkspaceLimitAndACoveredRequestDoesNotRequeue) {
  auto enqueued = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo, 2048);
  ASSERT_TRUE(enqueued.ok()) << enqueued.status().ToString();
  const int64_t id = enqueued->job_id;
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  EXPECT_EQ((*claimed)->id, id);
  EXPECT_EQ((*claimed)->workspace_limit, std::optional<uint64_t>(2048));

  auto covered = store_->EnqueueJob(H100(), Conv3x3(64), 32, BatchPolicy::kPowerOfTwo, 4096);
  ASSERT_TRUE(covered.ok()) << covered.status().ToString();
  EXPECT_EQ(covered->job_id, id);
  EXPECT_EQ(covered->state, JobState::kRunning);
  EXPECT_FALSE(covered->widened);
  auto state = store_->CompleteJob(id, "worker-a", SampleTimings(64, 2));
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(*state, JobState::kDone);

  // A job without a limit is claimed without one.
  const int64_t unlimited = Enqueue(Conv3x3(32));
  auto other = store_->ClaimJob(H100().Hash(), "worker-b", 60s);
  ASSERT_TRUE(other.ok() && other->has_value());
  EXPECT_EQ((*other)->id, unlimited);
  EXPECT_EQ((*other)->workspace_limit, std::nullopt);
  auto any_limit = store_->EnqueueJob(H100(), Conv3x3(32), 64, BatchPolicy::kPowerOfTwo, 0);
  ASSERT_TRUE(any_limit.ok());
  EXPECT_FALSE(any_limit->widened);
  auto done = store_->CompleteJob(unlimited, "worker-b", SampleTimings(64, 2));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(*done, JobState::kDone);
}

// A running job whose limit was lowered (or dropped) after its claim goes back to the queue on
// completion, and the next claim asks for the new limit.
TEST_F(JobsTest, JobWhoseWorkspaceLimitWasWidenedWhileRunningIsQueuedAgain) {
  for (const std::optional<uint64_t> wider :
       std::vector<std::optional<uint64_t>>{512, std::nullopt}) {
    SCOPED_TRACE(wider ? std::to_string(*wider) : "none");
    const ConvProblem problem = Conv3x3(wider ? 64 : 32);
    auto enqueued = store_->EnqueueJob(H100(), problem, 64, BatchPolicy::kPowerOfTwo, 2048);
    ASSERT_TRUE(enqueued.ok()) << enqueued.status().ToString();
    const int64_t id = enqueued->job_id;
    auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
    ASSERT_TRUE(claimed.ok() && claimed->has_value());
    ASSERT_EQ((*claimed)->id, id);

    auto widened = store_->EnqueueJob(H100(), problem, 64, BatchPolicy::kPowerOfTwo, wider);
    ASSERT_TRUE(widened.ok()) << widened.status().ToString();
    EXPECT_EQ(widened->job_id, id);
    EXPECT_EQ(widened->state, JobState::kRunning);
    EXPECT_TRUE(widened->widened);

    auto state = store_->CompleteJob(id, "worker-a", SampleTimings(32, 2));
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    EXPECT_EQ(*state, JobState::kQueued);
    auto again = store_->ClaimJob(H100().Hash(), "worker-b", 60s);
    ASSERT_TRUE(again.ok() && again->has_value());
    EXPECT_EQ((*again)->id, id);
    EXPECT_EQ((*again)->workspace_limit, wider);
    auto done = store_->CompleteJob(id, "worker-b", SampleTimings(64, 2));
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(*done, JobState::kDone);
  }
}

// Timings of every size of the policy answer any limit (a limit's sizes are among them): kDone,
// with no job, also for a request without a limit after a job that had one.
TEST_F(JobsTest, MeasuredSizesAnswerARequestOfAnyWorkspaceLimit) {
  auto enqueued = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo, 2048);
  ASSERT_TRUE(enqueued.ok()) << enqueued.status().ToString();
  auto claimed = store_->ClaimJob(H100().Hash(), "worker-a", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_TRUE(store_->CompleteJob(enqueued->job_id, "worker-a", SampleTimings(64, 2)).ok());
  for (const std::optional<uint64_t> limit :
       {std::optional<uint64_t>(0), std::optional<uint64_t>(4096), std::optional<uint64_t>()}) {
    auto again = store_->EnqueueJob(H100(), Conv3x3(64), 64, BatchPolicy::kPowerOfTwo, limit);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->state, JobState::kDone);
    EXPECT_EQ(again->job_id, enqueued->job_id);
    EXPECT_FALSE(again->created);
  }
  EXPECT_EQ(LiveJobs(), 0);
}

}  // namespace
}  // namespace ucudnn::store
