// Load: 1,000 concurrent GetPlan calls for the same new network, spread over two server replicas,
// make exactly one benchmark job per distinct problem; once a worker ran them, the plan is
// complete.
#include <gmock/gmock.h>

#include <map>
#include <set>

#include "e2e/e2e_fixture.h"

namespace ucudnn::e2e {
namespace {

class LoadTest : public E2eTest {};

TEST_F(LoadTest, AThousandConcurrentPlanRequestsMakeOneJobPerProblem) {
  ServerProcess* a = StartServer("a");
  ServerProcess* b = StartServer("b");
  ASSERT_TRUE(a != nullptr && b != nullptr);

  // No worker yet: the jobs stay queued, so every job ever made is still there to count.
  constexpr int kCalls = 1000;
  const auto network = TinyNetwork(3);
  const v1::GetPlanRequest request = PlanRequestFor(network, /*max_wait_ms=*/0);
  std::unique_ptr<v1::PlannerService::Stub> stubs[2] = {a->Planner(), b->Planner()};

  struct Call {
    grpc::ClientContext context;
    v1::GetPlanResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::GetPlanResponse>> reader;
  };
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<Call>> calls;
  calls.reserve(kCalls);
  // Every call is started before the first answer is read: all 1,000 are in flight at once.
  for (int i = 0; i < kCalls; ++i) {
    auto call = std::make_unique<Call>();
    call->context.set_deadline(std::chrono::system_clock::now() + seconds(60));
    call->reader = stubs[i % 2]->PrepareAsyncGetPlan(&call->context, request, &queue);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call.get());
    calls.push_back(std::move(call));
  }
  for (int i = 0; i < kCalls; ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(queue.Next(&tag, &ok));
    EXPECT_TRUE(ok);
  }
  queue.Shutdown();

  std::map<std::string, int> codes;
  std::map<std::string, std::set<int64_t>> job_ids_by_problem;
  for (const auto& call : calls) {
    ++codes[Describe(call->status).substr(0, Describe(call->status).find(':'))];
    if (!call->status.ok()) continue;
    EXPECT_EQ(call->response.plan().status(), v1::PLAN_STATUS_PARTIAL);
    for (const auto& missing : call->response.plan().missing()) {
      job_ids_by_problem[missing.problem_hash()].insert(missing.job_id());
    }
  }
  std::string summary;
  for (const auto& [code, n] : codes) summary += code + ": " + std::to_string(n) + " ";
  std::cout << "[          ] " << kCalls << " concurrent GetPlan calls: " << summary << "\n";
  EXPECT_EQ(codes["OK"], kCalls) << summary;

  // One job per distinct problem, and every answer named that same job.
  auto jobs = Query("SELECT count(*) FROM jobs");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(static_cast<size_t>(*jobs), kTinyNetworkProblems);
  auto per_problem = Query(
      "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM jobs GROUP BY device_id, "
      "problem_id) j");
  ASSERT_TRUE(per_problem.ok());
  EXPECT_EQ(*per_problem, 1);
  EXPECT_EQ(job_ids_by_problem.size(), kTinyNetworkProblems);
  for (const auto& [problem, ids] : job_ids_by_problem) {
    EXPECT_EQ(ids.size(), 1u) << "problem " << problem << " got several jobs";
  }
  auto problems = Query("SELECT count(*) FROM problems");
  ASSERT_TRUE(problems.ok());
  EXPECT_EQ(static_cast<size_t>(*problems), kTinyNetworkProblems);

  // A worker runs the four jobs; then the plan is complete, with no further job.
  ASSERT_NE(StartWorker("w1"), nullptr);
  v1::GetPlanResponse complete;
  const auto status = a->Planner()->GetPlan(ContextWithDeadline(seconds(90)).get(),
                                            PlanRequestFor(network, 60000), &complete);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(complete.plan().status(), v1::PLAN_STATUS_COMPLETE);
  auto done = Query("SELECT count(*) FROM jobs WHERE state = 'done'");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(static_cast<size_t>(*done), kTinyNetworkProblems);
  jobs = Query("SELECT count(*) FROM jobs");
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(static_cast<size_t>(*jobs), kTinyNetworkProblems);
  EXPECT_TRUE(a->process().Running());
  EXPECT_TRUE(b->process().Running());
}

}  // namespace
}  // namespace ucudnn::e2e
