// The per-call overhead of the session: after a kernel's first call, a call allocates nothing on
// the calling thread, planned or not, bound to a PlanBinder's runner or not, with alternating
// workspace sizes, and beyond max_kernels (the overflow path takes no lock either: it never
// reaches the registration). Counted with a replaced global operator new.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "session.h"
#include "test_util.h"

namespace {
thread_local bool g_counting = false;
thread_local size_t g_allocations = 0;
}  // namespace

__attribute__((noinline)) void* operator new(size_t size) {
  if (g_counting) ++g_allocations;
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
// Out of line: inlined into the library's code, GCC would pair our malloc with its own idea of
// operator new and warn about a mismatch that is not there.
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace ucudnn::testing {
namespace {

// Allocations made on this thread while `body` runs.
template <typename Body>
size_t AllocationsDuring(Body body) {
  g_allocations = 0;
  g_counting = true;
  body();
  g_counting = false;
  return g_allocations;
}

// Operands whose every tensor is `data` (the backends here read none of them).
ConvOperands OperandsAt(float* data) {
  ConvOperands operands;
  operands.x = operands.w = operands.dy = data;
  operands.y = operands.dx = operands.dw = data;
  return operands;
}

// A backend that accepts everything and computes nothing: what remains is the library's cost.
class NullBackend final : public ConvBackend {
 public:
  NullBackend() {
    fingerprint_.backend = "cpu";
    fingerprint_.name = "null";
    fingerprint_.sm_count = 1;
  }
  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }
  std::vector<AlgorithmInfo> Algorithms(ConvOp) const override { return {{0, "a"}, {1, "b"}}; }
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t batch, const Algorithm& algo) override {
    ++workspace_queries;
    return algo.id == 0 ? size_t{0} : static_cast<size_t>(batch) * 16;
  }
  Status Run(const ConvProblem&, int64_t, const Algorithm&, const ConvOperands&, void*, size_t,
             float, float) override {
    ++runs;
    return Status::Ok();
  }
  int workspace_queries = 0;
  Status Synchronize() override { return Status::Ok(); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t) override {
    return Unsupported("null backend");
  }
  Status CopyToDevice(void*, const void*, size_t) override { return Status::Ok(); }
  Status CopyToHost(void*, const void*, size_t) override { return Status::Ok(); }
  Result<std::vector<double>> TimeRuns(const ConvProblem&, int64_t, const Algorithm&,
                                       const ConvOperands&, void*, size_t, int, int) override {
    return std::vector<double>{};
  }
  int runs = 0;

 private:
  DeviceFingerprint fingerprint_;
};

// Plans every kernel as micro-batches of 2 with algorithm 1, in process.
class InProcessSource final : public client::PlanSource {
 public:
  Result<NetworkPlan> GetPlan(const PlanRequest& request) override {
    NetworkPlan plan;
    for (const Kernel& kernel : request.kernels) {
      KernelPlan kp;
      kp.kernel = kernel;
      kp.status = KernelPlanStatus::kPlanned;
      for (int64_t left = kernel.mini_batch; left > 0; left -= 2) {
        kp.config.segments.push_back(Segment{std::min<int64_t>(left, 2), 1, 0.1, 32, {}});
      }
      kp.config.workspace_bytes = 32;
      plan.kernels.push_back(kp);
    }
    plan.complete = true;
    return plan;
  }
  void Cancel() override {}
  std::string Describe() const override { return "in-process"; }
};

TEST(HotPathTest, CallsAfterTheFirstAllocateNothing) {
  NullBackend backend;
  ClientConfig config;
  auto session = client::Session::Create(backend, config, std::make_unique<InProcessSource>());
  const ConvProblem planned = SmallProblem(ConvOp::kForward);
  const ConvProblem unplanned = SmallProblem(ConvOp::kBackwardData);
  char workspace[64];
  float data[1] = {1};
  const ConvOperands operands = OperandsAt(data);

  ASSERT_TRUE(session->Execute(planned, 8, operands, workspace, sizeof(workspace), 1, 0).ok());
  ASSERT_TRUE(session->WaitForPlans(std::chrono::seconds(20)));
  // The first planned call verifies the plan; the other kernel's first call registers it (its
  // plan then needs 32 bytes, and its calls get none: they run undivided).
  ASSERT_TRUE(session->Execute(planned, 8, operands, workspace, sizeof(workspace), 1, 0).ok());
  ASSERT_TRUE(session->Execute(unplanned, 8, operands, workspace, 0, 1, 0).ok());
  ASSERT_TRUE(session->WaitForPlans(std::chrono::seconds(20)));
  ASSERT_TRUE(session->Execute(unplanned, 8, operands, workspace, 0, 1, 0).ok());

  const ClientStats before = session->Stats();
  const size_t allocations = AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(session->Execute(planned, 8, operands, workspace, sizeof(workspace), 1, 0).ok());
      // Planned for 32 bytes of workspace, given none: runs undivided.
      ASSERT_TRUE(session->Execute(unplanned, 8, operands, workspace, 0, 1, 0).ok());
    }
  });
  EXPECT_EQ(allocations, 0u);
  const ClientStats after = session->Stats();
  EXPECT_EQ(after.planned_calls - before.planned_calls, 100u);
  EXPECT_EQ(after.fallback_calls - before.fallback_calls, 100u);
}

