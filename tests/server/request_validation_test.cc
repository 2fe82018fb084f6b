// What every RPC checks of its request before the store (request_validation.h): each refusal names
// its fields, each acceptance carries what the store is asked.
#include "ucudnn/server/request_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/test_problems.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::server {
namespace {

using ::testing::HasSubstr;

DeviceFingerprint Cpu() {
  DeviceFingerprint device;
  device.backend = "cpu";
  device.name = "test cpu";
  device.sm_count = 2;
  return device;
}

ConvProblem Problem() { return testdata::Resnet3x3(); }

v1::GetPlanRequest PlanRequestWith(int kernels) {
  PlanRequest request;
  request.device = Cpu();
  for (int i = 0; i < kernels; ++i) request.kernels.push_back(Kernel{Problem(), 8, "k"});
  request.workspace_bytes = 1 << 20;
  return ToProto(request);
}

TEST(RequestValidationTest, PlanRequests) {
  EXPECT_EQ(ValidatePlanRequest(PlanRequestWith(2), "", 4096)->kernels.size(), 2u);
  // The count before anything else, with the field path of the message it sits in.
  auto too_many = ValidatePlanRequest(PlanRequestWith(4), "request", 3);
  EXPECT_EQ(too_many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.status().message(), HasSubstr("request.kernels: at most 3 kernels"));
  v1::GetPlanRequest huge = PlanRequestWith(1);
  huge.mutable_device()->set_memory_bytes(~uint64_t{0});
  EXPECT_THAT(ValidatePlanRequest(huge, "", 4096).status().message(),
              HasSubstr("device.memory_bytes: must be at most 2^63-1"));
  v1::GetPlanRequest bad = PlanRequestWith(1);
  bad.mutable_kernels(0)->mutable_problem()->set_c(0);
  EXPECT_THAT(ValidatePlanRequest(bad, "", 4096).status().message(),
              HasSubstr("kernels[0].problem.c"));
}

TEST(RequestValidationTest, PerKernelLimitsOnlyInPerKernelMode) {
  v1::GetPlanRequest m = PlanRequestWith(3);
  m.mutable_kernels(2)->set_workspace_limit_bytes(4096);
  for (v1::WorkspaceMode mode : {v1::WORKSPACE_MODE_UNSPECIFIED, v1::WORKSPACE_MODE_PER_KERNEL}) {
    m.set_workspace_mode(mode);
    auto ok = ValidatePlanRequest(m, "", 4096);
    ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    EXPECT_EQ(ok->kernels[2].workspace_limit, std::optional<uint64_t>(4096));
    EXPECT_FALSE(ok->kernels[0].workspace_limit.has_value());
  }
  m.set_workspace_mode(v1::WORKSPACE_MODE_TOTAL_SUM);
  auto sum = ValidatePlanRequest(m, "request", 4096);
  EXPECT_EQ(sum.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sum.status().message(),
            "request.kernels[2].workspace_limit_bytes: only in WORKSPACE_MODE_PER_KERNEL, not "
            "WORKSPACE_MODE_TOTAL_SUM");
  m.set_workspace_mode(v1::WORKSPACE_MODE_TOTAL_SHARED);
  EXPECT_THAT(ValidatePlanRequest(m, "", 4096).status().message(),
              HasSubstr("kernels[2].workspace_limit_bytes: only in WORKSPACE_MODE_PER_KERNEL"));
  // Without a limit the total modes are as before.
  m.mutable_kernels(2)->clear_workspace_limit_bytes();
  EXPECT_TRUE(ValidatePlanRequest(m, "", 4096).ok());
}

TEST(RequestValidationTest, ListJobs) {
  v1::ListJobsRequest request;
  EXPECT_EQ(ValidateListJobs(request)->limit, 100);  // the default
  request.set_state("expired");
  request.set_limit(7);
  EXPECT_EQ(ValidateListJobs(request)->state, "expired");
  request.set_state("sleeping");
  request.set_limit(-1);
  const Status both = ValidateListJobs(request).status();
  EXPECT_THAT(both.message(), HasSubstr("state: must be one of"));
  EXPECT_THAT(both.message(), HasSubstr("limit: must be in [0, 10000], got -1"));
}

TEST(RequestValidationTest, TimingsAndParetoQueries) {
  v1::GetTimingsRequest timings;
  const Status missing = ValidateGetTimings(timings).status();
  EXPECT_THAT(missing.message(), HasSubstr("device: required"));
  EXPECT_THAT(missing.message(), HasSubstr("problem: required"));
  *timings.mutable_device() = ToProto(Cpu());
  *timings.mutable_problem() = ToProto(Problem());
  EXPECT_EQ(ValidateGetTimings(timings)->problem, Problem());

  v1::GetParetoFrontRequest pareto;
  *pareto.mutable_device() = ToProto(Cpu());
  *pareto.mutable_kernel() = ToProto(Kernel{Problem(), 16, "k"});
  pareto.set_policy(v1::BATCH_POLICY_ALL);
  auto query = ValidateGetParetoFront(pareto);
  ASSERT_TRUE(query.ok()) << query.status().ToString();
  EXPECT_EQ(query->policy, BatchPolicy::kAll);
  EXPECT_EQ(query->kernel.mini_batch, 16);
  pareto.set_policy(static_cast<v1::BatchPolicy>(77));
  EXPECT_THAT(ValidateGetParetoFront(pareto).status().message(), HasSubstr("policy"));
}

TEST(RequestValidationTest, RetryAndCancelJobs) {
  v1::RetryJobRequest retry;
  EXPECT_THAT(ValidateRetryJob(retry).status().message(), HasSubstr("job_id: must be positive"));
  retry.set_job_id(5);
  EXPECT_EQ(*ValidateRetryJob(retry), 5);

  v1::CancelJobsRequest cancel;
  EXPECT_THAT(ValidateCancelJobs(cancel).status().message(),
              HasSubstr("job_id, all_queued: give exactly one"));
  cancel.set_job_id(3);
  EXPECT_EQ(ValidateCancelJobs(cancel)->job_id, 3);
  cancel.set_device_hash("ff");
  EXPECT_THAT(ValidateCancelJobs(cancel).status().message(),
              HasSubstr("device_hash: only with all_queued"));
  cancel.set_job_id(0);
  cancel.set_all_queued(true);
  EXPECT_THAT(ValidateCancelJobs(cancel).status().message(),
              HasSubstr("device_hash: must be 16 lowercase hex digits"));
  cancel.set_device_hash("00000000000000ff");
  ASSERT_TRUE(ValidateCancelJobs(cancel).ok());
  EXPECT_EQ(*ValidateCancelJobs(cancel)->device_hash, 0xffu);
  cancel.set_device_hash("not hex");
  EXPECT_THAT(ValidateCancelJobs(cancel).status().message(), HasSubstr("device_hash"));
}

TEST(RequestValidationTest, Submissions) {
  v1::SubmitTimingsRequest request;
  *request.mutable_device() = ToProto(Cpu());
  *request.mutable_problem() = ToProto(Problem());
  EXPECT_THAT(ValidateSubmission(request).status().message(),
              HasSubstr("timings: must hold 1 to 100000 timings, got 0"));
  Timing timing;
  timing.micro_batch = 4;
  timing.algo = 1;
  timing.time_ms = 0.25;
  timing.samples = 5;
  *request.add_timings() = ToProto(timing);
  auto accepted = ValidateSubmission(request);
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  EXPECT_EQ(accepted->measured_by, "api");  // the default
  *request.add_timings() = ToProto(timing);
  request.set_measured_by(std::string(200, 'm'));
  const Status both = ValidateSubmission(request).status();
  EXPECT_THAT(both.message(), HasSubstr("timings[1]: duplicate (micro_batch 4"));
  EXPECT_THAT(both.message(), HasSubstr("measured_by: at most 128 bytes, got 200"));
  request.mutable_timings()->RemoveLast();
  request.set_measured_by("bench\x1b[2Jnode");
  const Status control = ValidateSubmission(request).status();
  EXPECT_EQ(control.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(control.message(), HasSubstr("measured_by: must not contain control characters"));
}

}  // namespace
}  // namespace ucudnn::server
