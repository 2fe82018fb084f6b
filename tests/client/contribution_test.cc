// Contribution on the CPU backend against the fake server over real gRPC: when the server reports
// missing timings and no live worker serves this device, the library benchmarks the missing
// problems with the worker's engine on a backend of its own, submits the timings with the bearer
// token, asks again and runs the plan the server makes from them. Off by default, off without a
// token, silent when a worker serves the device, harmless when the server refuses the timings.
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "fake_planner.h"
#include "session.h"
#include "test_util.h"
#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/dp.h"

namespace ucudnn::testing {
namespace {

using client::Session;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int64_t kBatch = 6;
constexpr char kToken[] = "contributor-secret";

class ContributionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakePlanner>(backend_);
    fake_->set_behaviour(FakePlanner::Behaviour::kFromTimings);
    fake_->set_token(kToken);
    fake_->Start();
  }

  ClientConfig Config(bool contribute, const std::string& token = kToken) {
    ClientConfig config = FakePlannerConfig(fake_->address());
    config.token = token;
    config.contribute = contribute;
    config.collect_quiet_ms = 60000;
    return config;
  }

  // Hooks whose backend is a CPU backend of the contribution's own, counted; light benchmarks.
  client::SessionHooks Hooks() {
    client::SessionHooks hooks;
    hooks.contribution_backend = [this]() -> Result<std::unique_ptr<ConvBackend>> {
      ++backends_made_;
      return std::unique_ptr<ConvBackend>(std::make_unique<CpuBackend>());
    };
    hooks.benchmark.warmup_runs = 1;
    hooks.benchmark.min_runs = 1;
    hooks.benchmark.max_runs = 2;
    hooks.benchmark.config_time_budget_ms = 20;
    hooks.benchmark.prune_margin = -1;  // every (size, algorithm): the coverage checked below
    return hooks;
  }

  CpuBackend backend_;
  std::unique_ptr<FakePlanner> fake_;
  int backends_made_ = 0;
};

TEST_F(ContributionTest, MissingTimingsAreBenchmarkedSubmittedAndPlanned) {
  auto session = Session::Create(backend_, Config(true), nullptr, Hooks());
  ASSERT_TRUE(session->contribution_enabled());
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  const uint64_t limit = 1 << 20;
  session->Declare(p, kBatch, limit);
  session->Declare(p, 3, limit);  // the same problem at a smaller mini-batch: one benchmark
  // A quiet point: the answers (missing), then the benchmarks, then the plans asked again.
  ASSERT_TRUE(session->WaitForPlans(seconds(60)));

  EXPECT_EQ(fake_->list_devices_calls(), 1);
  ASSERT_EQ(fake_->submissions(), 1);
  EXPECT_EQ(backends_made_, 1);
  const std::vector<v1::SubmitTimingsRequest> submitted = fake_->submitted();
  EXPECT_EQ(submitted[0].device().backend(), "cpu");
  EXPECT_NE(submitted[0].measured_by().find("ucudnn-client"), std::string::npos);
  // Every size of the policy that one of the two kernels needs (those of 3 are not among those of
  // 6: {1,2,4,6} and {1,2,3}), every algorithm of the backend: each kernel is covered whether the
  // server is asked for it alone or with the other.
  const std::vector<Timing> timings = fake_->timings(p);
  const std::vector<int64_t> sizes = {1, 2, 3, 4, 6};
  ASSERT_EQ(MicroBatchSizes(BatchPolicy::kPowerOfTwo, kBatch), (std::vector<int64_t>{1, 2, 4, 6}));
  EXPECT_EQ(timings.size(), sizes.size() * backend_.Algorithms(p.op).size());
  for (int64_t size : sizes) {
    EXPECT_TRUE(std::any_of(timings.begin(), timings.end(),
                            [&](const Timing& t) {
                              return t.micro_batch == size && t.status == TimingStatus::kOk &&
                                     t.time_ms > 0;
                            }))
        << "micro-batch " << size;
  }

  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.contributed_problems, 1u);
  EXPECT_EQ(stats.contributed_timings, timings.size());
  EXPECT_EQ(stats.contribution_failures, 0u);
  EXPECT_EQ(stats.kernels_planned, 2u);
  for (const KernelReport& k : session->Kernels()) {
    EXPECT_EQ(k.state, KernelReport::State::kPlanned) << k.name << ": " << k.reason;
  }

  // The plan made from the contributed timings runs and equals the undivided result.
  Operands operands = MakeOperands(p, kBatch);
  Operands reference = operands;
  ASSERT_TRUE(
      backend_.Run(p, kBatch, kCpuAlgoDirect, reference.Bind(p.op), nullptr, 0, 1.0f, 0.5f).ok());
  std::vector<char> workspace(limit);
  ASSERT_TRUE(
      session->Execute(p, kBatch, operands.Bind(p.op), workspace.data(), limit, 1.0f, 0.5f).ok());
  EXPECT_EQ(session->Stats().planned_calls, 1u);
  EXPECT_LT(NormalizedL2(operands.out, reference.out), 1e-6);

  // Once per problem: another quiet point measures nothing again.
  ASSERT_TRUE(session->WaitForPlans(seconds(5)));
  EXPECT_EQ(fake_->submissions(), 1);
}