// A binder whose runners count their micro-batches: planned calls must go through them.
class CountingBinder final : public client::PlanBinder {
 public:
  class Runner final : public MicroBatchRunner {
   public:
    explicit Runner(int* runs) : runs_(runs) {}
    Status RunMicroBatch(size_t, const Segment&, const ConvOperands&, void*, size_t, float,
                         float) override {
      ++*runs_;
      return Status::Ok();
    }

   private:
    int* runs_;
  };
  Result<std::unique_ptr<MicroBatchRunner>> Bind(const ConvProblem&,
                                                 std::span<const Segment>) override {
    ++binds;
    return std::unique_ptr<MicroBatchRunner>(std::make_unique<Runner>(&runs));
  }
  int binds = 0;
  int runs = 0;
};

// A session of `backend` whose plans `binder` binds, planned in process.
std::unique_ptr<client::Session> SessionBoundBy(NullBackend& backend, CountingBinder& binder) {
  client::SessionHooks hooks;
  hooks.binder = &binder;
  return client::Session::Create(backend, ClientConfig{}, std::make_unique<InProcessSource>(),
                                 hooks);
}

TEST(HotPathTest, PlannedCallsRunOnTheBoundPlanWithoutLookups) {
  NullBackend backend;
  CountingBinder binder;
  auto session = SessionBoundBy(backend, binder);
  const ConvProblem p = SmallProblem(ConvOp::kBackwardFilter);
  char workspace[64];
  float data[1] = {1};
  const ConvOperands operands = OperandsAt(data);
  session->Declare(p, 8, sizeof(workspace));
  ASSERT_TRUE(session->WaitForPlans(std::chrono::seconds(20)));
  // The first call verifies, binds and runs with every check, on the backend.
  ASSERT_TRUE(session->Execute(p, 8, operands, workspace, sizeof(workspace), 1, 0).ok());
  EXPECT_EQ(binder.binds, 1);
  EXPECT_EQ(binder.runs, 0);
  const int backend_runs = backend.runs;
  const int queries = backend.workspace_queries;

  const size_t allocations = AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(session->Execute(p, 8, operands, workspace, sizeof(workspace), 1, 0).ok());
    }
  });
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(binder.runs, 100 * 4) << "4 micro-batches of 2 per call, all on the bound plan";
  EXPECT_EQ(backend.runs, backend_runs) << "no segment went through the backend";
  EXPECT_EQ(backend.workspace_queries, queries) << "no workspace query after the first call";
  EXPECT_EQ(binder.binds, 1);
  EXPECT_EQ(session->Stats().planned_calls, 101u);
}

TEST(HotPathTest, BindPlansDoesTheFirstCallsResolvingAhead) {
  NullBackend backend;
  CountingBinder binder;
  auto session = SessionBoundBy(backend, binder);
  const ConvProblem forward = SmallProblem(ConvOp::kForward);
  const ConvProblem filter = SmallProblem(ConvOp::kBackwardFilter);
  session->Declare(forward, 8, 64);
  session->Declare(filter, 8, 64);
  ASSERT_TRUE(session->WaitForPlans(std::chrono::seconds(20)));
  EXPECT_EQ(binder.binds, 0) << "plans arrive unbound";
  EXPECT_EQ(session->BindPlans(), 2u);
  EXPECT_EQ(binder.binds, 2);
  const int queries = backend.workspace_queries;
  EXPECT_GT(queries, 0);
  EXPECT_EQ(session->BindPlans(), 0u) << "nothing left to bind";

  // The first call binds nothing more (its checked run through the backend queries workspaces
  // again: on cuDNN those find the execution plans built by BindPlans).
  char workspace[64];
  float data[1] = {1};
  const ConvOperands operands = OperandsAt(data);
  ASSERT_TRUE(session->Execute(forward, 8, operands, workspace, sizeof(workspace), 1, 0).ok());
  EXPECT_EQ(binder.binds, 2);
  EXPECT_EQ(session->Stats().planned_calls, 1u);
}

// Counts the heuristics' runs of the fallback.
class CountingRunner final : public client::UndividedRunner {
 public:
  Result<int> ChooseAlgorithm(size_t workspace_bytes) override {
    ++chosen;
    return workspace_bytes >= 128 ? 1 : 0;
  }
  Status Run(int, void*, size_t) override { return Status::Ok(); }
  int chosen = 0;
};

