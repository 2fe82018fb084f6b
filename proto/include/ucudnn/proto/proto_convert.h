// Conversions between the core types and the ucudnn.v1 messages (library ucudnn::proto).
//
// ToProto() writes every field explicitly (no UNSPECIFIED, no 0-for-default).
// FromProto() is where input from the network enters the core: it applies the defaults that
// ucudnn.proto documents for UNSPECIFIED / 0 fields (stride, dilation and groups 0 -> 1; data
// and compute type -> FLOAT32; layout -> NCHW; math -> DEFAULT; policy -> POWER_OF_TWO;
// workspace mode -> PER_KERNEL), validates everything, and answers kInvalidArgument with the
// path of the offending field: "kernels[3].problem.c: must be in [1, 65536], got 0". Requests and
// their parts (GetPlanRequest, Kernel, ConvProblem, Timing) name every offending field at once
// (see FieldErrors).
// Fields that the server sets on reads (Timing.measured_by/measured_at, Plan.missing and
// Plan.plan_hash) have no core counterpart and are not converted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"
#include "ucudnn/v1/ucudnn.pb.h"

namespace ucudnn {

// Bounds of a GetPlanRequest (documented in ucudnn.proto).
inline constexpr int kMaxKernelsPerRequest = 4096;
inline constexpr uint64_t kMaxWorkspaceBytes = uint64_t{1} << 40;  // 1 TiB
inline constexpr uint32_t kMaxWaitMs = 600000;
inline constexpr size_t kMaxKernelNameBytes = 128;
// Free-text fields: Timing.error, KernelPlan.reason, IlpReport.status.
inline constexpr size_t kMaxMessageBytes = 4096;
// Plan.schema_version written and understood by this build.
inline constexpr uint32_t kPlanSchemaVersion = 1;

// ---- Field errors -----------------------------------------------------------------------------
// Request conversions report every invalid field at once, in the order the fields were checked,
// in one kInvalidArgument:
//   "3 invalid fields: kernels[0].problem.c: must be in [1, 65536], got 0; device.backend: ...;
//    max_wait_ms: at most 600000, got 600001"
// A single error reads as before ("kernels[0].problem.c: must be ..."). When more than
// kMaxReportedFieldErrors fields are wrong, the first kMaxReportedFieldErrors are spelled out:
//   "5000 invalid fields (first 16): ...".
inline constexpr size_t kMaxReportedFieldErrors = 16;

class FieldErrors {
 public:
  // Adds the field errors of `status` (nothing when it is OK), each put under `path`:
  // ("kernels[2]", "c: must be ...") -> "kernels[2].c: must be ...". A status in the joined form
  // above (Validate(ConvProblem) answers it too) contributes each of its entries. A status that
  // is not kInvalidArgument is not a field error: the first one is kept and ToStatus() answers it
  // in preference to the field errors (the input could not be judged).
  void Add(std::string_view path, const Status& status);
  void Add(const Status& status) { Add({}, status); }
  // Adds one field error: "<path>: <message>" (just the message when path is empty).
  void AddField(std::string_view path, std::string_view message);

  bool ok() const { return count_ == 0 && other_.ok(); }
  size_t count() const { return count_; }
  // OK, the first non-field error, the one field error, or all of them joined as above.
  Status ToStatus() const;

 private:
  void Push(std::string entry);

