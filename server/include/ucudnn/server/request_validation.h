// What each RPC checks of its request before it touches the store, free of gRPC and I/O: the
// services call these, and fuzz/rpc_request_fuzzer runs every one on arbitrary bytes. Every
// refusal is kInvalidArgument naming each invalid field at once ("2 invalid fields: problem.c:
// ...; timings[3].time_ms: ...").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"
#include "ucudnn/v1/ucudnn.pb.h"

namespace ucudnn::server {

// GetPlan, and the request inside StreamPlan and ExplainPlan (`field_path` "request" prefixes
// the fields named): at most `max_kernels` kernels, counted before anything is parsed; every
// field (FromProto); a device memory that a database column holds.
Result<PlanRequest> ValidatePlanRequest(const v1::GetPlanRequest& message,
                                        std::string_view field_path, int max_kernels);

// ListJobs: a known state (or "expired", or empty: any), a limit within bounds (0: the default).
struct JobListing {
  std::string state;
  int limit = 0;
};
Result<JobListing> ValidateListJobs(const v1::ListJobsRequest& request);

// GetTimings.
struct TimingsQuery {
  DeviceFingerprint device;
  ConvProblem problem;
};
Result<TimingsQuery> ValidateGetTimings(const v1::GetTimingsRequest& request);

// GetParetoFront.
struct ParetoQuery {
  DeviceFingerprint device;
  Kernel kernel;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
};
Result<ParetoQuery> ValidateGetParetoFront(const v1::GetParetoFrontRequest& request);

// RetryJob: the job id.
Result<int64_t> ValidateRetryJob(const v1::RetryJobRequest& request);

// CancelJobs: one job (job_id), or every queued job (of one device when device_hash is given).
struct JobCancellation {
  int64_t job_id = 0;  // 0: every queued job
  std::optional<uint64_t> device_hash;
};
Result<JobCancellation> ValidateCancelJobs(const v1::CancelJobsRequest& request);

// SubmitTimings: the store's input.
struct ValidatedSubmission {
  DeviceFingerprint device;
  ConvProblem problem;
  std::vector<Timing> timings;
  std::string measured_by;
};
Result<ValidatedSubmission> ValidateSubmission(const v1::SubmitTimingsRequest& request);

}  // namespace ucudnn::server
