#include "ucudnn/server/request_validation.h"

#include <limits>
#include <set>
#include <tuple>

#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/text.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/store/store.h"

namespace ucudnn::server {
namespace {

constexpr int kDefaultJobLimit = 100;
constexpr int kMaxJobLimit = 10000;
constexpr int kMaxTimingsPerSubmit = 100000;
constexpr size_t kMaxMeasuredByBytes = 128;

// Reads a required message field into `out`, or records its errors under `field`.
template <typename T, typename Message>
void ReadField(bool present, const Message& message, std::string_view field, FieldErrors& errors,
               T& out) {
  if (!present) {
    errors.AddField(field, "required");
    return;
  }
  auto parsed = FromProto(message);
  if (parsed.ok()) {
    out = std::move(parsed).value();
  } else {
    errors.Add(field, parsed.status());
  }
}

}  // namespace

Result<PlanRequest> ValidatePlanRequest(const v1::GetPlanRequest& message,
                                        std::string_view field_path, int max_kernels) {
  // The count first: a request over the configured bound is refused before anything is parsed.
  if (message.kernels_size() > max_kernels) {
    return InvalidArgument(FieldPath(field_path, "kernels") + ": at most " +
                           std::to_string(max_kernels) + " kernels per request, got " +
                           std::to_string(message.kernels_size()));
  }
  UCUDNN_ASSIGN_OR_RETURN(PlanRequest request, FromProto(message, field_path));
  // A kernel's own limit replaces the request's per-kernel limit; a total mode has no such limit.
  if (request.workspace_mode != WorkspaceMode::kPerKernel) {
    for (size_t i = 0; i < request.kernels.size(); ++i) {
      if (!request.kernels[i].workspace_limit) continue;
      return InvalidArgument(FieldPath(field_path, "kernels", static_cast<int>(i)) +
                             ".workspace_limit_bytes: only in WORKSPACE_MODE_PER_KERNEL, not " +
                             v1::WorkspaceMode_Name(ToProto(request.workspace_mode)));
    }
  }
  // Valid for the message (uint64), but no database column holds it.
  if (request.device.memory_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument(FieldPath(field_path, "device.memory_bytes") +
                           ": must be at most 2^63-1, got " +
                           std::to_string(request.device.memory_bytes));
  }
  return request;
}

Result<JobListing> ValidateListJobs(const v1::ListJobsRequest& request) {
  FieldErrors errors;
  JobListing out;
  out.state = request.state();
  if (!out.state.empty() && out.state != "expired" && !store::ParseJobState(out.state).ok()) {
    errors.AddField("state", "must be one of queued, running, expired, done, failed, got " +
                                 QuoteForError(out.state));
  }
  out.limit = request.limit();
  if (out.limit < 0 || out.limit > kMaxJobLimit) {
    errors.AddField("limit", "must be in [0, " + std::to_string(kMaxJobLimit) + "], got " +
                                 std::to_string(out.limit));
  }
  UCUDNN_RETURN_IF_ERROR(errors.ToStatus());
  if (out.limit == 0) out.limit = kDefaultJobLimit;
  return out;
}

Result<TimingsQuery> ValidateGetTimings(const v1::GetTimingsRequest& request) {
  FieldErrors errors;
  TimingsQuery out;
  ReadField(request.has_device(), request.device(), "device", errors, out.device);
  ReadField(request.has_problem(), request.problem(), "problem", errors, out.problem);
  UCUDNN_RETURN_IF_ERROR(errors.ToStatus());
  return out;
}

Result<ParetoQuery> ValidateGetParetoFront(const v1::GetParetoFrontRequest& request) {
  FieldErrors errors;
  ParetoQuery out;
  ReadField(request.has_device(), request.device(), "device", errors, out.device);
  ReadField(request.has_kernel(), request.kernel(), "kernel", errors, out.kernel);
  if (auto parsed = FromProto(request.policy()); parsed.ok()) {
    out.policy = *parsed;
  } else {
    errors.Add(parsed.status());
  }
  UCUDNN_RETURN_IF_ERROR(errors.ToStatus());
  return out;
}

Result<int64_t> ValidateRetryJob(const v1::RetryJobRequest& request) {
  if (request.job_id() < 1) {
    return InvalidArgument("job_id: must be positive, got " + std::to_string(request.job_id()));
  }
  return request.job_id();
}

Result<JobCancellation> ValidateCancelJobs(const v1::CancelJobsRequest& request) {
  if (request.all_queued() == (request.job_id() != 0)) {
    return InvalidArgument("job_id, all_queued: give exactly one (job_id " +
                           std::to_string(request.job_id()) + ", all_queued " +
                           (request.all_queued() ? "true" : "false") + ")");
  }
  if (request.job_id() < 0) {
    return InvalidArgument("job_id: must be positive, got " + std::to_string(request.job_id()));
  }
  JobCancellation out;
  out.job_id = request.job_id();
  if (!request.device_hash().empty()) {
    if (!request.all_queued()) return InvalidArgument("device_hash: only with all_queued");
    UCUDNN_ASSIGN_OR_RETURN(out.device_hash, ParseHashHex(request.device_hash(), "device_hash"));
  }
  return out;
}

Result<ValidatedSubmission> ValidateSubmission(const v1::SubmitTimingsRequest& request) {
  ValidatedSubmission out;
  FieldErrors errors;
  ReadField(request.has_device(), request.device(), "device", errors, out.device);
  ReadField(request.has_problem(), request.problem(), "problem", errors, out.problem);
  const int count = request.timings_size();
  if (count < 1 || count > kMaxTimingsPerSubmit) {
    errors.AddField("timings", "must hold 1 to " + std::to_string(kMaxTimingsPerSubmit) +
                                   " timings, got " + std::to_string(count));
  } else {
    out.timings.reserve(static_cast<size_t>(count));
    std::set<std::tuple<int64_t, int, std::string>> seen;
    for (int i = 0; i < count; ++i) {
      const std::string field = "timings[" + std::to_string(i) + "]";
      auto timing = FromProto(request.timings(i));
      if (!timing.ok()) {
        errors.Add(field, timing.status());
        continue;
      }
      if (!seen.emplace(timing->micro_batch, timing->algo, timing->engine_config).second) {
        errors.AddField(field, "duplicate (micro_batch " + std::to_string(timing->micro_batch) +
                                   ", algo " + AlgorithmText(AlgorithmOf(*timing)) + ")");
        continue;
      }
      out.timings.push_back(std::move(timing).value());
    }
  }
  if (request.measured_by().size() > kMaxMeasuredByBytes) {
    errors.AddField("measured_by", "at most " + std::to_string(kMaxMeasuredByBytes) +
                                       " bytes, got " +
                                       std::to_string(request.measured_by().size()));
  }
  if (HasControlCharacter(request.measured_by())) {
    errors.AddField("measured_by", "must not contain control characters (ESC, line breaks, tabs)");
  }
  UCUDNN_RETURN_IF_ERROR(errors.ToStatus());
  out.measured_by = request.measured_by().empty() ? "api" : request.measured_by();
  return out;
}

}  // namespace ucudnn::server
