#include <cmath>

#include <gtest/gtest.h>

#include "support/problems.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/server/lru_cache.h"
#include "ucudnn/server/plan_coordinator.h"
#include "ucudnn/server/plan_key.h"
#include "ucudnn/server/timings_cache.h"

namespace ucudnn::server {
namespace {

using test_support::MakeTiming;

TEST(LruCacheTest, EvictsLeastRecentlyUsed) {
  LruCache<int, std::string> cache(2);
  cache.Put(1, std::make_shared<std::string>("one"));
  cache.Put(2, std::make_shared<std::string>("two"));
  ASSERT_NE(cache.Get(1), nullptr);  // 1 is now the most recent
  cache.Put(3, std::make_shared<std::string>("three"));
  EXPECT_EQ(cache.Get(2), nullptr);
  ASSERT_NE(cache.Get(1), nullptr);
  EXPECT_EQ(*cache.Get(1), "one");
  EXPECT_EQ(*cache.Get(3), "three");
  EXPECT_EQ(cache.size(), 2u);
  cache.Put(3, std::make_shared<std::string>("drei"));
  EXPECT_EQ(*cache.Get(3), "drei");
  cache.Erase(3);
  EXPECT_EQ(cache.Get(3), nullptr);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(LruCacheTest, ZeroCapacityStoresNothing) {
  LruCache<int, int> cache(0);
  cache.Put(1, std::make_shared<int>(1));
  EXPECT_EQ(cache.Get(1), nullptr);
}

std::shared_ptr<const CachedTimings> Entry(double time_ms) {
  auto entry = std::make_shared<CachedTimings>();
  entry->table.entries.push_back(MakeTiming(8, 1, time_ms));
  entry->digest = TimingTableDigest(entry->table);
  return entry;
}

TEST(TimingsCacheTest, BypassedUntilLive) {
  TimingsCache cache(16);
  cache.Put({1, 2}, Entry(1.5), cache.epoch());
  EXPECT_EQ(cache.Get({1, 2}), nullptr);
  cache.SetLive(true);
  cache.Put({1, 2}, Entry(1.5), cache.epoch());
  ASSERT_NE(cache.Get({1, 2}), nullptr);
  EXPECT_EQ(cache.Get({1, 2})->table.entries[0].time_ms, 1.5);
  // Losing the listener empties the cache: notifications may be lost from now on.
  cache.SetLive(false);
  EXPECT_EQ(cache.Get({1, 2}), nullptr);
  cache.SetLive(true);
  EXPECT_EQ(cache.Get({1, 2}), nullptr);
}

TEST(TimingsCacheTest, InvalidationDuringReadDropsThePut) {
  TimingsCache cache(16);
  cache.SetLive(true);
  const uint64_t before_read = cache.epoch();
  cache.Invalidate({1, 2});  // a notification arrives while the database read is in flight
  cache.Put({1, 2}, Entry(1.5), before_read);
  EXPECT_EQ(cache.Get({1, 2}), nullptr);
  cache.Put({1, 2}, Entry(2.5), cache.epoch());
  ASSERT_NE(cache.Get({1, 2}), nullptr);
  cache.Invalidate({1, 3});  // another problem: this entry stays
  ASSERT_NE(cache.Get({1, 2}), nullptr);
  cache.Invalidate({1, 2});
  EXPECT_EQ(cache.Get({1, 2}), nullptr);
}

TEST(TimingsCacheTest, OldEntriesAreReadAgain) {
  TimingsCache cache(16, std::chrono::milliseconds(1));
  cache.SetLive(true);
  auto entry = std::make_shared<CachedTimings>();
  entry->loaded_at -= std::chrono::seconds(1);  // read a second ago
  cache.Put({1, 2}, entry, cache.epoch());
  EXPECT_EQ(cache.Get({1, 2}), nullptr);
  TimingsCache lasting(16, std::chrono::hours(1));
  lasting.SetLive(true);
  lasting.Put({1, 2}, entry, lasting.epoch());
  EXPECT_NE(lasting.Get({1, 2}), nullptr);
}

TEST(PlanKeyTest, TableDigestIgnoresOrderButSeesEveryField) {
  TimingTable a;
  a.entries.push_back(MakeTiming(1, 0, 0.5, 0));
  a.entries.push_back(MakeTiming(2, 1, 0.7, 1024));
  TimingTable b;
  b.entries = {a.entries[1], a.entries[0]};
  EXPECT_EQ(TimingTableDigest(a), TimingTableDigest(b));
  TimingTable c = a;
  c.entries[1].workspace_bytes = 1025;
  EXPECT_NE(TimingTableDigest(a), TimingTableDigest(c));
  TimingTable d = a;
  d.entries[0].time_ms = std::nextafter(0.5, 1.0);  // the smallest change of a time
  EXPECT_NE(TimingTableDigest(a), TimingTableDigest(d));
  TimingTable e = a;
  e.entries[0].status = TimingStatus::kFailed;
  EXPECT_NE(TimingTableDigest(a), TimingTableDigest(e));
}

PlanRequest SampleRequest() {
  PlanRequest request;
  request.device.backend = "cpu";
  request.device.name = "test cpu";
  request.device.sm_count = 2;
  request.device.memory_bytes = 1 << 30;
  request.device.blas = "openblas";
  Kernel kernel;
  kernel.problem.c = 64;
  kernel.problem.h = kernel.problem.w = 56;
  kernel.problem.k = 64;
  kernel.problem.r = kernel.problem.s = 3;
  kernel.problem.pad_h = kernel.problem.pad_w = 1;
  kernel.mini_batch = 256;
  kernel.name = "conv";
  request.kernels = {kernel, kernel};
  request.kernels[1].problem.op = ConvOp::kBackwardData;
  return request;
}

TEST(PlanKeyTest, ContentHashCoversRequestAndTimings) {
  const PlanRequest request = SampleRequest();
  const std::vector<std::optional<uint64_t>> digests = {11, 22};
  const uint64_t key = PlanContentHash(request, digests);
  EXPECT_EQ(key, PlanContentHash(request, digests));  // deterministic

  auto changed = [&](auto mutate) {
    PlanRequest other = request;
    mutate(other);
    return PlanContentHash(other, digests) != key;
  };
  EXPECT_TRUE(changed([](PlanRequest& r) { r.workspace_bytes += 1; }));
  EXPECT_TRUE(changed([](PlanRequest& r) { r.policy = BatchPolicy::kAll; }));
  EXPECT_TRUE(changed([](PlanRequest& r) { r.workspace_mode = WorkspaceMode::kTotalSum; }));
  EXPECT_TRUE(changed([](PlanRequest& r) { r.kernels[0].mini_batch = 128; }));
  EXPECT_TRUE(changed([](PlanRequest& r) { r.kernels[0].name = "other"; }));
  EXPECT_TRUE(changed([](PlanRequest& r) { r.kernels[1].problem.k = 32; }));
  EXPECT_TRUE(changed([](PlanRequest& r) { std::swap(r.kernels[0], r.kernels[1]); }));
  EXPECT_TRUE(changed([](PlanRequest& r) { r.device.sm_count = 4; }));
  // A kernel's own limit, set or changed, is a different request.
  EXPECT_TRUE(changed([](PlanRequest& r) { r.kernels[1].workspace_limit = 0; }));
  PlanRequest limited = request;
  limited.kernels[1].workspace_limit = 1 << 20;
  PlanRequest other_limit = limited;
  other_limit.kernels[1].workspace_limit = 2 << 20;
  EXPECT_NE(PlanContentHash(limited, digests), PlanContentHash(other_limit, digests));
  EXPECT_NE(CanonicalPlanRequest(limited), CanonicalPlanRequest(other_limit));
  // The ILP time limit matters only where an ILP runs (total_sum): it may stop the solve.
  EXPECT_FALSE(changed([](PlanRequest& r) { r.ilp_time_limit_s = 1; }));
  PlanRequest total = request;
  total.workspace_mode = WorkspaceMode::kTotalSum;
  PlanRequest total_short = total;
  total_short.ilp_time_limit_s = 1;
  EXPECT_NE(PlanContentHash(total, digests), PlanContentHash(total_short, digests));
  EXPECT_NE(PlanContentHash(request, {11, 23}), key);
  EXPECT_NE(PlanContentHash(request, {11, std::nullopt}), key);
  // The check hash is of the same text by another function.
  const std::string text = PlanContentText(request, digests);
  EXPECT_EQ(Fnv1a64(text), key);
  EXPECT_EQ(PlanContentCheck(text), PlanContentCheck(PlanContentText(request, digests)));
  EXPECT_NE(PlanContentCheck(text), PlanContentCheck(PlanContentText(request, {11, 23})));
}

TEST(PlanKeyTest, AStoredPlanMustAnswerTheRequest) {
  const PlanRequest request = SampleRequest();
  NetworkPlan network;
  network.policy = request.policy;
  network.workspace_mode = request.workspace_mode;
  network.workspace_budget_bytes = request.workspace_bytes;
  for (const auto& kernel : request.kernels) {
    KernelPlan k;
    k.kernel = kernel;
    k.status = KernelPlanStatus::kMissing;
    network.kernels.push_back(k);
  }
  const v1::Plan plan = ToProto(network, request.device);
  EXPECT_TRUE(PlanAnswersRequest(plan, request));
  auto answers = [&](auto mutate) {
    PlanRequest other = request;
    mutate(other);
    return PlanAnswersRequest(plan, other);
  };
  EXPECT_FALSE(answers([](PlanRequest& r) { r.workspace_bytes += 1; }));
  EXPECT_FALSE(answers([](PlanRequest& r) { r.policy = BatchPolicy::kAll; }));
  EXPECT_FALSE(answers([](PlanRequest& r) { r.workspace_mode = WorkspaceMode::kTotalShared; }));
  EXPECT_FALSE(answers([](PlanRequest& r) { r.device.sm_count = 4; }));
  EXPECT_FALSE(answers([](PlanRequest& r) { r.kernels[1].mini_batch = 128; }));
  EXPECT_FALSE(answers([](PlanRequest& r) { r.kernels[0].name = "other"; }));
  EXPECT_FALSE(answers([](PlanRequest& r) { r.kernels[1].problem.k = 32; }));
  EXPECT_FALSE(answers([](PlanRequest& r) { r.kernels.pop_back(); }));
  EXPECT_FALSE(answers([](PlanRequest& r) { std::swap(r.kernels[0], r.kernels[1]); }));
  EXPECT_FALSE(answers([](PlanRequest& r) { r.kernels[0].workspace_limit = 1 << 20; }));
  // A plan echoes each kernel's own limit, so it answers the request that gave it.
  NetworkPlan limited = network;
  limited.kernels[0].kernel.workspace_limit = 1 << 20;
  PlanRequest limited_request = request;
  limited_request.kernels[0].workspace_limit = 1 << 20;
  EXPECT_TRUE(PlanAnswersRequest(ToProto(limited, request.device), limited_request));
  EXPECT_FALSE(PlanAnswersRequest(ToProto(limited, request.device), request));
  // The ILP time limit is not in the plan; the key covers it.
  EXPECT_TRUE(answers([](PlanRequest& r) { r.ilp_time_limit_s = 1; }));
}

TEST(PlanKeyTest, NamesAreLengthPrefixed) {
  // "a|n=1" as a name must not read like another field.
  PlanRequest a = SampleRequest();
  PlanRequest b = SampleRequest();
  a.kernels[0].name = "x\nv1";
  b.kernels[0].name = "x";
  EXPECT_NE(CanonicalPlanRequest(a), CanonicalPlanRequest(b));
}

TEST(TableCoversTest, NeedsEverySizeTheJobWouldMeasure) {
  TimingTable table;
  for (int64_t b : {1, 2, 4, 8, 16}) {
    table.entries.push_back(MakeTiming(b, 0, 0.1 * b));
    table.entries.push_back(MakeTiming(b, 1, 0.2 * b));
  }
  const auto timings = MakeCachedTimings(table);
  EXPECT_EQ(timings->micro_batches, (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_TRUE(TableCovers(*timings, BatchPolicy::kPowerOfTwo, 16));
  EXPECT_TRUE(TableCovers(*timings, BatchPolicy::kPowerOfTwo, 8));
  EXPECT_FALSE(TableCovers(*timings, BatchPolicy::kPowerOfTwo, 32));
  EXPECT_FALSE(TableCovers(*timings, BatchPolicy::kPowerOfTwo, 12));  // 12 itself is needed
  EXPECT_TRUE(TableCovers(*timings, BatchPolicy::kUndivided, 16));
  EXPECT_FALSE(TableCovers(*timings, BatchPolicy::kUndivided, 12));
  EXPECT_FALSE(TableCovers(*timings, BatchPolicy::kAll, 16));  // 3, 5, ... are missing
  EXPECT_FALSE(TableCovers(*MakeCachedTimings({}), BatchPolicy::kUndivided, 1));
}

// With a workspace limit (a per-kernel request's), the sizes the size rule asks of the table:
// the mini-batch's first two splits always, smaller ones only where they can pay under it.
TEST(TableCoversTest, WithALimitNeedsTheSizesTheRuleAsksForIt) {
  // Algorithm 0 without workspace, 1 ms a sample; algorithm 1 twice as fast, 1 MiB a sample.
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  TimingTable table;
  for (int64_t b : {4, 8, 16}) {
    table.entries.push_back(MakeTiming(b, 0, 1.0 * b));
    table.entries.push_back(MakeTiming(b, 1, 0.5 * b, kMiB * b));
  }
  const auto timings = MakeCachedTimings(table);
  // The fast algorithm fits at every size: 16, 8 and 4 are all the rule asks.
  EXPECT_TRUE(TableCovers(*timings, BatchPolicy::kPowerOfTwo, 16, 16 * kMiB));
  // Without a limit every size of the policy is needed.
  EXPECT_FALSE(TableCovers(*timings, BatchPolicy::kPowerOfTwo, 16));
  // Under 4 MiB the fast algorithm fits at 4 only: 4 runs faster per sample within the limit
  // than 8, so 2 is asked for too.
  EXPECT_FALSE(TableCovers(*timings, BatchPolicy::kPowerOfTwo, 16, 4 * kMiB));
  table.entries.push_back(MakeTiming(2, 0, 2.0));
  table.entries.push_back(MakeTiming(2, 1, 1.0, 2 * kMiB));
  EXPECT_TRUE(TableCovers(*MakeCachedTimings(table), BatchPolicy::kPowerOfTwo, 16, 4 * kMiB));
  // The always-timed sizes are needed whatever the limit.
  EXPECT_FALSE(TableCovers(*timings, BatchPolicy::kPowerOfTwo, 32, 1 << 30));
  EXPECT_FALSE(TableCovers(*MakeCachedTimings({}), BatchPolicy::kPowerOfTwo, 16, 1 << 30));
}

TEST(GetPlanResponseFramingTest, ParsesAsTheMessage) {
  v1::Plan plan;
  plan.set_schema_version(1);
  plan.set_plan_hash("00112233445566ff");
  plan.set_total_time_ms(12.5);
  for (int i = 0; i < 200; ++i) plan.add_kernels()->set_reason(std::string(i, 'r'));  // > 127 B
  const std::string plan_bytes = plan.SerializeAsString();
  for (const auto& [from_cache, waited_ms] :
       std::vector<std::pair<bool, uint32_t>>{{false, 0}, {true, 0}, {false, 300}, {true, 70000}}) {
    const auto [prefix, suffix] = GetPlanResponseFraming(plan_bytes.size(), from_cache, waited_ms);
    v1::GetPlanResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(prefix + plan_bytes + suffix));
    EXPECT_EQ(parsed.from_cache(), from_cache);
    EXPECT_EQ(parsed.waited_ms(), waited_ms);
    EXPECT_EQ(parsed.plan().SerializeAsString(), plan_bytes);
    // The same bytes protobuf itself writes.
    v1::GetPlanResponse expected;
    *expected.mutable_plan() = plan;
    expected.set_from_cache(from_cache);
    expected.set_waited_ms(waited_ms);
    EXPECT_EQ(prefix + plan_bytes + suffix, expected.SerializeAsString());
  }
}

}  // namespace
}  // namespace ucudnn::server