// The shape-level C API's path: a kernel looked up once, then its calls by its entry.
TEST(HotPathTest, CallsThroughAKernelLookedUpOnceAllocateNothing) {
  NullBackend backend;
  auto session =
      client::Session::Create(backend, ClientConfig{}, std::make_unique<InProcessSource>());
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  char workspace[64];
  float data[1] = {1};
  ConvOperands operands;
  operands.x = operands.w = operands.y = data;
  client::KernelState* kernel = session->FindKernel(p, 8, sizeof(workspace));
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(session->FindKernel(p, 8, 0), kernel) << "one entry per kernel";
  ASSERT_TRUE(session->WaitForPlans(std::chrono::seconds(20)));
  // The plan's need (32 bytes), answered without counting a call; then with counting.
  EXPECT_EQ(session->PlanWorkspace(*kernel), 32);
  EXPECT_EQ(session->PlannedWorkspace(*kernel), 32);
  EXPECT_EQ(session->Stats().fallback_calls, 0u);
  CountingRunner declining;
  ASSERT_TRUE(
      session->Execute(*kernel, operands, workspace, sizeof(workspace), 1, 0, declining).ok());

  const size_t allocations = AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      ASSERT_EQ(session->PlannedWorkspace(*kernel), 32);
      ASSERT_TRUE(
          session->Execute(*kernel, operands, workspace, sizeof(workspace), 1, 0, declining).ok());
    }
  });
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(declining.chosen, 0) << "every call ran the plan";
  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.planned_calls, 101u);
  EXPECT_EQ(stats.fallback_calls, 0u);
}

TEST(HotPathTest, AKernelWithoutAPlanCountsOneFallbackPerCall) {
  NullBackend backend;
  ClientConfig config;  // no server
  auto session = client::Session::Create(backend, config);
  client::KernelState* kernel = session->FindKernel(SmallProblem(ConvOp::kForward), 8, 64);
  ASSERT_NE(kernel, nullptr);
  EXPECT_LT(session->PlanWorkspace(*kernel), 0);
  EXPECT_EQ(session->Stats().fallback_calls, 0u) << "the query counts nothing";
  EXPECT_EQ(session->PlannedWorkspace(*kernel), -1);
  EXPECT_EQ(session->Stats().fallback_calls, 1u);

  ClientConfig disabled;
  disabled.enabled = false;
  auto off = client::Session::Create(backend, disabled);
  EXPECT_EQ(off->FindKernel(SmallProblem(ConvOp::kForward), 8, 64), nullptr);
  EXPECT_EQ(off->Stats().kernels, 0u);
}

TEST(HotPathTest, AlternatingWorkspacesKeepTheirFallbackChoices) {
  NullBackend backend;
  ClientConfig config;  // no server: every call falls back
  auto session = client::Session::Create(backend, config);
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  char workspace[256];
  float data[1] = {1};
  ConvOperands operands;
  operands.x = operands.w = operands.y = data;
  CountingRunner runner;
  ASSERT_TRUE(session->Execute(p, 8, operands, workspace, 64, 1, 0, &runner).ok());
  ASSERT_TRUE(session->Execute(p, 8, operands, workspace, 256, 1, 0, &runner).ok());
  EXPECT_EQ(runner.chosen, 2);
  const size_t allocations = AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(session->Execute(p, 8, operands, workspace, 64, 1, 0, &runner).ok());
      ASSERT_TRUE(session->Execute(p, 8, operands, workspace, 256, 1, 0, &runner).ok());
    }
  });
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(runner.chosen, 2) << "a framework alternating two workspaces reuses both choices";
  EXPECT_EQ(session->Stats().fallback_calls, 202u);
}

TEST(HotPathTest, KernelsBeyondTheTableRunUntrackedWithoutAllocating) {
  NullBackend backend;
  ClientConfig config;
  config.max_kernels = 1;
  auto session = client::Session::Create(backend, config);
  float data[1] = {1};
  const ConvOperands operands = OperandsAt(data);
  const ConvProblem tracked = SmallProblem(ConvOp::kForward);
  const ConvProblem second = SmallProblem(ConvOp::kBackwardData);
  const ConvProblem third = SmallProblem(ConvOp::kBackwardFilter);
  ASSERT_TRUE(session->Execute(tracked, 8, operands, nullptr, 0, 1, 0).ok());
  // The first refused kernel finds the table full (and warns once); after that, no kernel
  // reaches the registration again.
  LogCapture log;
  ASSERT_TRUE(session->Execute(second, 8, operands, nullptr, 0, 1, 0).ok());
  EXPECT_NE(log.text().find("more than 1 distinct kernels"), std::string::npos) << log.text();

  const size_t allocations = AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(session->Execute(second, 8, operands, nullptr, 0, 1, 0).ok());
      ASSERT_TRUE(session->Execute(third, 8, operands, nullptr, 0, 1, 0).ok());
      ASSERT_TRUE(session->Execute(tracked, 8, operands, nullptr, 0, 1, 0).ok());
    }
  });
  EXPECT_EQ(allocations, 0u);
  const ClientStats stats = session->Stats();
  EXPECT_EQ(stats.kernels, 1u);
  EXPECT_EQ(stats.untracked_calls, 201u);
  EXPECT_EQ(stats.fallback_calls, 101u);
}

}  // namespace
}  // namespace ucudnn::testing
