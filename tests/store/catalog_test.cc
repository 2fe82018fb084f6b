// Catalog reads (devices, workers, jobs, counts) and the plan cache.
#include <gtest/gtest.h>
#include <algorithm>

#include <pqxx/pqxx>

#include "store_test_util.h"

namespace ucudnn::store {
namespace {

using namespace std::chrono_literals;
using test_support::H100;
using testing_util::A100;
using testing_util::Conv3x3;
using testing_util::SampleTimings;
using testing_util::StoreTest;

class CatalogTest : public StoreTest {
 protected:
  // One statement on a connection of its own, committed.
  void Execute(const std::string& sql) {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec(sql);
    tx.commit();
  }
};

TEST_F(CatalogTest, DevicesCountTheirTimingsAndLiveWorkers) {
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), SampleTimings(8, 2), "w").ok());
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(32), SampleTimings(4, 2), "w").ok());
  ASSERT_TRUE(store_->RegisterWorker("gpu-node:1:0", "gpu-node", H100()).ok());
  ASSERT_TRUE(store_->RegisterWorker("old-node:1:0", "old-node", A100()).ok());
  // The A100 worker last beat long ago.
  Execute(
      "UPDATE workers SET last_heartbeat = now() - interval '1 hour' "
      "WHERE id = 'old-node:1:0'");
  auto devices = store_->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 2u);
  const DeviceInfo& a100 = (*devices)[0];  // ordered by name
  const DeviceInfo& h100 = (*devices)[1];
  EXPECT_EQ(a100.fingerprint, A100());
  EXPECT_EQ(a100.timing_count, 0);
  EXPECT_EQ(a100.live_workers, 0);
  EXPECT_EQ(h100.fingerprint, H100());
  EXPECT_EQ(h100.hash, H100().Hash());
  EXPECT_EQ(h100.timing_count, 8 + 6);
  EXPECT_EQ(h100.live_workers, 1);
  EXPECT_FALSE(h100.first_seen.empty());

  auto all = store_->ListWorkers();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "gpu-node:1:0");
  EXPECT_TRUE((*all)[0].alive);
  EXPECT_EQ((*all)[0].device, H100());
  EXPECT_FALSE((*all)[1].alive);
  auto alive = store_->ListWorkers(/*alive_only=*/true);
  ASSERT_TRUE(alive.ok());
  ASSERT_EQ(alive->size(), 1u);
  EXPECT_EQ((*alive)[0].host, "gpu-node");

  // A heartbeat brings the old worker back.
  ASSERT_TRUE(store_->Heartbeat("old-node:1:0").ok());
  alive = store_->ListWorkers(true);
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(alive->size(), 2u);
  EXPECT_EQ(store_->Heartbeat("never-registered").code(), StatusCode::kNotFound);
}

