// Notifications, and behaviour when PostgreSQL goes away and comes back.
#include <gtest/gtest.h>

#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "store_test_util.h"

namespace ucudnn::store {
namespace {

using namespace std::chrono_literals;
using test_support::H100;
using testing_util::Conv3x3;
using testing_util::SampleTimings;
using testing_util::StoreTest;

class FaultsTest : public StoreTest {
 protected:
  void TearDown() override {
    // Never leave the shared server down for the next test.
    if (!postgres().running()) {
      EXPECT_TRUE(postgres().Start().ok());
    }
  }

  // Waits (bounded) until every expected notification arrived.
  void ExpectNotifications(Listener& listener, std::set<uint64_t> problems) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!problems.empty() && std::chrono::steady_clock::now() < deadline) {
      auto got = listener.WaitForNotification(500ms);
      if (!got.ok()) continue;  // e.g. reconnecting
      for (const ProblemNotification& n : *got) {
        EXPECT_EQ(n.device_hash, H100().Hash());
        problems.erase(n.problem_hash);
      }
    }
    EXPECT_TRUE(problems.empty()) << problems.size() << " notification(s) never arrived";
  }

  // Nothing heard on the channel for a while (a notification would come within milliseconds of
  // the commit).
  void ExpectSilence(Listener& listener) {
    auto heard = listener.WaitForNotification(300ms);
    ASSERT_TRUE(heard.ok()) << heard.status().ToString();
    EXPECT_TRUE(heard->empty()) << heard->size() << " unexpected notification(s)";
  }

  // Retries `op` until it succeeds; the store must heal without being reopened.
  template <typename Op>
  void EventuallyOk(Op op) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    Status last;
    while (std::chrono::steady_clock::now() < deadline) {
      last = op();
      if (last.ok()) return;
      EXPECT_EQ(last.code(), StatusCode::kUnavailable) << last.ToString();
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "still failing: " << last.ToString();
  }
};

TEST_F(FaultsTest, NotificationsArriveAfterTimingsAreStored) {
  auto listener = Listener::Open(url());
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto quiet = (*listener)->WaitForNotification(0ms);
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->empty());

  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), SampleTimings(4, 2), "w").ok());
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(32), SampleTimings(4, 2), "w").ok());
  ExpectNotifications(**listener, {StableHash(Conv3x3(64)), StableHash(Conv3x3(32))});

  // A completed job notifies too.
  ASSERT_TRUE(store_->RegisterWorker("w", "node", H100()).ok());
  ASSERT_TRUE(store_->EnqueueJob(H100(), Conv3x3(16), 4, BatchPolicy::kAll).ok());
  auto job = store_->ClaimJob(H100().Hash(), "w", 60s);
  ASSERT_TRUE(job.ok() && job->has_value());
  ASSERT_TRUE(store_->CompleteJob((*job)->id, "w", SampleTimings(4, 1)).ok());
  ExpectNotifications(**listener, {StableHash(Conv3x3(16))});
}

TEST_F(FaultsTest, EveryPathThatQueuesAJobNotifiesTheJobsChannel) {
  auto jobs = Listener::Open(url(), kJobsChannel);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  auto timings = Listener::Open(url());
  ASSERT_TRUE(timings.ok());

  ASSERT_TRUE(store_->EnqueueJob(H100(), Conv3x3(16), 4, BatchPolicy::kAll).ok());
  ExpectNotifications(**jobs, {StableHash(Conv3x3(16))});
  // The same job asked for again queues nothing: no notification.
  ASSERT_TRUE(store_->EnqueueJob(H100(), Conv3x3(16), 4, BatchPolicy::kAll).ok());
  ExpectSilence(**jobs);

  // A job given back to the queue is claimable again: notified.
  ASSERT_TRUE(store_->RegisterWorker("w", "node", H100()).ok());
  auto job = store_->ClaimJob(H100().Hash(), "w", 60s);
  ASSERT_TRUE(job.ok() && job->has_value());
  ASSERT_TRUE(store_->ReleaseJob((*job)->id, "w").ok());
  ExpectNotifications(**jobs, {StableHash(Conv3x3(16))});
  // Each channel hears its own: a queued job is no timing.
  ExpectSilence(**timings);

  // A failed attempt re-queued for another: notified; the last attempt's failure is not.
  job = store_->ClaimJob(H100().Hash(), "w", 60s);
  ASSERT_TRUE(job.ok() && job->has_value());
  auto failed = store_->FailJob((*job)->id, "w", "out of memory", /*max_attempts=*/2);
  ASSERT_TRUE(failed.ok());
  ASSERT_EQ(*failed, JobState::kQueued);
  ExpectNotifications(**jobs, {StableHash(Conv3x3(16))});
  job = store_->ClaimJob(H100().Hash(), "w", 60s);
  ASSERT_TRUE(job.ok() && job->has_value());
  failed = store_->FailJob((*job)->id, "w", "out of memory", /*max_attempts=*/2);
  ASSERT_TRUE(failed.ok());
  ASSERT_EQ(*failed, JobState::kFailed);
  ExpectSilence(**jobs);
  // An operator's retry of the failed job queues it: notified.
  ASSERT_TRUE(store_->RetryJob((*job)->id).ok());
  ExpectNotifications(**jobs, {StableHash(Conv3x3(16))});

  // A job widened while it ran goes back to the queue at its completion: notified; one that
  // was not widened is done: silence.
  job = store_->ClaimJob(H100().Hash(), "w", 60s);
  ASSERT_TRUE(job.ok() && job->has_value());
  ASSERT_TRUE(store_->EnqueueJob(H100(), Conv3x3(16), 8, BatchPolicy::kAll).ok());
  ExpectSilence(**jobs);  // widened while running: nothing to claim yet
  auto completed = store_->CompleteJob((*job)->id, "w", SampleTimings(4, 1));
  ASSERT_TRUE(completed.ok());
  ASSERT_EQ(*completed, JobState::kQueued);
  ExpectNotifications(**jobs, {StableHash(Conv3x3(16))});
  job = store_->ClaimJob(H100().Hash(), "w", 60s);
  ASSERT_TRUE(job.ok() && job->has_value());
  completed = store_->CompleteJob((*job)->id, "w", SampleTimings(8, 1));
  ASSERT_TRUE(completed.ok());
  ASSERT_EQ(*completed, JobState::kDone);
  ExpectSilence(**jobs);
}