TEST_F(ContributionTest, OffByDefault) {
  ClientConfig config = Config(false);
  EXPECT_FALSE(ClientConfig{}.contribute);
  auto session = Session::Create(backend_, config, nullptr, Hooks());
  EXPECT_FALSE(session->contribution_enabled());
  session->Declare(SmallProblem(ConvOp::kBackwardData), kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  EXPECT_EQ(session->Kernels().at(0).state, KernelReport::State::kMissing);
  Result<int> contributed = session->Contribute();
  ASSERT_TRUE(contributed.ok());
  EXPECT_EQ(*contributed, 0);
  EXPECT_EQ(fake_->list_devices_calls(), 0);
  EXPECT_EQ(fake_->submissions(), 0);
  EXPECT_EQ(backends_made_, 0);
}

TEST_F(ContributionTest, WithoutATokenItWarnsAndStaysOff) {
  LogCapture log;
  auto session = Session::Create(backend_, Config(true, ""), nullptr, Hooks());
  EXPECT_FALSE(session->contribution_enabled());
  EXPECT_NE(log.text().find("needs the submission token"), std::string::npos) << log.text();
  session->Declare(SmallProblem(ConvOp::kForward), kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  EXPECT_EQ(fake_->submissions() + fake_->refused_submissions(), 0);
  EXPECT_EQ(backends_made_, 0);
}

TEST_F(ContributionTest, ALiveWorkerServingTheDeviceIsLeftToDoIt) {
  fake_->set_live_workers(2);
  auto session = Session::Create(backend_, Config(true), nullptr, Hooks());
  session->Declare(SmallProblem(ConvOp::kBackwardFilter), kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  EXPECT_EQ(fake_->list_devices_calls(), 1);
  EXPECT_EQ(fake_->submissions(), 0);
  EXPECT_EQ(backends_made_, 0) << "nothing measured on the job's device";
  EXPECT_EQ(session->Kernels().at(0).state, KernelReport::State::kMissing);
  EXPECT_EQ(session->Stats().contributed_problems, 0u);
}

TEST_F(ContributionTest, ARefusedSubmissionIsCountedAndNothingBreaks) {
  fake_->set_token("another-token");
  auto session = Session::Create(backend_, Config(true), nullptr, Hooks());
  const ConvProblem p = SmallProblem(ConvOp::kForward, 2);
  session->Declare(p, kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForPlans(seconds(60)));
  EXPECT_EQ(fake_->refused_submissions(), 1);
  EXPECT_EQ(session->Stats().contribution_failures, 1u);
  EXPECT_EQ(session->Stats().contributed_problems, 0u);
  EXPECT_EQ(session->Kernels().at(0).state, KernelReport::State::kMissing);
  // Calls still run, undivided.
  Operands operands = MakeOperands(p, kBatch);
  EXPECT_TRUE(session->Execute(p, kBatch, operands.Bind(p.op), nullptr, 0, 1.0f, 0.0f).ok());
}

TEST_F(ContributionTest, ExplicitContributeAndTotalModePrepare) {
  ClientConfig config = Config(true);
  config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
  config.workspace_bytes = 1 << 20;
  auto session = Session::Create(backend_, config, nullptr, Hooks());
  std::vector<Kernel> kernels;
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    kernels.push_back(Kernel{SmallProblem(op), kBatch, std::string(ToString(op))});
  }
  // Prepare() is a quiet point: the network's answer, then the three missing problems measured.
  session->Prepare(kernels);
  EXPECT_EQ(fake_->submissions(), 3);
  EXPECT_EQ(session->Stats().contributed_problems, 3u);
  ASSERT_TRUE(session->WaitForPlans(seconds(20)));
  EXPECT_EQ(session->Stats().kernels_planned, 3u);
  // Nothing left: an explicit contribution has nothing to do.
  Result<int> contributed = session->Contribute();
  ASSERT_TRUE(contributed.ok());
  EXPECT_EQ(*contributed, 0);
  EXPECT_EQ(fake_->submissions(), 3);
}

// An in-process planner that makes the race of a contribution with a plan request certain: the
// first request is answered "missing"; the next one reads the timings it has, then is held until
// the contribution's timings arrive, and answers from what it read (stale: "missing"). Later
// requests are planned (one segment, the direct algorithm) once timings were submitted.
class RacingSource final : public client::PlanSource {
 public:
  explicit RacingSource(CpuBackend& backend) : backend_(backend) {}
  Result<NetworkPlan> GetPlan(const PlanRequest& request) override {
    std::unique_lock lock(mu_);
    const bool had_timings = submitted_;
    if (!had_timings && calls_++ > 0) {
      stale_in_flight_ = true;
      cv_.notify_all();
      cv_.wait_for(lock, seconds(10), [&] { return submitted_; });
    }
    NetworkPlan plan;
    plan.complete = had_timings;
    for (const Kernel& kernel : request.kernels) {
      KernelPlan kp;
      kp.kernel = kernel;
      if (!had_timings) {
        kp.status = KernelPlanStatus::kMissing;
        kp.reason = "no timings yet";
      } else {
        kp.status = KernelPlanStatus::kPlanned;
        const Segment segment{kernel.mini_batch, kCpuAlgoDirect, 1.0, 0, {}};
        kp.config.segments = {segment};
        kp.config.time_ms = segment.time_ms;
      }
      plan.kernels.push_back(kp);
    }
    return plan;
  }
  void Cancel() override {}
  std::string Describe() const override { return "racing"; }
  Result<int> LiveWorkers(const DeviceFingerprint&) override { return 0; }
  Result<int> SubmitTimings(const DeviceFingerprint&, const ConvProblem&,
                            const std::vector<Timing>& timings, const std::string&) override {
    std::unique_lock lock(mu_);
    raced_ = cv_.wait_for(lock, seconds(10), [&] { return stale_in_flight_; });
    submitted_ = true;
    cv_.notify_all();
    return static_cast<int>(timings.size());
  }
  bool raced() {
    std::lock_guard lock(mu_);
    return raced_;
  }

 private:
  CpuBackend& backend_;
  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  bool submitted_ = false;
  bool stale_in_flight_ = false;
  bool raced_ = false;
};

// An answer made before the contribution's timings landed must not leave the kernel "missing":
// the quiet point returns with the plan made from the contributed timings, in both modes.
TEST_F(ContributionTest, AnAnswerMadeBeforeTheContributionLandedIsAskedAgain) {
  for (const bool total : {false, true}) {
    SCOPED_TRACE(total ? "total_sum" : "per_kernel");
    ClientConfig config = Config(true);
    config.retry_initial_ms = 300;  // the held request is a retry, well after the first answer
    config.retry_max_ms = 60000;
    if (total) {
      config.workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
      config.workspace_bytes = 1 << 20;
      config.collect_quiet_ms = 0;  // network retries follow the back-off alone
    }
    auto owned = std::make_unique<RacingSource>(backend_);
    RacingSource* source = owned.get();
    auto session = Session::Create(backend_, config, std::move(owned), Hooks());
    const Kernel kernel{SmallProblem(ConvOp::kForward), kBatch, "fwd"};
    if (total) {
      session->Prepare({kernel});
    } else {
      session->Declare(kernel.problem, kernel.mini_batch, 1 << 20);
    }
    ASSERT_TRUE(session->WaitForPlans(seconds(60)));
    EXPECT_TRUE(source->raced()) << "the submission did not meet a request in flight";
    EXPECT_EQ(session->Stats().contributed_problems, 1u);
    EXPECT_EQ(session->Stats().kernels_planned, 1u);
    EXPECT_EQ(session->Kernels().at(0).state, KernelReport::State::kPlanned)
        << session->Kernels().at(0).reason;
  }
}

TEST_F(ContributionTest, ABackendOfAnotherDeviceIsRefused) {
  client::SessionHooks hooks = Hooks();
  hooks.contribution_backend = []() -> Result<std::unique_ptr<ConvBackend>> {
    class Elsewhere final : public CpuBackend {
     public:
      Elsewhere() { other_.name = "another machine"; }
      const DeviceFingerprint& fingerprint() const override { return other_; }

     private:
      DeviceFingerprint other_ = CpuBackend().fingerprint();
    };
    return std::unique_ptr<ConvBackend>(std::make_unique<Elsewhere>());
  };
  auto session = Session::Create(backend_, Config(true), nullptr, std::move(hooks));
  session->Declare(SmallProblem(ConvOp::kForward), kBatch, 1 << 20);
  ASSERT_TRUE(session->WaitForAnswers(std::chrono::steady_clock::now() + seconds(20)));
  Result<int> contributed = session->Contribute();
  EXPECT_FALSE(contributed.ok());
  EXPECT_EQ(fake_->submissions(), 0);
  EXPECT_EQ(session->Stats().contribution_failures, 1u);
}

}  // namespace
}  // namespace ucudnn::testing