// A worker that stopped cleanly is listed stopped at once, and rows of workers silent for longer
// than the retention are pruned, except one that a running job names (issue 22).
TEST_F(CatalogTest, StoppedWorkersAreNotAliveAndSilentOnesArePruned) {
  ASSERT_TRUE(store_->RegisterWorker("stopping:1:cpu", "node", H100()).ok());
  ASSERT_TRUE(store_->MarkWorkerStopped("stopping:1:cpu").ok());
  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status().ToString();
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_FALSE((*workers)[0].alive);
  EXPECT_TRUE(store_->ListWorkers(/*alive_only=*/true)->empty());
  auto devices = store_->ListDevices();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ((*devices)[0].live_workers, 0);
  EXPECT_EQ(store_->MarkWorkerStopped("never-registered").code(), StatusCode::kNotFound);
  // Started again: alive.
  ASSERT_TRUE(store_->RegisterWorker("stopping:1:cpu", "node", H100()).ok());
  EXPECT_EQ(store_->ListWorkers(true)->size(), 1u);

  ASSERT_TRUE(store_->RegisterWorker("silent:1:cpu", "node", H100()).ok());
  ASSERT_TRUE(store_->RegisterWorker("busy:1:cpu", "node", H100()).ok());
  ASSERT_TRUE(store_->EnqueueJob(H100(), Conv3x3(64), 8, BatchPolicy::kPowerOfTwo).ok());
  auto claimed = store_->ClaimJob(H100().Hash(), "busy:1:cpu", std::chrono::hours(1), 3);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  Execute(
      "UPDATE workers SET last_heartbeat = now() - interval '8 days' "
      "WHERE id IN ('silent:1:cpu', 'busy:1:cpu')");
  auto pruned = store_->PruneWorkers(std::chrono::hours(24 * 7));
  ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
  EXPECT_EQ(*pruned, 1);
  workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  std::vector<std::string> ids;
  for (const WorkerInfo& w : *workers) ids.push_back(w.id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"busy:1:cpu", "stopping:1:cpu"}));
  EXPECT_EQ(store_->PruneWorkers(std::chrono::seconds(0)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CatalogTest, JobListsAndCounts) {
  ASSERT_TRUE(store_->RegisterWorker("w1", "node", H100()).ok());
  std::vector<int64_t> ids;
  for (int64_t c : {16, 32, 48}) {
    auto r = store_->EnqueueJob(H100(), Conv3x3(c), 32, BatchPolicy::kPowerOfTwo);
    ASSERT_TRUE(r.ok());
    ids.push_back(r->job_id);
  }
  auto on_a100 = store_->EnqueueJob(A100(), Conv3x3(16), 32, BatchPolicy::kAll);
  ASSERT_TRUE(on_a100.ok());
  auto claimed = store_->ClaimJob(H100().Hash(), "w1", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_TRUE(store_->CompleteJob((*claimed)->id, "w1", SampleTimings(32, 2)).ok());
  claimed = store_->ClaimJob(H100().Hash(), "w1", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());

  auto depth = store_->QueueDepth();
  ASSERT_TRUE(depth.ok());
  EXPECT_EQ(*depth, 3);  // one H100 queued + one running + the A100 one

  auto all = store_->ListJobs(std::nullopt, 100);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].id, on_a100->job_id);  // newest first
  auto done = store_->ListJobs(JobState::kDone, 100);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ((*done)[0].worker_id, "w1");
  auto limited = store_->ListJobs(std::nullopt, 2);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->size(), 2u);
  EXPECT_EQ(store_->ListJobs(std::nullopt, 0).status().code(), StatusCode::kInvalidArgument);

  auto counts = store_->JobCountsByDevice();
  ASSERT_TRUE(counts.ok());
  ASSERT_EQ(counts->size(), 2u);
  for (const DeviceJobCounts& c : *counts) {
    if (c.device_hash == H100().Hash()) {
      EXPECT_EQ(c.device_name, H100().name);
      EXPECT_EQ(c.queued, 1);
      EXPECT_EQ(c.running, 1);
      EXPECT_EQ(c.done, 1);
      EXPECT_EQ(c.failed, 0);
    } else {
      EXPECT_EQ(c.device_hash, A100().Hash());
      EXPECT_EQ(c.queued, 1);
    }
  }
  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].jobs_done, 1);
}

TEST_F(CatalogTest, PlanCacheStoresBytesExactly) {
  const uint64_t hash = 0xfeedfacecafebeefULL;  // above INT64_MAX: exercises the bit-cast
  auto missing = store_->GetCachedPlan(hash);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_FALSE(missing->has_value());

  std::string plan("\x08\x01\x00\xff\x10serialized plan\x00tail", 24);
  ASSERT_TRUE(store_->PutCachedPlan(hash, H100(), plan).ok());
  auto got = store_->GetCachedPlan(hash);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, plan);

  // First writer wins: a second plan under the same hash (a collision) replaces nothing.
  ASSERT_TRUE(store_->PutCachedPlan(hash, H100(), "another plan").ok());
  got = store_->GetCachedPlan(hash);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, plan);

  EXPECT_EQ(store_->PutCachedPlan(hash, H100(), "").code(), StatusCode::kInvalidArgument);
}