  std::vector<std::string> entries_;  // at most kMaxReportedFieldErrors
  size_t count_ = 0;                  // every error, also those not spelled out
  Status other_;
};

// "kernels" + 3 -> "kernels[3]"; "request" + "device" -> "request.device" (empty parts skipped).
std::string FieldPath(std::string_view parent, std::string_view child);
std::string FieldPath(std::string_view parent, std::string_view child, int index);

// The inverse of HashHex (problem.h), strict: exactly 16 lowercase hex digits, as the proto
// documents; `field` names the input in the error.
Result<uint64_t> ParseHashHex(std::string_view hex, std::string_view field = "hash");

// ---- Enums ------------------------------------------------------------------------------------
v1::ConvOp ToProto(ConvOp op);
v1::DataType ToProto(DataType t);
v1::TensorLayout ToProto(Layout l);
v1::MathMode ToProto(MathMode m);
v1::TimingStatus ToProto(TimingStatus s);
v1::BatchPolicy ToProto(BatchPolicy p);
v1::WorkspaceMode ToProto(WorkspaceMode m);
v1::AlgorithmSpace ToProto(AlgorithmSpace a);
v1::KernelPlanStatus ToProto(KernelPlanStatus s);
// UNSPECIFIED is read as the default (POWER_OF_TWO, PER_KERNEL); values outside the enum are
// errors naming the field as "policy" / "workspace_mode".
Result<BatchPolicy> FromProto(v1::BatchPolicy p);
Result<WorkspaceMode> FromProto(v1::WorkspaceMode m);
Result<AlgorithmSpace> FromProto(v1::AlgorithmSpace a);

// ---- Messages ---------------------------------------------------------------------------------
v1::ConvProblem ToProto(const ConvProblem& p);
// op is required; Validate(ConvProblem) runs after the defaults.
Result<ConvProblem> FromProto(const v1::ConvProblem& p);

v1::DeviceFingerprint ToProto(const DeviceFingerprint& f);
// Validate(DeviceFingerprint).
Result<DeviceFingerprint> FromProto(const v1::DeviceFingerprint& f);

v1::Kernel ToProto(const Kernel& k);
// problem required; mini_batch in [1, kMaxBatch]; name at most kMaxKernelNameBytes.
Result<Kernel> FromProto(const v1::Kernel& k);

v1::Timing ToProto(const Timing& t);
// micro_batch in [1, kMaxBatch]; algo >= 0; status required (no documented default); times
// finite and >= 0, time_ms > 0 when OK; samples >= 0; error at most kMaxMessageBytes.
Result<Timing> FromProto(const v1::Timing& t);

v1::Segment ToProto(const Segment& s);
// micro_batch in [1, kMaxBatch]; algo >= 0; time_ms finite and >= 0.
Result<Segment> FromProto(const v1::Segment& s);

v1::IlpReport ToProto(const IlpReport& r);
Result<IlpReport> FromProto(const v1::IlpReport& r);

// Also writes speedup (undivided / planned time; 0 unless planned with a baseline) and
// problem_hash (HashHex(StableHash(problem))).
v1::KernelPlan ToProto(const KernelPlan& k);
// kernel and status required. A PLANNED kernel's segments sum to the mini-batch and its
// workspace_bytes is the largest segment's; the undivided baseline, when present, runs the whole
// mini-batch; a non-empty problem_hash must match the problem. speedup is derived, not read.
Result<KernelPlan> FromProto(const v1::KernelPlan& k);

// schema_version = kPlanSchemaVersion; status COMPLETE when every kernel is PLANNED (also when
// there are none), else PARTIAL; workspace_bytes = plan.workspace_budget_bytes.
v1::Plan ToProto(const NetworkPlan& plan, const DeviceFingerprint& device);
// schema_version 0 is kInvalidArgument, a newer one kFailedPrecondition. device is required and
// validated (read it with FromProto(plan.device())); status must agree with the kernels.
Result<NetworkPlan> FromProto(const v1::Plan& plan);

v1::GetPlanRequest ToProto(const PlanRequest& request, uint32_t max_wait_ms = 0);
// device required; 1 to kMaxKernelsPerRequest kernels; workspace_bytes at most 1 TiB;
// max_wait_ms at most kMaxWaitMs (read it from the message; PlanRequest has no such field).
// ilp_time_limit_s, which the message does not carry, keeps PlanRequest's default.
Result<PlanRequest> FromProto(const v1::GetPlanRequest& request);
// The same with every field named under `path` ("request" -> "request.kernels[0].problem.c").
Result<PlanRequest> FromProto(const v1::GetPlanRequest& request, std::string_view path);

}  // namespace ucudnn