TEST_F(FaultsTest, StoreReportsUnavailableWhileDownAndHealsAfterRestart) {
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), SampleTimings(4, 2), "w").ok());
  auto listener = Listener::Open(url());
  ASSERT_TRUE(listener.ok());

  ASSERT_TRUE(postgres().Stop().ok());
  auto down = store_->GetTimings(H100(), Conv3x3(64));
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable) << down.status().ToString();
  Status write = store_->PutTimings(H100(), Conv3x3(32), SampleTimings(4, 2), "w");
  EXPECT_EQ(write.code(), StatusCode::kUnavailable) << write.ToString();
  EXPECT_EQ(store_->Ping().code(), StatusCode::kUnavailable);
  auto heard = (*listener)->WaitForNotification(100ms);
  EXPECT_EQ(heard.status().code(), StatusCode::kUnavailable);

  ASSERT_TRUE(postgres().Start().ok());
  EventuallyOk([&] { return store_->GetTimings(H100(), Conv3x3(64)).status(); });
  auto table = store_->GetTimings(H100(), Conv3x3(64));
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->entries.size(), SampleTimings(4, 2).size());  // data survived
  EventuallyOk([&] { return store_->PutTimings(H100(), Conv3x3(32), SampleTimings(4, 2), "w"); });
  EXPECT_GE(store_->GetPoolStats().broken, 1);

  // The listener reconnects by itself and hears new writes.
  for (int i = 0; i < 100; ++i) {
    if ((*listener)->WaitForNotification(50ms).ok()) break;
  }
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(48), SampleTimings(2, 1), "w").ok());
  ExpectNotifications(**listener, {StableHash(Conv3x3(48))});
}

TEST_F(FaultsTest, RestartWhileIdleCostsAtMostOneFailedCall) {
  ASSERT_TRUE(store_->Ping().ok());
  ASSERT_TRUE(postgres().Restart().ok());
  // The pooled connection died with the old server; the first call may notice that, the next
  // one works on a fresh connection.
  Status first = store_->Ping();
  if (!first.ok()) {
    EXPECT_EQ(first.code(), StatusCode::kUnavailable) << first.ToString();
  }
  EventuallyOk([&] { return store_->Ping(); });
}

TEST_F(FaultsTest, OpenTellsBadUrlsFromDownDatabases) {
  auto bad = Store::Open("postgresql://127.0.0.1:notaport/x", 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
  auto bad_option = Store::Open("host=127.0.0.1 no_such_option=1", 1);
  EXPECT_EQ(bad_option.status().code(), StatusCode::kInvalidArgument)
      << bad_option.status().ToString();
  ASSERT_TRUE(postgres().Stop().ok());
  auto down = Store::Open(url(), 1);
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable) << down.status().ToString();
  auto listener = Listener::Open(url());
  EXPECT_EQ(listener.status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(postgres().Start().ok());
  EXPECT_TRUE(Store::Open(url(), 1).ok());
}

TEST_F(FaultsTest, ReadOnlyDatabaseIsAFailedPrecondition) {
  const std::string db = url().substr(url().rfind('/') + 1);
  ASSERT_TRUE(
      postgres()
          .Execute("postgres", "ALTER DATABASE " + db + " SET default_transaction_read_only = on")
          .ok());
  auto store = OpenStore(1);  // new connections pick the setting up
  ASSERT_NE(store, nullptr);
  Status s = store->PutTimings(H100(), Conv3x3(64), SampleTimings(4, 2), "w");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("read-only"), std::string::npos) << s.message();
  auto read = store->GetTimings(H100(), Conv3x3(64));
  EXPECT_TRUE(read.ok()) << read.status().ToString();  // reads still work
}

}  // namespace
}  // namespace ucudnn::store
