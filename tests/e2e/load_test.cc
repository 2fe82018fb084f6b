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
  // Starts the calls `indices` (call i goes to server i % 2) all at once, before the first answer
  // is read, and waits for every answer.
  auto wave = [&](const std::vector<int>& indices) {
    grpc::CompletionQueue queue;
    std::vector<std::unique_ptr<Call>> calls;
    calls.reserve(indices.size());
    for (int i : indices) {
      auto call = std::make_unique<Call>();
      call->context.set_deadline(std::chrono::system_clock::now() + seconds(60));
      call->reader = stubs[i % 2]->PrepareAsyncGetPlan(&call->context, request, &queue);
      call->reader->StartCall();
      call->reader->Finish(&call->response, &call->status, call.get());
      calls.push_back(std::move(call));
    }
    for (size_t n = 0; n < calls.size(); ++n) {
      void* tag = nullptr;
      bool ok = false;
      EXPECT_TRUE(queue.Next(&tag, &ok));
      EXPECT_TRUE(ok);
    }
    queue.Shutdown();
    return calls;
  };

  std::vector<int> pending(kCalls);
  for (int i = 0; i < kCalls; ++i) pending[static_cast<size_t>(i)] = i;
  std::map<std::string, std::set<int64_t>> job_ids_by_problem;
  int answered = 0;
  // Overloaded replicas may shed calls with UNAVAILABLE or RESOURCE_EXHAUSTED (a 2-core machine
  // running 1,000 calls, 8 database connections per replica); a client retries those, so they
  // are sent again in a later wave, as the client library would.
  for (int attempt = 0; attempt < 5 && !pending.empty(); ++attempt) {
    auto calls = wave(pending);
    std::map<std::string, int> codes;
    std::map<std::string, std::string> examples;
    std::vector<int> retry;
    for (size_t n = 0; n < calls.size(); ++n) {
      const Call& call = *calls[n];
      const std::string described = Describe(call.status);
      const std::string code = described.substr(0, described.find(':'));
      ++codes[code];
      examples.emplace(code, described);
      if (!call.status.ok()) {
        EXPECT_TRUE(call.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                    call.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
            << described;
        retry.push_back(pending[n]);
        continue;
      }
      ++answered;
      EXPECT_EQ(call.response.plan().status(), v1::PLAN_STATUS_PARTIAL);
      for (const auto& missing : call.response.plan().missing()) {
        job_ids_by_problem[missing.problem_hash()].insert(missing.job_id());
      }
    }
    std::string summary;
    for (const auto& [code, n] : codes) summary += code + ": " + std::to_string(n) + " ";
    std::cout << "[          ] wave " << attempt << ", " << calls.size()
              << " concurrent GetPlan calls: " << summary << "\n";
    for (const auto& [code, example] : examples) {
      if (code != "OK") std::cout << "[          ]   e.g. " << example << "\n";
    }
    pending = std::move(retry);
  }
  EXPECT_EQ(answered, kCalls);

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
