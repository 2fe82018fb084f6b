// Engine configurations through the whole stack: a server on a real PostgreSQL takes timings that
// mix legacy algorithms and cuDNN graph-API engine configurations, and its plan, Pareto front,
// explanation and timing listing name the engine configurations where they are fastest.
#include <gmock/gmock.h>

#include <functional>

#include "e2e/e2e_fixture.h"
#include "store/store_test_util.h"

namespace ucudnn::e2e {
namespace {

using ::testing::HasSubstr;

// A GPU device as a worker would report it (no GPU is touched: the server only stores and plans).
using test_support::H100;

constexpr uint64_t kLimit = 1 << 20;  // the per-kernel workspace limit of the plan request

struct Measured {
  int64_t micro_batch;
  int algo;
  const char* engine_config;
  double time_ms;
  uint64_t workspace_bytes;
};

v1::SubmitTimingsRequest Submission(const ConvProblem& problem,
                                    const std::vector<Measured>& measured) {
  v1::SubmitTimingsRequest r;
  *r.mutable_device() = ToProto(H100());
  *r.mutable_problem() = ToProto(problem);
  r.set_measured_by("e2e-engines");
  for (const Measured& m : measured) {
    v1::Timing* t = r.add_timings();
    t->set_micro_batch(m.micro_batch);
    t->set_algo(m.algo);
    t->set_engine_config(m.engine_config);
    t->set_time_ms(m.time_ms);
    t->set_samples(5);
    t->set_workspace_bytes(m.workspace_bytes);
    t->set_status(v1::TIMING_STATUS_OK);
  }
  return r;
}

class EngineConfigsTest : public E2eTest {
 protected:
  grpc::Status Submit(const v1::SubmitTimingsRequest& request) {
    auto context = ContextWithDeadline(seconds(10));
    context->AddMetadata("authorization", std::string("Bearer ") + kToken);
    v1::SubmitTimingsResponse response;
    return server_->Timings()->SubmitTimings(context.get(), request, &response);
  }
  ServerProcess* server_ = nullptr;
};

TEST_F(EngineConfigsTest, PlansNameEngineConfigurationsWhereTheyAreFastest) {
  server_ = StartServer("a");
  ASSERT_NE(server_, nullptr);
  const std::vector<Kernel> kernels = TinyNetwork(5);
  const Kernel& engine_wins = kernels[0];  // mini-batch 8
  const Kernel& legacy_wins = kernels[1];  // mini-batch 8
  ASSERT_EQ(engine_wins.mini_batch, 8);
  ASSERT_EQ(legacy_wins.mini_batch, 8);

  // engine_wins: eng3{k3=2} at 4 samples beats everything within the limit (2 x 2.0 ms); at 8
  // samples it needs more workspace than the limit, so the undivided baseline is eng9 (7.6 ms),
  // faster than legacy algorithm 0 (8 ms); legacy algorithm 1 never fits.
  std::vector<Measured> engine_table;
  for (int64_t b : {1, 2, 4, 8}) {
    const double n = static_cast<double>(b);
    engine_table.push_back({b, 0, "", 1.0 * n, 0});
    engine_table.push_back({b, 1, "", 0.5 * n, 4 * kLimit});
    engine_table.push_back({b, -1, "eng9", 0.95 * n, kLimit / 4});
    engine_table.push_back(
        {b, -1, "eng3{k3=2}", b == 4 ? 2.0 : 0.98 * n, b == 8 ? 2 * kLimit : kLimit / 2});
  }
  ASSERT_TRUE(Submit(Submission(engine_wins.problem, engine_table)).ok());
  // legacy_wins: legacy algorithm 2 is the fastest everywhere; an engine configuration is
  // measured too.
  std::vector<Measured> legacy_table;
  for (int64_t b : {1, 2, 4, 8}) {
    const double n = static_cast<double>(b);
    legacy_table.push_back({b, 2, "", 0.25 * n, 1024});
    legacy_table.push_back({b, -1, "eng12{k1=0;k7=64}", 0.3 * n, 2048});
  }
  ASSERT_TRUE(Submit(Submission(legacy_wins.problem, legacy_table)).ok());

  v1::GetPlanRequest request = PlanRequestFor({engine_wins, legacy_wins}, 0, kLimit);
  *request.mutable_device() = ToProto(H100());
  v1::GetPlanResponse response;
  const grpc::Status planned =
      server_->Planner()->GetPlan(ContextWithDeadline(seconds(30)).get(), request, &response);
  ASSERT_TRUE(planned.ok()) << Describe(planned);
  auto plan = FromProto(response.plan());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->kernels.size(), 2u);
  ASSERT_TRUE(plan->complete);

  const KernelPlan& engine_plan = plan->kernels[0];
  ASSERT_EQ(engine_plan.status, KernelPlanStatus::kPlanned) << engine_plan.reason;
  ASSERT_EQ(engine_plan.config.segments.size(), 2u);
  for (const Segment& s : engine_plan.config.segments) {
    EXPECT_EQ(s.micro_batch, 4);
    EXPECT_EQ(s.algo, kEngineAlgo);
    EXPECT_EQ(s.engine_config, "eng3{k3=2}");
    EXPECT_DOUBLE_EQ(s.time_ms, 2.0);
  }
  EXPECT_DOUBLE_EQ(engine_plan.config.time_ms, 4.0);
  ASSERT_TRUE(engine_plan.undivided.has_value());
  EXPECT_EQ(engine_plan.undivided->engine_config, "eng9");
  EXPECT_DOUBLE_EQ(engine_plan.undivided->time_ms, 7.6);

