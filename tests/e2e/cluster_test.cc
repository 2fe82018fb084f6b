// The whole system on one machine: PostgreSQL, two ucudnn-server replicas and two CPU workers
// as separate processes. A client plans a tiny network through server A (waiting for the
// benchmarks), server B serves the catalog; every timing is stored once, and the same request to
// B is answered from the shared plan cache.
#include <gmock/gmock.h>

#include <set>
#include <thread>

#include "e2e/e2e_fixture.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/size_rule.h"

namespace ucudnn::e2e {
namespace {

using ::testing::AnyOf;
using ::testing::Eq;

class ClusterTest : public E2eTest {};

// The catalog's timings of `problem` on the CPU workers' device.
grpc::Status TimingsOf(v1::CatalogService::Stub& catalog, const ConvProblem& problem,
                       v1::GetTimingsResponse* timings) {
  v1::GetTimingsRequest request;
  *request.mutable_device() = ToProto(CpuDevice());
  *request.mutable_problem() = ToProto(problem);
  return catalog.GetTimings(ContextWithDeadline(seconds(10)).get(), request, timings);
}

TEST_F(ClusterTest, PlansThroughOneServerWhileTheOtherServesTheCatalog) {
  // Every size of the policy (the tables' counts below are the policy's, not a limit's).
  ServerProcess* a = StartServer("a", {"--search-sizes", "all"});
  ServerProcess* b = StartServer("b", {"--search-sizes", "all"});
  ASSERT_TRUE(a != nullptr && b != nullptr);
  auto catalog = b->Catalog();

  // The client plans through A and waits for the benchmarks; no worker runs yet.
  const auto network = TinyNetwork();
  const auto problems = DistinctProblems(network);
  ASSERT_EQ(problems.size(), kTinyNetworkProblems);
  const v1::GetPlanRequest request = PlanRequestFor(network, /*max_wait_ms=*/60000);
  v1::GetPlanResponse first;
  grpc::Status first_status;
  std::thread client([&] {
    first_status = a->Planner()->GetPlan(ContextWithDeadline(seconds(90)).get(), request, &first);
  });
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{client};

  // Meanwhile B's catalog shows the jobs A enqueued, one per distinct problem.
  v1::ListJobsResponse queued;
  ASSERT_TRUE(WaitUntil([&] {
    queued.Clear();
    const auto status =
        catalog->ListJobs(ContextWithDeadline(seconds(10)).get(), v1::ListJobsRequest(), &queued);
    // (The job list and the queue depth are two reads: wait until both show the jobs.)
    return status.ok() && queued.queue_depth() == static_cast<int64_t>(problems.size()) &&
           queued.jobs_size() == static_cast<int>(problems.size());
  })) << queued.DebugString();
  EXPECT_EQ(queued.jobs_size(), static_cast<int>(problems.size()));
  for (const auto& job : queued.jobs()) EXPECT_EQ(job.state(), "queued");

  // Two workers benchmark them.
  ASSERT_TRUE(StartWorker("w1") != nullptr);
  ASSERT_TRUE(StartWorker("w2") != nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(2));
  client.join();
  ASSERT_TRUE(first_status.ok()) << Describe(first_status);

  // The catalog on B sees both workers alive, on one device: this machine's CPU.
  {
    v1::ListWorkersResponse workers;
    v1::ListWorkersRequest workers_request;
    workers_request.set_alive_only(true);
    const auto status =
        catalog->ListWorkers(ContextWithDeadline(seconds(10)).get(), workers_request, &workers);
    ASSERT_TRUE(status.ok()) << Describe(status);
    ASSERT_EQ(workers.workers_size(), 2);
    for (const auto& w : workers.workers()) {
      auto device = FromProto(w.device());
      ASSERT_TRUE(device.ok()) << device.status().ToString();
      EXPECT_EQ(*device, CpuDevice()) << "the client's fingerprint must match the workers'";
    }
  }

  EXPECT_FALSE(first.from_cache());
  EXPECT_GT(first.waited_ms(), 0u);
  ASSERT_EQ(first.plan().status(), v1::PLAN_STATUS_COMPLETE) << first.plan().DebugString();
  ASSERT_EQ(first.plan().kernels_size(), static_cast<int>(network.size()));
  for (int i = 0; i < first.plan().kernels_size(); ++i) {
    const auto& kernel = first.plan().kernels(i);
    EXPECT_EQ(kernel.status(), v1::KERNEL_PLAN_STATUS_PLANNED) << i;
    EXPECT_EQ(kernel.kernel().name(), network[static_cast<size_t>(i)].name);
    EXPECT_GT(kernel.time_ms(), 0.0);
  }
  // The plan decodes and passes every consistency check a client applies.
  auto decoded = FromProto(first.plan());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(first.plan().missing_size(), 0);

  // Exactly the jobs seen queued, each done at its first attempt.
  {
    v1::ListJobsResponse jobs;
    const auto status =
        catalog->ListJobs(ContextWithDeadline(seconds(10)).get(), v1::ListJobsRequest(), &jobs);
    ASSERT_TRUE(status.ok()) << Describe(status);
    ASSERT_EQ(jobs.jobs_size(), static_cast<int>(problems.size()));
    EXPECT_EQ(jobs.queue_depth(), 0);
    std::set<std::string> job_problems;
    std::set<int64_t> queued_ids, done_ids;
    for (const auto& job : queued.jobs()) queued_ids.insert(job.id());
    for (const auto& job : jobs.jobs()) {
      done_ids.insert(job.id());
      EXPECT_EQ(job.state(), "done");
      EXPECT_EQ(job.attempts(), 1);
      EXPECT_THAT(job.worker_id(), AnyOf(Eq("w1:cpu"), Eq("w2:cpu")));
      auto problem = FromProto(job.problem());
      ASSERT_TRUE(problem.ok());
      job_problems.insert(CanonicalKey(*problem));
    }
    EXPECT_EQ(job_problems.size(), problems.size());
    EXPECT_EQ(done_ids, queued_ids);
  }

  // Every (micro-batch, algorithm) of every problem stored once, written by one worker.
  size_t expected_total = 0;
  for (const auto& [problem, max_batch] : problems) {
    v1::GetTimingsResponse timings;
    const auto status = TimingsOf(*catalog, problem, &timings);
    ASSERT_TRUE(status.ok()) << Describe(status);
    const size_t expected = ExpectedTimings(problem, max_batch);
    expected_total += expected;
    EXPECT_EQ(static_cast<size_t>(timings.timings_size()), expected) << CanonicalKey(problem);
    std::set<std::pair<int64_t, int>> keys;
    std::set<std::string> writers;
    int ok = 0;
    for (const auto& t : timings.timings()) {
      keys.emplace(t.micro_batch(), t.algo());
      writers.insert(t.measured_by());
      ok += t.status() == v1::TIMING_STATUS_OK ? 1 : 0;
    }
    EXPECT_EQ(keys.size(), static_cast<size_t>(timings.timings_size())) << "a duplicate timing";
    EXPECT_EQ(writers.size(), 1u) << "one job, one writer";
    EXPECT_GT(ok, 0);
  }
  auto rows = Query("SELECT count(*) FROM timings");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(static_cast<size_t>(*rows), expected_total);
  auto duplicates = Query(
      "SELECT count(*) FROM (SELECT 1 FROM timings GROUP BY device_id, problem_id, micro_batch, "
      "algo HAVING count(*) > 1) d");
  ASSERT_TRUE(duplicates.ok());
  EXPECT_EQ(*duplicates, 0);

  {
    v1::ListDevicesResponse devices;
    const auto status = catalog->ListDevices(ContextWithDeadline(seconds(10)).get(),
                                             v1::ListDevicesRequest(), &devices);
    ASSERT_TRUE(status.ok()) << Describe(status);
    ASSERT_EQ(devices.devices_size(), 1);
    EXPECT_EQ(static_cast<size_t>(devices.devices(0).timing_count()), expected_total);
    EXPECT_EQ(devices.devices(0).live_workers(), 2);
  }
  {
    v1::GetParetoFrontRequest pareto_request;
    *pareto_request.mutable_device() = ToProto(CpuDevice());
    *pareto_request.mutable_kernel() = ToProto(network[0]);
    v1::GetParetoFrontResponse front;
    const auto status =
        catalog->GetParetoFront(ContextWithDeadline(seconds(10)).get(), pareto_request, &front);
    ASSERT_TRUE(status.ok()) << Describe(status);
    ASSERT_GT(front.points_size(), 0);
    for (int i = 1; i < front.points_size(); ++i) {
      EXPECT_GT(front.points(i).workspace_bytes(), front.points(i - 1).workspace_bytes());
      EXPECT_LT(front.points(i).time_ms(), front.points(i - 1).time_ms());
    }
  }
  {
    v1::ExplainPlanRequest explain_request;
    *explain_request.mutable_request() = request;
    v1::ExplainPlanResponse explained;
    const auto status =
        catalog->ExplainPlan(ContextWithDeadline(seconds(10)).get(), explain_request, &explained);
    ASSERT_TRUE(status.ok()) << Describe(status);
    EXPECT_EQ(explained.plan().status(), v1::PLAN_STATUS_COMPLETE);
    EXPECT_THAT(explained.text(), ::testing::HasSubstr("conv2/bwd_data"));
  }

  // The identical request to B: a hit in the plan cache A filled (shared through the database),
  // the very same plan.
  v1::GetPlanResponse second;
  {
    const auto status =
        b->Planner()->GetPlan(ContextWithDeadline(seconds(30)).get(), request, &second);
    ASSERT_TRUE(status.ok()) << Describe(status);
  }
  EXPECT_TRUE(second.from_cache());
  EXPECT_EQ(second.waited_ms(), 0u);
  EXPECT_EQ(second.plan().plan_hash(), first.plan().plan_hash());
  EXPECT_EQ(second.plan().SerializeAsString(), first.plan().SerializeAsString());

  // Nothing more was benchmarked or written for it.
  auto jobs_after = Query("SELECT count(*) FROM jobs");
  ASSERT_TRUE(jobs_after.ok());
  EXPECT_EQ(static_cast<size_t>(*jobs_after), problems.size());
  auto rows_after = Query("SELECT count(*) FROM timings");
  ASSERT_TRUE(rows_after.ok());
  EXPECT_EQ(*rows_after, *rows);

  for (auto& s : servers_) EXPECT_TRUE(s->process().Running()) << s->name();
  for (auto& w : workers_) EXPECT_TRUE(w->process().Running()) << w->worker_id();
}

// A per-kernel request's jobs carry its workspace limit (the server's --search-sizes limit): the
// worker times the sizes the size rule asks for that limit, the server plans once the
// stored tables hold them, and a later request with a smaller limit widens the same problems'
// tables to the sizes it asks, nothing timed twice.
TEST_F(ClusterTest, APerKernelRequestsJobsTimeTheSizesItsLimitCanUse) {
  ServerProcess* server = StartServer("a", {"--search-sizes", "limit"});
  ASSERT_TRUE(server != nullptr);
  ASSERT_TRUE(StartWorker("w1") != nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(1));
  auto catalog = server->Catalog();
  const auto network = TinyNetwork();
  const auto problems = DistinctProblems(network);
  // The stored table of every problem, and whether it holds what `limit` asks of it.
  auto tables = [&]() {
    std::vector<TimingTable> out;
    for (const auto& [problem, max_batch] : problems) {
      v1::GetTimingsResponse timings;
      const auto status = TimingsOf(*catalog, problem, &timings);
      EXPECT_TRUE(status.ok()) << Describe(status);
      TimingTable table;
      for (const auto& t : timings.timings()) {
        auto timing = FromProto(t);
        EXPECT_TRUE(timing.ok()) << timing.status().ToString();
        if (timing.ok()) table.entries.push_back(*timing);
      }
      out.push_back(std::move(table));
    }
    return out;
  };
  auto plan = [&](uint64_t limit) {
    v1::GetPlanResponse response;
    const auto status = server->Planner()->GetPlan(
        ContextWithDeadline(seconds(90)).get(), PlanRequestFor(network, 60000, limit), &response);
    ASSERT_TRUE(status.ok()) << Describe(status);
    EXPECT_EQ(response.plan().status(), v1::PLAN_STATUS_COMPLETE) << limit;
  };
  auto covered = [&](const std::vector<TimingTable>& stored, uint64_t limit) {
    for (size_t i = 0; i < problems.size(); ++i) {
      const int64_t max_batch = problems[i].second;
      EXPECT_THAT(NextSizesForLimit(stored[i], MicroBatchSizes(BatchPolicy::kPowerOfTwo, max_batch),
                                    max_batch, limit),
                  ::testing::IsEmpty())
          << CanonicalKey(problems[i].first) << " at " << limit;
    }
  };

  plan(uint64_t{1} << 30);
  const std::vector<TimingTable> first = tables();
  covered(first, uint64_t{1} << 30);
  size_t first_rows = 0;
  for (const TimingTable& table : first) first_rows += table.entries.size();

  plan(0);  // no workspace: the fastest configurations rarely fit, smaller sizes may pay
  const std::vector<TimingTable> second = tables();
  covered(second, 0);
  size_t second_rows = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    second_rows += second[i].entries.size();
    std::set<std::pair<int64_t, std::string>> keys;
    for (const Timing& t : second[i].entries) {
      keys.emplace(t.micro_batch, AlgorithmText(AlgorithmOf(t)));
    }
    EXPECT_EQ(keys.size(), second[i].entries.size()) << "a configuration timed twice";
  }
  EXPECT_GE(second_rows, first_rows);
  // Every job is done, none failed; one job per problem and limit at most.
  ASSERT_TRUE(WaitUntil([&] {
    auto live = QueryInt(url(), "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')");
    return live.ok() && *live == 0;
  }));
  auto failed = QueryInt(url(), "SELECT count(*) FROM jobs WHERE state = 'failed'");
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(*failed, 0);
  auto limits = QueryInt(url(), "SELECT count(*) FROM jobs WHERE workspace_limit IS NULL");
  ASSERT_TRUE(limits.ok());
  EXPECT_EQ(*limits, 0) << "a per-kernel request's job without its limit";
  // The operator sees each job's limit (ListJobs, `ucudnn jobs`).
  v1::ListJobsResponse listed;
  const auto status =
      catalog->ListJobs(ContextWithDeadline(seconds(10)).get(), v1::ListJobsRequest(), &listed);
  ASSERT_TRUE(status.ok()) << Describe(status);
  ASSERT_FALSE(listed.jobs().empty());
  for (const v1::Job& job : listed.jobs()) {
    EXPECT_TRUE(job.has_workspace_limit_bytes()) << job.id();
  }
}

}  // namespace
}  // namespace ucudnn::e2e
