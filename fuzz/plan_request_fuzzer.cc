// Request validation: arbitrary bytes parsed as the messages a server receives. Every rejection
// is a clean INVALID_ARGUMENT naming a field; every accepted GetPlanRequest converts back and is
// accepted again as the same request; keys and hashes of accepted problems are computable and
// canonical keys parse back to the same problem.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::fuzz {
namespace {

void CheckProblem(const ConvProblem& p) {
  Require(Validate(p).ok(), "an accepted problem fails Validate", Validate(p).ToString());
  const std::string key = CanonicalKey(p);
  auto parsed = ParseCanonicalKey(key);
  Require(parsed.ok() && *parsed == p, "canonical key does not parse back", key);
  Require(StableHash(p) == StableHash(*parsed), "unstable hash", key);
  Require(p.out_h() > 0 && p.out_w() > 0, "non-positive output size", key);
  (void)p.flops(kMaxBatch);
  (void)p.input_bytes_per_sample();
  (void)p.output_bytes_per_sample();
  (void)p.filter_bytes();
  auto back = FromProto(ToProto(p));
  Require(back.ok() && *back == p, "a problem does not round-trip", key);
}

void FuzzGetPlanRequest(const uint8_t* data, size_t size) {
  v1::GetPlanRequest message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return;
  auto request = FromProto(message);
  if (!request.ok()) {
    RequireCleanRejection(request.status());
    return;
  }
  Require(!request->kernels.empty() &&
              request->kernels.size() <= static_cast<size_t>(kMaxKernelsPerRequest),
          "kernel count out of bounds");
  Require(request->workspace_bytes <= kMaxWorkspaceBytes, "workspace out of bounds");
  Require(Validate(request->device).ok(), "an accepted device fails Validate");
  (void)request->device.Hash();
  for (const Kernel& k : request->kernels) {
    Require(k.mini_batch >= 1 && k.mini_batch <= kMaxBatch, "mini-batch out of bounds");
    Require(k.name.size() <= kMaxKernelNameBytes, "name too long");
    CheckProblem(k.problem);
  }
  auto again = FromProto(ToProto(*request, message.max_wait_ms()));
  Require(again.ok(), "an accepted request is rejected after ToProto", again.status().ToString());
  Require(again->device == request->device && again->kernels == request->kernels &&
              again->policy == request->policy &&
              again->workspace_mode == request->workspace_mode &&
              again->workspace_bytes == request->workspace_bytes,
          "a request does not round-trip");
}

void FuzzProblem(const uint8_t* data, size_t size) {
  v1::ConvProblem message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return;
  auto problem = FromProto(message);
  if (!problem.ok()) {
    RequireCleanRejection(problem.status());
    return;
  }
  CheckProblem(*problem);
}

void FuzzTiming(const uint8_t* data, size_t size) {
  v1::Timing message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return;
  auto timing = FromProto(message);
  if (!timing.ok()) {
    RequireCleanRejection(timing.status());
    return;
  }
  auto back = FromProto(ToProto(*timing));
  Require(back.ok(), "a timing does not round-trip", back.status().ToString());
}

}  // namespace
}  // namespace ucudnn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ucudnn::fuzz::FuzzGetPlanRequest(data, size);
  ucudnn::fuzz::FuzzProblem(data, size);
  ucudnn::fuzz::FuzzTiming(data, size);
  return 0;
}
