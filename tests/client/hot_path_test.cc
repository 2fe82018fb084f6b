// The per-call overhead of the session: after a kernel's first call, a call allocates nothing on
// the calling thread, planned or not. Counted with a replaced global operator new.
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
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t batch, int algo) override {
    return algo == 0 ? size_t{0} : static_cast<size_t>(batch) * 16;
  }
  Status Run(const ConvProblem&, int64_t, int, const ConvOperands&, void*, size_t, float,
             float) override {
    ++runs;
    return Status::Ok();
  }
  Status Synchronize() override { return Status::Ok(); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t) override {
    return Unsupported("null backend");
  }
  Status CopyToDevice(void*, const void*, size_t) override { return Status::Ok(); }
  Status CopyToHost(void*, const void*, size_t) override { return Status::Ok(); }
  Result<std::vector<double>> TimeRuns(const ConvProblem&, int64_t, int, const ConvOperands&, void*,
                                       size_t, int, int) override {
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
        kp.config.segments.push_back(Segment{std::min<int64_t>(left, 2), 1, 0.1, 32});
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
  ConvOperands operands;
  operands.x = operands.w = operands.dy = data;
  operands.y = operands.dx = operands.dw = data;

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

}  // namespace
}  // namespace ucudnn::testing
