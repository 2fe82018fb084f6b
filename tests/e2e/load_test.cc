// Load: 1,000 concurrent GetPlan calls for the same new network, spread over two server replicas,
// make exactly one benchmark job per distinct problem; once a worker ran them, the plan is
// complete.
//
// Every call of a wave is started before the first answer is read, so the 1,000 calls are in
// flight together, and a share of the first wave must be answered (kMinFirstWaveOk). An overloaded
// replica may shed calls (UNAVAILABLE, RESOURCE_EXHAUSTED), which a client retries, so those are
// sent again in later waves until every call has its answer.
#include <gmock/gmock.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <map>
#include <set>
#include <thread>

#include "e2e/e2e_fixture.h"

namespace ucudnn::e2e {
namespace {

constexpr int kCalls = 1000;
// Share of the first wave's 1,000 calls answered OK. A replica sheds a call whose database work
// found all its 8 pooled connections busy for 10 s, so the share falls with the machine's speed.
// Measured on the 2-core development machine, two replicas: 89-100% (waiting variant 89-94%)
// with the machine to itself; 58-77% with both cores kept busy by two other processes, as in a
// loaded `ctest -j2`. The bound is half the worst of those: far above what a replica that stopped
// answering, or one that refused most concurrent calls, would get.
constexpr double kMinFirstWaveOk = 0.30;
// Share of the waiting variant's 1,000 calls found waiting at the servers at one moment: measured
// 68-73% with the machine to itself, 41-55% with both cores busy; the bound is half the worst.
constexpr double kMinWaitingAtOnce = 0.20;

struct Call {
  grpc::ClientContext context;
  v1::GetPlanResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::GetPlanResponse>> reader;
  std::chrono::steady_clock::time_point answered_at;
};

// A wave: the calls `indices` (call i goes to server i % 2), all started at once.
class Wave {
 public:
  Wave(std::unique_ptr<v1::PlannerService::Stub> (&stubs)[2], const v1::GetPlanRequest& request,
       const std::vector<int>& indices, milliseconds deadline) {
    calls_.reserve(indices.size());
    for (int i : indices) {
      auto call = std::make_unique<Call>();
      call->context.set_deadline(std::chrono::system_clock::now() + deadline);
      call->reader = stubs[i % 2]->PrepareAsyncGetPlan(&call->context, request, &queue_);
      call->reader->StartCall();
      call->reader->Finish(&call->response, &call->status, call.get());
      calls_.push_back(std::move(call));
    }
  }
  ~Wave() {
    AwaitAll();
    queue_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  // Waits for every answer (each call has its deadline).
  void AwaitAll() {
    while (answered_ < calls_.size()) {
      void* tag = nullptr;
      bool ok = false;
      if (!queue_.Next(&tag, &ok)) break;
      Record(tag, ok);
    }
  }

  const std::vector<std::unique_ptr<Call>>& calls() const { return calls_; }

 private:
  void Record(void* tag, bool ok) {
    EXPECT_TRUE(ok);
    static_cast<Call*>(tag)->answered_at = std::chrono::steady_clock::now();
    ++answered_;
  }

  grpc::CompletionQueue queue_;
  std::vector<std::unique_ptr<Call>> calls_;
  size_t answered_ = 0;
};

// What the waves of one load run got back.
struct LoadResult {
  int first_wave_ok = 0;
  int answered = 0;
  int complete = 0;           // answers with a COMPLETE plan
  int first_wave_waited = 0;  // first-wave answers that waited for benchmarks (waited_ms > 0)
  // Most first-wave calls waiting at the servers at one moment: the largest overlap of the
  // intervals [answer - waited_ms, answer].
  int most_waiting_at_once = 0;
  std::map<std::string, std::set<int64_t>> job_ids_by_problem;
};

// Sends kCalls GetPlan calls of `request` in waves, re-sending shed calls (at most 5 waves).
LoadResult RunLoad(std::unique_ptr<v1::PlannerService::Stub> (&stubs)[2],
                   const v1::GetPlanRequest& request, milliseconds deadline) {
  LoadResult result;
  std::vector<int> pending(kCalls);
  for (int i = 0; i < kCalls; ++i) pending[static_cast<size_t>(i)] = i;
  for (int attempt = 0; attempt < 5 && !pending.empty(); ++attempt) {
    Wave wave(stubs, request, pending, deadline);
    wave.AwaitAll();
    std::map<std::string, int> codes;
    std::map<std::string, std::string> examples;
    std::vector<int> retry;
    std::vector<std::pair<std::chrono::steady_clock::time_point, int>> wait_edges;
    for (size_t n = 0; n < wave.calls().size(); ++n) {
      const Call& call = *wave.calls()[n];
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
      ++result.answered;
      if (attempt == 0) ++result.first_wave_ok;
      if (call.response.plan().status() == v1::PLAN_STATUS_COMPLETE) ++result.complete;
      if (attempt == 0 && call.response.waited_ms() > 0) {
        ++result.first_wave_waited;
        wait_edges.emplace_back(call.answered_at - milliseconds(call.response.waited_ms()), +1);
        wait_edges.emplace_back(call.answered_at, -1);
      }
      for (const auto& missing : call.response.plan().missing()) {
        result.job_ids_by_problem[missing.problem_hash()].insert(missing.job_id());
      }
    }
    // Ends sort before starts at the same instant: touching intervals do not overlap.
    std::sort(wait_edges.begin(), wait_edges.end());
    for (int at_once = 0; const auto& [when, step] : wait_edges) {
      at_once += step;
      result.most_waiting_at_once = std::max(result.most_waiting_at_once, at_once);
    }
    std::string summary;
    for (const auto& [code, n] : codes) summary += code + ": " + std::to_string(n) + " ";
    std::cout << "[          ] wave " << attempt << ", " << wave.calls().size()
              << " concurrent GetPlan calls: " << summary << "\n";
    for (const auto& [code, example] : examples) {
      if (code != "OK") std::cout << "[          ]   e.g. " << example << "\n";
    }
    pending = std::move(retry);
  }
  std::cout << "[          ] first wave: " << result.first_wave_ok << " of " << kCalls
            << " answered OK, " << result.first_wave_waited
            << " of them after waiting for benchmarks, at most " << result.most_waiting_at_once
            << " at once; " << result.complete << " complete plans\n";
  return result;
}

class LoadTest : public E2eTest {
 protected:
  // Exactly one job per distinct problem in the whole database, and every answer that named a
  // job named that one.
  void ExpectOneJobPerProblem(const LoadResult& result) {
    auto jobs = Query("SELECT count(*) FROM jobs");
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    EXPECT_EQ(static_cast<size_t>(*jobs), kTinyNetworkProblems);
    auto per_problem = Query(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM jobs GROUP BY device_id, "
        "problem_id) j");
    ASSERT_TRUE(per_problem.ok());
    EXPECT_EQ(*per_problem, 1);
    for (const auto& [problem, ids] : result.job_ids_by_problem) {
      EXPECT_EQ(ids.size(), 1u) << "problem " << problem << " got several jobs";
    }
    auto problems = Query("SELECT count(*) FROM problems");
    ASSERT_TRUE(problems.ok());
    EXPECT_EQ(static_cast<size_t>(*problems), kTinyNetworkProblems);
  }
};

TEST_F(LoadTest, AThousandConcurrentPlanRequestsMakeOneJobPerProblem) {
  ServerProcess* a = StartServer("a");
  ServerProcess* b = StartServer("b");
  ASSERT_TRUE(a != nullptr && b != nullptr);

  // No worker yet: the jobs stay queued, so every job ever made is still there to count. The
  // calls answer at once (max_wait_ms 0) with a partial plan naming the jobs.
  const auto network = TinyNetwork(3);
  std::unique_ptr<v1::PlannerService::Stub> stubs[2] = {a->Planner(), b->Planner()};
  const LoadResult result = RunLoad(stubs, PlanRequestFor(network, /*max_wait_ms=*/0), seconds(60));
  EXPECT_GE(result.first_wave_ok, static_cast<int>(kMinFirstWaveOk * kCalls));
  EXPECT_EQ(result.answered, kCalls);
  EXPECT_EQ(result.complete, 0);
  EXPECT_EQ(result.job_ids_by_problem.size(), kTinyNetworkProblems);
  ExpectOneJobPerProblem(result);

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
  auto jobs = Query("SELECT count(*) FROM jobs");
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(static_cast<size_t>(*jobs), kTinyNetworkProblems);
  EXPECT_TRUE(a->process().Running());
  EXPECT_TRUE(b->process().Running());
}

// The same 1,000 calls, each willing to wait 4 s for the benchmarks, while no worker runs: they
// wait side by side on the two replicas (holding no thread, below --max-waiting-calls), each its
// whole budget, and answer with the partial plan; still one job per problem. The servers re-read
// the database for the missing timings every second (--recheck-interval, its production default)
// while they wait.
TEST_F(LoadTest, AThousandConcurrentWaitingPlanRequestsShareOneJobPerProblem) {
  const std::vector<std::string> flags = {"--recheck-interval", "1s"};
  ServerProcess* a = StartServer("a", flags);
  ServerProcess* b = StartServer("b", flags);
  ASSERT_TRUE(a != nullptr && b != nullptr);

  constexpr uint32_t kWaitMs = 4000;
  const auto network = TinyNetwork(4);
  std::unique_ptr<v1::PlannerService::Stub> stubs[2] = {a->Planner(), b->Planner()};
  const auto started = std::chrono::steady_clock::now();
  const LoadResult result = RunLoad(stubs, PlanRequestFor(network, kWaitMs), seconds(60));
  std::cout << "[          ] every call answered after "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
            << " s\n";

  EXPECT_GE(result.first_wave_ok, static_cast<int>(kMinFirstWaveOk * kCalls));
  EXPECT_EQ(result.answered, kCalls);
  EXPECT_EQ(result.complete, 0);
  // Every first-wave answer waited, and most of those calls were waiting at the same moment
  // (waiting one after another, 1,000 calls of 4 s would take over an hour).
  EXPECT_EQ(result.first_wave_waited, result.first_wave_ok);
  EXPECT_GE(result.most_waiting_at_once, static_cast<int>(kMinWaitingAtOnce * kCalls));
  EXPECT_EQ(result.job_ids_by_problem.size(), kTinyNetworkProblems);
  ExpectOneJobPerProblem(result);

  // A worker runs the four jobs; then the plan is complete, with no further job.
  ASSERT_NE(StartWorker("w1"), nullptr);
  v1::GetPlanResponse complete;
  const auto status = b->Planner()->GetPlan(ContextWithDeadline(seconds(90)).get(),
                                            PlanRequestFor(network, 60000), &complete);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(complete.plan().status(), v1::PLAN_STATUS_COMPLETE);
  ExpectOneJobPerProblem(result);
  EXPECT_TRUE(a->process().Running());
  EXPECT_TRUE(b->process().Running());
}

// The same 1,000 waiting calls with a worker that joins a second in: its jobs finish while calls
// are still arriving and waiting, and callers whose view of the timings went stale between
// reading and enqueueing must not queue the problem again. Exactly one job per problem, and the
// calls end with complete plans.
TEST_F(LoadTest, AThousandWaitingPlanRequestsWhileAWorkerFinishesMakeOneJobPerProblem) {
  const std::vector<std::string> flags = {"--recheck-interval", "1s"};
  ServerProcess* a = StartServer("a", flags);
  ServerProcess* b = StartServer("b", flags);
  ASSERT_TRUE(a != nullptr && b != nullptr);

  const auto network = TinyNetwork(5);
  std::unique_ptr<v1::PlannerService::Stub> stubs[2] = {a->Planner(), b->Planner()};
  // Started here but held stopped until the calls are in flight. (Not started from another
  // thread: a child's parent-death signal follows the thread that forked it, which would kill
  // the worker when that thread ends.)
  WorkerProcess* worker = StartWorker("w1");
  ASSERT_NE(worker, nullptr);
  worker->process().Signal(SIGSTOP);
  std::thread resume([&] {
    std::this_thread::sleep_for(seconds(1));
    worker->process().Signal(SIGCONT);
  });
  const LoadResult result = RunLoad(stubs, PlanRequestFor(network, 45000), seconds(60));
  resume.join();

  EXPECT_GE(result.first_wave_ok, static_cast<int>(kMinFirstWaveOk * kCalls));
  EXPECT_EQ(result.answered, kCalls);
  EXPECT_EQ(result.complete, result.answered);
  ExpectOneJobPerProblem(result);
  auto done = Query("SELECT count(*) FROM jobs WHERE state = 'done'");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(static_cast<size_t>(*done), kTinyNetworkProblems);
  EXPECT_TRUE(a->process().Running());
  EXPECT_TRUE(b->process().Running());
}

}  // namespace
}  // namespace ucudnn::e2e