  const KernelPlan& legacy_plan = plan->kernels[1];
  ASSERT_EQ(legacy_plan.status, KernelPlanStatus::kPlanned) << legacy_plan.reason;
  ASSERT_FALSE(legacy_plan.config.segments.empty());
  for (const Segment& s : legacy_plan.config.segments) {
    EXPECT_EQ(s.algo, 2);
    EXPECT_EQ(s.engine_config, "");
  }

  // The explanation prints the configuration readably.
  v1::ExplainPlanRequest explain;
  *explain.mutable_request() = request;
  v1::ExplainPlanResponse explained;
  const grpc::Status explain_status =
      server_->Catalog()->ExplainPlan(ContextWithDeadline(seconds(30)).get(), explain, &explained);
  ASSERT_TRUE(explain_status.ok()) << Describe(explain_status);
  EXPECT_THAT(explained.text(), HasSubstr("2x4@eng3{k3=2}"));

  // The Pareto front compares both spaces: its fastest point is the engine plan, its
  // smallest-workspace point the legacy algorithm 0 (no workspace).
  v1::GetParetoFrontRequest pareto;
  *pareto.mutable_device() = ToProto(H100());
  *pareto.mutable_kernel() = ToProto(engine_wins);
  pareto.set_policy(v1::BATCH_POLICY_POWER_OF_TWO);
  v1::GetParetoFrontResponse front;
  const grpc::Status pareto_status =
      server_->Catalog()->GetParetoFront(ContextWithDeadline(seconds(30)).get(), pareto, &front);
  ASSERT_TRUE(pareto_status.ok()) << Describe(pareto_status);
  ASSERT_GE(front.points_size(), 2);
  bool engine_point = false;
  for (const v1::ParetoPoint& point : front.points()) {
    for (const v1::Segment& s : point.segments()) {
      if (!s.engine_config().empty()) {
        engine_point = true;
        EXPECT_EQ(s.algo(), -1);
      }
    }
  }
  EXPECT_TRUE(engine_point) << front.DebugString();
  bool no_workspace_point = false;
  for (const v1::ParetoPoint& point : front.points()) {
    if (point.workspace_bytes() != 0) continue;
    no_workspace_point = true;
    for (const v1::Segment& s : point.segments()) {
      EXPECT_EQ(s.algo(), 0);
      EXPECT_EQ(s.engine_config(), "");
    }
  }
  EXPECT_TRUE(no_workspace_point) << front.DebugString();

  // The stored timings come back with their identities.
  v1::GetTimingsRequest get;
  *get.mutable_device() = ToProto(H100());
  *get.mutable_problem() = ToProto(engine_wins.problem);
  v1::GetTimingsResponse stored;
  const grpc::Status get_status =
      server_->Catalog()->GetTimings(ContextWithDeadline(seconds(10)).get(), get, &stored);
  ASSERT_TRUE(get_status.ok()) << Describe(get_status);
  ASSERT_EQ(stored.timings_size(), static_cast<int>(engine_table.size()));
  int engine_rows = 0;
  for (const v1::Timing& t : stored.timings()) {
    if (t.engine_config().empty()) continue;
    ++engine_rows;
    EXPECT_EQ(t.algo(), -1);
    EXPECT_THAT(t.engine_config(), ::testing::AnyOf("eng9", "eng3{k3=2}"));
  }
  EXPECT_EQ(engine_rows, 8);
}

TEST_F(EngineConfigsTest, MalformedIdentitiesAreInvalidArgumentNamingTheTiming) {
  server_ = StartServer("a");
  ASSERT_NE(server_, nullptr);
  const ConvProblem problem = TinyNetwork(6)[0].problem;
  const std::vector<Measured> good = {
      {4, 0, "", 1.0, 0}, {4, -1, "eng3{k3=2}", 0.5, 64}, {4, -1, "eng3", 0.75, 64}};
  struct Case {
    std::function<void(v1::SubmitTimingsRequest&)> spoil;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.mutable_timings(1)->set_engine_config("eng3{k3=2,k4=1}"); },
       "timings[1].engine_config: engine configuration 'eng3{k3=2,k4=1}'"},
      {[](auto& r) { r.mutable_timings(2)->set_algo(4); },
       "timings[2].algo: must be -1 with an engine configuration, got 4"},
      {[](auto& r) { r.mutable_timings(0)->set_algo(-1); },
       "timings[0].algo: must be >= 0 without engine_config, got -1"},
      {[](auto& r) { r.mutable_timings(2)->set_engine_config("eng3{k3=2}"); },
       "timings[2]: duplicate (micro_batch 4, algo eng3{k3=2})"},
  };
  for (const Case& c : cases) {
    v1::SubmitTimingsRequest request = Submission(problem, good);
    c.spoil(request);
    const grpc::Status status = Submit(request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
  auto rows = Query("SELECT count(*) FROM timings");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(*rows, 0);  // nothing of the rejected submissions was written
  ASSERT_TRUE(Submit(Submission(problem, good)).ok());
  rows = Query("SELECT count(*) FROM timings WHERE engine_config <> ''");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(*rows, 2);
}

}  // namespace
}  // namespace ucudnn::e2e
