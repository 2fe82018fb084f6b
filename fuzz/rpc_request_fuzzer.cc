// Every RPC's request as the server receives it: arbitrary bytes for one method, with arbitrary
// authorization metadata, through what the server does before it touches the store (the same
// functions the services call): the bearer token's parsing (TokenAuthenticator::Identify), the
// message's parsing as gRPC does it, the method's validation (request_validation.h), and for a
// plan request the content key its caches use (plan_key.h). Every refusal is a clean error; what
// is accepted satisfies the method's bounds.
//
// Input: byte 0 picks the method (kMethods, modulo its size), byte 1 is the length N of the
// authorization value that follows it, and the rest is the request's body.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/server/auth.h"
#include "ucudnn/server/plan_key.h"
#include "ucudnn/server/request_validation.h"

namespace ucudnn::fuzz {
namespace {

using server::ValidateCancelJobs;
using server::ValidateGetParetoFront;
using server::ValidateGetTimings;
using server::ValidateListJobs;
using server::ValidatePlanRequest;
using server::ValidateRetryJob;
using server::ValidateSubmission;

// Parses `body` as the method's request type; false when gRPC would refuse the body (the server
// answers INVALID_ARGUMENT naming the type, see malformed_requests.h).
template <typename Message>
bool Parse(std::string_view body, Message& message) {
  return message.ParseFromArray(body.data(), static_cast<int>(body.size()));
}

// A plan request, as GetPlan (field_path "") or inside StreamPlan/ExplainPlan ("request").
void CheckPlanRequest(const v1::GetPlanRequest& message, std::string_view field_path) {
  // The server's default bound and a small one: the count is checked before the kernels.
  for (int max_kernels : {4096, 3}) {
    auto request = ValidatePlanRequest(message, field_path, max_kernels);
    if (!request.ok()) {
      RequireCleanRejection(request.status());
      continue;
    }
    Require(
        !request->kernels.empty() && request->kernels.size() <= static_cast<size_t>(max_kernels),
        "kernel count out of bounds");
    Require(request->device.memory_bytes <= static_cast<uint64_t>(INT64_MAX),
            "device memory beyond what the database holds");
    for (const Kernel& k : request->kernels) {
      Require(Validate(k.problem).ok(), "an accepted problem fails Validate");
      Require(k.mini_batch >= 1 && k.mini_batch <= kMaxBatch, "mini-batch out of bounds");
    }
    // The caches' key: computable, and the same text for the same request.
    const std::string text = server::CanonicalPlanRequest(*request);
    Require(text == server::CanonicalPlanRequest(*request), "the canonical request is unstable");
    std::vector<std::optional<uint64_t>> digests(request->kernels.size());
    for (size_t k = 0; k < digests.size(); k += 2) digests[k] = k * 0x9e3779b97f4a7c15ull;
    const std::string content = server::PlanContentText(*request, digests);
    Require(Fnv1a64(content) == server::PlanContentHash(*request, digests),
            "the plan content key is unstable");
    (void)server::PlanContentCheck(content);
  }
}

void CheckStreamPlan(std::string_view body) {
  v1::StreamPlanRequest message;
  if (!Parse(body, message) || !message.has_request()) return;  // "request: required"
  CheckPlanRequest(message.request(), "request");
}

void CheckExplainPlan(std::string_view body) {
  v1::ExplainPlanRequest message;
  if (!Parse(body, message) || !message.has_request()) return;
  CheckPlanRequest(message.request(), "request");
}

void CheckGetPlan(std::string_view body) {
  v1::GetPlanRequest message;
  if (Parse(body, message)) CheckPlanRequest(message, "");
}

void CheckListDevices(std::string_view body) {
  v1::ListDevicesRequest message;
  (void)Parse(body, message);  // no field to validate
}

void CheckListWorkers(std::string_view body) {
  v1::ListWorkersRequest message;
  (void)Parse(body, message);
}

void CheckListJobs(std::string_view body) {
  v1::ListJobsRequest message;
  if (!Parse(body, message)) return;
  auto listing = ValidateListJobs(message);
  if (!listing.ok()) {
    RequireCleanRejection(listing.status());
    return;
  }
  Require(listing->limit >= 1 && listing->limit <= 10000, "limit out of bounds");
}

void CheckGetTimings(std::string_view body) {
  v1::GetTimingsRequest message;
  if (!Parse(body, message)) return;
  auto query = ValidateGetTimings(message);
  if (!query.ok()) {
    RequireCleanRejection(query.status());
    return;
  }
  Require(Validate(query->problem).ok(), "an accepted problem fails Validate");
  Require(Validate(query->device).ok(), "an accepted device fails Validate");
  (void)StableHash(query->problem);
  (void)query->device.Hash();
}

void CheckGetParetoFront(std::string_view body) {
  v1::GetParetoFrontRequest message;
  if (!Parse(body, message)) return;
  auto query = ValidateGetParetoFront(message);
  if (!query.ok()) {
    RequireCleanRejection(query.status());
    return;
  }
  Require(Validate(query->kernel.problem).ok(), "an accepted problem fails Validate");
  Require(query->kernel.mini_batch >= 1 && query->kernel.mini_batch <= kMaxBatch,
          "mini-batch out of bounds");
  // What the server computes from it before reading the timings: the micro-batch sizes.
  Require(!MicroBatchSizes(query->policy, query->kernel.mini_batch).empty(),
          "no micro-batch size for an accepted kernel");
}

void CheckRetryJob(std::string_view body) {
  v1::RetryJobRequest message;
  if (!Parse(body, message)) return;
  auto job_id = ValidateRetryJob(message);
  if (!job_id.ok()) {
    RequireCleanRejection(job_id.status());
    return;
  }
  Require(*job_id >= 1, "a job id below 1 accepted");
}

void CheckCancelJobs(std::string_view body) {
  v1::CancelJobsRequest message;
  if (!Parse(body, message)) return;
  auto cancel = ValidateCancelJobs(message);
  if (!cancel.ok()) {
    RequireCleanRejection(cancel.status());
    return;
  }
  Require(cancel->job_id >= 0, "a negative job id accepted");
  Require((cancel->job_id == 0) == message.all_queued(), "both or neither of job_id, all_queued");
  Require(!cancel->device_hash || message.all_queued(), "a device without all_queued");
}

void CheckSubmitTimings(std::string_view body) {
  v1::SubmitTimingsRequest message;
  if (!Parse(body, message)) return;
  auto submission = ValidateSubmission(message);
  if (!submission.ok()) {
    RequireCleanRejection(submission.status());
    return;
  }
  Require(!submission->timings.empty(), "a submission without timings accepted");
  Require(!submission->measured_by.empty() && submission->measured_by.size() <= 128,
          "measured_by out of bounds");
  Require(Validate(submission->problem).ok(), "an accepted problem fails Validate");
  for (const Timing& t : submission->timings) {
    auto back = FromProto(ToProto(t));
    Require(back.ok(), "an accepted timing does not round-trip", back.status().ToString());
  }
}

// The methods of proto/ucudnn/v1/ucudnn.proto, in the order of the input's first byte.
constexpr void (*kMethods[])(std::string_view) = {
    CheckGetPlan,  CheckStreamPlan, CheckListDevices,    CheckListWorkers,
    CheckListJobs, CheckGetTimings, CheckGetParetoFront, CheckExplainPlan,
    CheckRetryJob, CheckCancelJobs, CheckSubmitTimings};

// The authorization metadata: a role or UNAUTHENTICATED, never an echo of what was presented.
void CheckAuthorization(std::string_view authorization) {
  static const server::TokenAuthenticator auth(
      server::RoleTokens{{"admin-token"}, {"plan-token"}, {"submit-token"}, {"read-token"}},
      *server::ParseAnonymousRole("read"));
  auto caller = auth.Identify(authorization);
  if (caller.ok()) {
    Require(authorization.empty() || authorization.find("-token") != std::string_view::npos,
            "a made-up token accepted", std::string(authorization));
    return;
  }
  Require(caller.status().code() == StatusCode::kUnauthenticated, "unexpected error code",
          caller.status().ToString());
  // The refusal says nothing of what was presented: every byte of it changed (the scheme kept),
  // the answer is the same.
  std::string other(authorization);
  const bool bearer = other.size() >= 7 && (other[0] | 0x20) == 'b';
  for (size_t i = bearer ? 7 : 0; i < other.size(); ++i) other[i] = other[i] == 'z' ? 'y' : 'z';
  if (bearer) other.replace(0, 7, authorization.substr(0, 7));
  const auto refused = auth.Identify(other);
  Require(!refused.ok() && refused.status().message() == caller.status().message(),
          "the refusal depends on the token presented", caller.status().ToString());
}

}  // namespace
}  // namespace ucudnn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ucudnn::fuzz;
  if (size < 2) return 0;
  const size_t method = data[0] % std::size(kMethods);
  const size_t auth_size = std::min<size_t>(data[1], size - 2);
  const std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  CheckAuthorization(rest.substr(0, auth_size));
  kMethods[method](rest.substr(auth_size));
  return 0;
}