class PlanCacheTest : public StoreTest {
 protected:
  // Sets a plan's last use `seconds_ago`.
  void UsedAgo(uint64_t hash, int seconds_ago) {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec_params(
        "UPDATE plans SET last_used_at = now() - make_interval(secs => $2) WHERE hash = $1",
        static_cast<int64_t>(hash), seconds_ago);
    tx.commit();
  }
  double SecondsSinceUse(uint64_t hash) {
    pqxx::connection conn(url());
    pqxx::nontransaction tx(conn);
    return tx
        .exec_params1(
            "SELECT extract(epoch FROM now() - last_used_at)::float8 FROM plans WHERE hash = $1",
            static_cast<int64_t>(hash))[0]
        .as<double>();
  }
  std::vector<uint64_t> Stored() {
    pqxx::connection conn(url());
    pqxx::nontransaction tx(conn);
    std::vector<uint64_t> hashes;
    for (const auto& row : tx.exec("SELECT hash FROM plans ORDER BY hash")) {
      hashes.push_back(static_cast<uint64_t>(row[0].as<int64_t>()));
    }
    return hashes;
  }
};

TEST_F(PlanCacheTest, EvictionKeepsTheMostRecentlyUsedPerDevice) {
  for (uint64_t h = 1; h <= 6; ++h) {
    ASSERT_TRUE(store_->PutCachedPlan(h, H100(), "plan " + std::to_string(h)).ok());
    UsedAgo(h, 1000 - static_cast<int>(h) * 100);  // plan 6 the most recent, plan 1 the oldest
  }
  for (uint64_t h = 101; h <= 102; ++h) {
    ASSERT_TRUE(store_->PutCachedPlan(h, A100(), "a100 plan").ok());
    UsedAgo(h, 5000);  // older than every H100 plan, but A100 has its own budget
  }
  // A read makes plan 2 recent again.
  ASSERT_TRUE(store_->GetCachedPlan(2).ok());

  auto evicted = store_->EvictPlans(3);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_EQ(*evicted, 3);
  EXPECT_EQ(Stored(), (std::vector<uint64_t>{2, 5, 6, 101, 102}));
  EXPECT_FALSE(store_->GetCachedPlan(1)->has_value());

  // Within the bound nothing goes; a bound of 1 keeps the newest of each device.
  EXPECT_EQ(*store_->EvictPlans(3), 0);
  EXPECT_EQ(*store_->EvictPlans(1), 3);
  EXPECT_EQ(Stored(), (std::vector<uint64_t>{2, 102}));  // a tie keeps the larger hash
  EXPECT_EQ(store_->EvictPlans(0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(PlanCacheTest, ReadsMoveTheLastUseAtMostOncePerInterval) {
  ASSERT_TRUE(store_->PutCachedPlan(7, H100(), "plan").ok());
  // Used 10 s ago: within the 60 s interval, a read does not write.
  UsedAgo(7, 10);
  ASSERT_TRUE(store_->GetCachedPlan(7)->has_value());
  EXPECT_GE(SecondsSinceUse(7), 9.0);
  // Used 2 minutes ago: the read moves it to now.
  UsedAgo(7, 120);
  ASSERT_TRUE(store_->GetCachedPlan(7)->has_value());
  EXPECT_LT(SecondsSinceUse(7), 5.0);
}

TEST_F(CatalogTest, PingAndPoolStats) {
  ASSERT_TRUE(store_->Ping().ok());
  const PoolStats stats = store_->GetPoolStats();
  EXPECT_EQ(stats.size, 4);
  EXPECT_GE(stats.open, 1);
  EXPECT_EQ(stats.in_use, 0);
  EXPECT_GE(stats.connects, 1);
  EXPECT_FALSE(stats.backing_off);
}

}  // namespace
}  // namespace ucudnn::store
