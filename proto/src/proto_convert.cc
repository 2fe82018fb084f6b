#include "ucudnn/proto/proto_convert.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/text.h"

namespace ucudnn {
namespace {

// "problem" + "c: must be ..." -> "problem.c: must be ...". Every validation message starts with
// the field it is about, so nesting is a prefix.
Status Nested(std::string_view path, const Status& status) {
  if (status.ok()) return status;
  return Status(status.code(), std::string(path) + "." + status.message());
}

std::string Indexed(std::string_view field, int index) {
  return std::string(field) + "[" + std::to_string(index) + "]";
}

Status Required(std::string_view field) {
  return InvalidArgument(std::string(field) + ": required");
}

Status UnknownEnum(std::string_view field, int value) {
  return InvalidArgument(std::string(field) + ": unknown value " + std::to_string(value));
}

Status CheckInt(std::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return InvalidArgument(std::string(field) + ": must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + std::to_string(value));
  }
  return Status::Ok();
}

Status CheckNonNegative(std::string_view field, int64_t value) {
  if (value < 0) {
    return InvalidArgument(std::string(field) + ": must be >= 0, got " + std::to_string(value));
  }
  return Status::Ok();
}

// Finite and >= 0 (NaN fails both comparisons, so it is caught here too).
Status CheckTime(std::string_view field, double value) {
  if (!(value >= 0) || !std::isfinite(value)) {
    return InvalidArgument(std::string(field) + ": must be finite and >= 0, got " +
                           std::to_string(value));
  }
  return Status::Ok();
}

Status CheckLength(std::string_view field, const std::string& value, size_t max_bytes) {
  if (value.size() > max_bytes) {
    return InvalidArgument(std::string(field) + ": at most " + std::to_string(max_bytes) +
                           " bytes, got " + std::to_string(value.size()));
  }
  return Status::Ok();
}

// Proto enums with UNSPECIFIED read as a documented default.
Result<DataType> DataTypeFromProto(std::string_view field, v1::DataType t) {
  switch (t) {
    case v1::DATA_TYPE_UNSPECIFIED:
    case v1::DATA_TYPE_FLOAT32:
      return DataType::kFloat32;
    case v1::DATA_TYPE_FLOAT16:
      return DataType::kFloat16;
    case v1::DATA_TYPE_BFLOAT16:
      return DataType::kBFloat16;
    default:
      return UnknownEnum(field, t);
  }
}

Result<ConvOp> ConvOpFromProto(v1::ConvOp op) {
  switch (op) {
    case v1::CONV_OP_UNSPECIFIED:
      return Required("op");
    case v1::CONV_OP_FORWARD:
      return ConvOp::kForward;
    case v1::CONV_OP_BACKWARD_DATA:
      return ConvOp::kBackwardData;
    case v1::CONV_OP_BACKWARD_FILTER:
      return ConvOp::kBackwardFilter;
    default:
      return UnknownEnum("op", op);
  }
}

Result<Layout> LayoutFromProto(v1::TensorLayout l) {
  switch (l) {
    case v1::TENSOR_LAYOUT_UNSPECIFIED:
    case v1::TENSOR_LAYOUT_NCHW:
      return Layout::kNCHW;
    case v1::TENSOR_LAYOUT_NHWC:
      return Layout::kNHWC;
    default:
      return UnknownEnum("layout", l);
  }
}

Result<MathMode> MathModeFromProto(v1::MathMode m) {
  switch (m) {
    case v1::MATH_MODE_UNSPECIFIED:
    case v1::MATH_MODE_DEFAULT:
      return MathMode::kDefault;
    case v1::MATH_MODE_TENSOR_OP:
      return MathMode::kTensorOp;
    case v1::MATH_MODE_TENSOR_OP_ALLOW_CONVERSION:
      return MathMode::kTensorOpAllowConversion;
    case v1::MATH_MODE_FMA:
      return MathMode::kFma;
    default:
      return UnknownEnum("math", m);
  }
}

Result<TimingStatus> TimingStatusFromProto(v1::TimingStatus s) {
  switch (s) {
    case v1::TIMING_STATUS_UNSPECIFIED:
      return Required("status");
    case v1::TIMING_STATUS_OK:
      return TimingStatus::kOk;
    case v1::TIMING_STATUS_UNSUPPORTED:
      return TimingStatus::kUnsupported;
    case v1::TIMING_STATUS_FAILED:
      return TimingStatus::kFailed;
    default:
      return UnknownEnum("status", s);
  }
}

Result<KernelPlanStatus> KernelPlanStatusFromProto(v1::KernelPlanStatus s) {
  switch (s) {
    case v1::KERNEL_PLAN_STATUS_UNSPECIFIED:
      return Required("status");
    case v1::KERNEL_PLAN_STATUS_PLANNED:
      return KernelPlanStatus::kPlanned;
    case v1::KERNEL_PLAN_STATUS_MISSING:
      return KernelPlanStatus::kMissing;
    case v1::KERNEL_PLAN_STATUS_INFEASIBLE:
      return KernelPlanStatus::kInfeasible;
    default:
      return UnknownEnum("status", s);
  }
}

std::string_view KernelPlanStatusName(v1::KernelPlanStatus s) {
  return v1::KernelPlanStatus_Name(s);  // a static string owned by protobuf
}

Status CheckMiniBatch(std::string_view field, int64_t value) {
  return CheckInt(field, value, 1, kMaxBatch);
}

Status CheckWorkspaceBudget(uint64_t bytes) {
  if (bytes > kMaxWorkspaceBytes) {
    return InvalidArgument("workspace_bytes: at most 1 TiB (" + std::to_string(kMaxWorkspaceBytes) +
                           "), got " + std::to_string(bytes));
  }
  return Status::Ok();
}

// The kernel list of a request or a plan: how many may come at once.
Status CheckKernelCount(int count) {
  if (count > kMaxKernelsPerRequest) {
    return InvalidArgument("kernels: at most " + std::to_string(kMaxKernelsPerRequest) +
                           " kernels, got " + std::to_string(count));
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> ParseHashHex(std::string_view hex, std::string_view field) {
  auto invalid = [&] {
    return InvalidArgument(std::string(field) + ": must be 16 lowercase hex digits, got " +
                           QuoteForError(hex));
  };
  if (hex.size() != 16) return invalid();
  uint64_t value = 0;
  for (char ch : hex) {
    uint64_t digit = 0;
    if (ch >= '0' && ch <= '9') {
      digit = static_cast<uint64_t>(ch - '0');
    } else if (ch >= 'a' && ch <= 'f') {
      digit = static_cast<uint64_t>(ch - 'a' + 10);
    } else {
      return invalid();
    }
    value = (value << 4) | digit;
  }
  return value;
}

// ---- Field errors -----------------------------------------------------------------------------

std::string FieldPath(std::string_view parent, std::string_view child) {
  if (parent.empty()) return std::string(child);
  if (child.empty()) return std::string(parent);
  return std::string(parent) + "." + std::string(child);
}

std::string FieldPath(std::string_view parent, std::string_view child, int index) {
  return FieldPath(parent, Indexed(child, index));
}

void FieldErrors::Push(std::string entry) {
  if (entries_.size() < kMaxReportedFieldErrors) entries_.push_back(std::move(entry));
}

void FieldErrors::AddField(std::string_view path, std::string_view message) {
  ++count_;
  Push(path.empty() ? std::string(message) : std::string(path) + ": " + std::string(message));
}

void FieldErrors::Add(std::string_view path, const Status& status) {
  if (status.ok()) return;
  if (status.code() != StatusCode::kInvalidArgument) {
    if (other_.ok()) other_ = status;
    return;
  }
  auto prefixed = [&](std::string_view entry) {
    return path.empty() ? std::string(entry) : std::string(path) + "." + std::string(entry);
  };
  const std::string& message = status.message();
  // The joined form: "<N> invalid fields[ (first <K>)]: <e1>; <e2>; ..."
  size_t digits = 0;
  while (digits < message.size() && message[digits] >= '0' && message[digits] <= '9') ++digits;
  constexpr std::string_view kJoined = " invalid fields";
  const size_t colon = message.find(": ");
  if (digits > 0 && digits <= 9 && message.compare(digits, kJoined.size(), kJoined) == 0 &&
      colon != std::string::npos) {
    const size_t total = std::stoul(message.substr(0, digits));
    size_t start = colon + 2;
    size_t spelled = 0;
    while (start <= message.size()) {
      const size_t end = message.find("; ", start);
      Push(prefixed(std::string_view(message).substr(
          start, end == std::string::npos ? std::string::npos : end - start)));
      ++spelled;
      if (end == std::string::npos) break;
      start = end + 2;
    }
    count_ += std::max(total, spelled);
    return;
  }
  ++count_;
  Push(prefixed(message));
}

Status FieldErrors::ToStatus() const {
  if (!other_.ok()) return other_;
  if (count_ == 0) return Status::Ok();
  if (count_ == 1 && entries_.size() == 1) return InvalidArgument(entries_.front());
  std::string message = std::to_string(count_) + " invalid fields";
  if (entries_.size() < count_) message += " (first " + std::to_string(entries_.size()) + ")";
  message += ": ";
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (i > 0) message += "; ";
    message += entries_[i];
  }
  return InvalidArgument(std::move(message));
}

// ---- Enums ------------------------------------------------------------------------------------

v1::ConvOp ToProto(ConvOp op) {
  switch (op) {
    case ConvOp::kForward:
      return v1::CONV_OP_FORWARD;
    case ConvOp::kBackwardData:
      return v1::CONV_OP_BACKWARD_DATA;
    case ConvOp::kBackwardFilter:
      return v1::CONV_OP_BACKWARD_FILTER;
  }
  return v1::CONV_OP_UNSPECIFIED;
}

v1::DataType ToProto(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return v1::DATA_TYPE_FLOAT32;
    case DataType::kFloat16:
      return v1::DATA_TYPE_FLOAT16;
    case DataType::kBFloat16:
      return v1::DATA_TYPE_BFLOAT16;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

v1::TensorLayout ToProto(Layout l) {
  switch (l) {
    case Layout::kNCHW:
      return v1::TENSOR_LAYOUT_NCHW;
    case Layout::kNHWC:
      return v1::TENSOR_LAYOUT_NHWC;
  }
  return v1::TENSOR_LAYOUT_UNSPECIFIED;
}

v1::MathMode ToProto(MathMode m) {
  switch (m) {
    case MathMode::kDefault:
      return v1::MATH_MODE_DEFAULT;
    case MathMode::kTensorOp:
      return v1::MATH_MODE_TENSOR_OP;
    case MathMode::kTensorOpAllowConversion:
      return v1::MATH_MODE_TENSOR_OP_ALLOW_CONVERSION;
    case MathMode::kFma:
      return v1::MATH_MODE_FMA;
  }
  return v1::MATH_MODE_UNSPECIFIED;
}

v1::TimingStatus ToProto(TimingStatus s) {
  switch (s) {
    case TimingStatus::kOk:
      return v1::TIMING_STATUS_OK;
    case TimingStatus::kUnsupported:
      return v1::TIMING_STATUS_UNSUPPORTED;
    case TimingStatus::kFailed:
      return v1::TIMING_STATUS_FAILED;
  }
  return v1::TIMING_STATUS_UNSPECIFIED;
}

v1::BatchPolicy ToProto(BatchPolicy p) {
  switch (p) {
    case BatchPolicy::kUndivided:
      return v1::BATCH_POLICY_UNDIVIDED;
    case BatchPolicy::kPowerOfTwo:
      return v1::BATCH_POLICY_POWER_OF_TWO;
    case BatchPolicy::kAll:
      return v1::BATCH_POLICY_ALL;
  }
  return v1::BATCH_POLICY_UNSPECIFIED;
}

v1::WorkspaceMode ToProto(WorkspaceMode m) {
  switch (m) {
    case WorkspaceMode::kPerKernel:
      return v1::WORKSPACE_MODE_PER_KERNEL;
    case WorkspaceMode::kTotalSum:
      return v1::WORKSPACE_MODE_TOTAL_SUM;
    case WorkspaceMode::kTotalShared:
      return v1::WORKSPACE_MODE_TOTAL_SHARED;
  }
  return v1::WORKSPACE_MODE_UNSPECIFIED;
}

v1::KernelPlanStatus ToProto(KernelPlanStatus s) {
  switch (s) {
    case KernelPlanStatus::kPlanned:
      return v1::KERNEL_PLAN_STATUS_PLANNED;
    case KernelPlanStatus::kMissing:
      return v1::KERNEL_PLAN_STATUS_MISSING;
    case KernelPlanStatus::kInfeasible:
      return v1::KERNEL_PLAN_STATUS_INFEASIBLE;
  }
  return v1::KERNEL_PLAN_STATUS_UNSPECIFIED;
}

Result<BatchPolicy> FromProto(v1::BatchPolicy p) {
  switch (p) {
    case v1::BATCH_POLICY_UNSPECIFIED:
    case v1::BATCH_POLICY_POWER_OF_TWO:
      return BatchPolicy::kPowerOfTwo;
    case v1::BATCH_POLICY_UNDIVIDED:
      return BatchPolicy::kUndivided;
    case v1::BATCH_POLICY_ALL:
      return BatchPolicy::kAll;
    default:
      return UnknownEnum("policy", p);
  }
}

Result<WorkspaceMode> FromProto(v1::WorkspaceMode m) {
  switch (m) {
    case v1::WORKSPACE_MODE_UNSPECIFIED:
    case v1::WORKSPACE_MODE_PER_KERNEL:
      return WorkspaceMode::kPerKernel;
    case v1::WORKSPACE_MODE_TOTAL_SUM:
      return WorkspaceMode::kTotalSum;
    case v1::WORKSPACE_MODE_TOTAL_SHARED:
      return WorkspaceMode::kTotalShared;
    default:
      return UnknownEnum("workspace_mode", m);
  }
}

v1::AlgorithmSpace ToProto(AlgorithmSpace a) {
  switch (a) {
    case AlgorithmSpace::kAll:
      return v1::ALGORITHM_SPACE_ALL;
    case AlgorithmSpace::kLegacy:
      return v1::ALGORITHM_SPACE_LEGACY;
    case AlgorithmSpace::kEngines:
      return v1::ALGORITHM_SPACE_ENGINES;
  }
  return v1::ALGORITHM_SPACE_UNSPECIFIED;
}

Result<AlgorithmSpace> FromProto(v1::AlgorithmSpace a) {
  switch (a) {
    case v1::ALGORITHM_SPACE_UNSPECIFIED:
    case v1::ALGORITHM_SPACE_ALL:
      return AlgorithmSpace::kAll;
    case v1::ALGORITHM_SPACE_LEGACY:
      return AlgorithmSpace::kLegacy;
    case v1::ALGORITHM_SPACE_ENGINES:
      return AlgorithmSpace::kEngines;
    default:
      return UnknownEnum("algorithms", a);
  }
}

// ---- ConvProblem ------------------------------------------------------------------------------

v1::ConvProblem ToProto(const ConvProblem& p) {
  v1::ConvProblem m;
  m.set_op(ToProto(p.op));
  m.set_c(p.c);
  m.set_h(p.h);
  m.set_w(p.w);
  m.set_k(p.k);
  m.set_r(p.r);
  m.set_s(p.s);
  m.set_pad_h(p.pad_h);
  m.set_pad_w(p.pad_w);
  m.set_stride_h(p.stride_h);
  m.set_stride_w(p.stride_w);
  m.set_dilation_h(p.dilation_h);
  m.set_dilation_w(p.dilation_w);
  m.set_groups(p.groups);
  m.set_data_type(ToProto(p.data_type));
  m.set_compute_type(ToProto(p.compute_type));
  m.set_layout(ToProto(p.layout));
  m.set_math(ToProto(p.math));
  if (p.is_3d()) {  // a 2-D problem's message stays as it was before 3-D
    m.set_d(p.d);
    m.set_t(p.t);
    m.set_pad_d(p.pad_d);
    m.set_stride_d(p.stride_d);
    m.set_dilation_d(p.dilation_d);
  }
  return m;
}

Result<ConvProblem> FromProto(const v1::ConvProblem& m) {
  // 0 means "unset" for these in proto3; the .proto documents it as 1.
  auto or_one = [](int64_t v) { return v == 0 ? int64_t{1} : v; };
  FieldErrors errors;
  // An enum that cannot be read keeps its default, so the other fields are still judged.
  auto take = [&errors]<typename T>(Result<T> parsed, T& out) {
    if (parsed.ok()) {
      out = *parsed;
    } else {
      errors.Add(parsed.status());
    }
  };
  ConvProblem p;
  take(ConvOpFromProto(m.op()), p.op);
  p.c = m.c();
  p.h = m.h();
  p.w = m.w();
  p.k = m.k();
  p.r = m.r();
  p.s = m.s();
  p.pad_h = m.pad_h();
  p.pad_w = m.pad_w();
  p.stride_h = or_one(m.stride_h());
  p.stride_w = or_one(m.stride_w());
  p.dilation_h = or_one(m.dilation_h());
  p.dilation_w = or_one(m.dilation_w());
  p.groups = or_one(m.groups());
  take(DataTypeFromProto("data_type", m.data_type()), p.data_type);
  take(DataTypeFromProto("compute_type", m.compute_type()), p.compute_type);
  take(LayoutFromProto(m.layout()), p.layout);
  take(MathModeFromProto(m.math()), p.math);
  p.d = or_one(m.d());
  p.t = or_one(m.t());
  p.pad_d = m.pad_d();
  p.stride_d = or_one(m.stride_d());
  p.dilation_d = or_one(m.dilation_d());
  NormalizeDepth(p);
  errors.Add(Validate(p));
  if (!errors.ok()) return errors.ToStatus();
  return p;
}

// ---- DeviceFingerprint ------------------------------------------------------------------------

v1::DeviceFingerprint ToProto(const DeviceFingerprint& f) {
  v1::DeviceFingerprint m;
  m.set_backend(f.backend);
  m.set_name(f.name);
  m.set_cc_major(f.cc_major);
  m.set_cc_minor(f.cc_minor);
  m.set_sm_count(f.sm_count);
  m.set_memory_bytes(f.memory_bytes);
  m.set_cudnn_version(f.cudnn_version);
  m.set_cuda_runtime_version(f.cuda_runtime_version);
  m.set_blas(f.blas);
  return m;
}

Result<DeviceFingerprint> FromProto(const v1::DeviceFingerprint& m) {
  DeviceFingerprint f;
  f.backend = m.backend();
  f.name = m.name();
  f.cc_major = m.cc_major();
  f.cc_minor = m.cc_minor();
  f.sm_count = m.sm_count();
  f.memory_bytes = m.memory_bytes();
  f.cudnn_version = m.cudnn_version();
  f.cuda_runtime_version = m.cuda_runtime_version();
  f.blas = m.blas();
  UCUDNN_RETURN_IF_ERROR(Validate(f));
  return f;
}

// ---- Kernel -----------------------------------------------------------------------------------

v1::Kernel ToProto(const Kernel& k) {
  v1::Kernel m;
  *m.mutable_problem() = ToProto(k.problem);
  m.set_mini_batch(k.mini_batch);
  m.set_name(k.name);
  if (k.workspace_limit) m.set_workspace_limit_bytes(*k.workspace_limit);
  return m;
}

Result<Kernel> FromProto(const v1::Kernel& m) {
  Kernel k;
  FieldErrors errors;
  if (!m.has_problem()) {
    errors.AddField("problem", "required");
  } else {
    Result<ConvProblem> problem = FromProto(m.problem());
    if (problem.ok()) {
      k.problem = std::move(problem).value();
    } else {
      errors.Add("problem", problem.status());
    }
  }
  errors.Add(CheckMiniBatch("mini_batch", m.mini_batch()));
  k.mini_batch = m.mini_batch();
  errors.Add(CheckLength("name", m.name(), kMaxKernelNameBytes));
  if (HasControlCharacter(m.name())) {
    errors.Add(
        InvalidArgument("name: must not contain control characters (ESC, line breaks, tabs)"));
  }
  k.name = m.name();
  if (m.has_workspace_limit_bytes()) {
    if (m.workspace_limit_bytes() > kMaxWorkspaceBytes) {
      errors.AddField("workspace_limit_bytes",
                      "must be at most 1 TiB, got " + std::to_string(m.workspace_limit_bytes()));
    }
    k.workspace_limit = m.workspace_limit_bytes();
  }
  if (!errors.ok()) return errors.ToStatus();
  return k;
}

// ---- Timing -----------------------------------------------------------------------------------

v1::Timing ToProto(const Timing& t) {
  v1::Timing m;
  m.set_micro_batch(t.micro_batch);
  m.set_algo(t.algo);
  m.set_engine_config(t.engine_config);
  m.set_time_ms(t.time_ms);
  m.set_spread_ms(t.spread_ms);
  m.set_samples(t.samples);
  m.set_workspace_bytes(t.workspace_bytes);
  m.set_status(ToProto(t.status));
  m.set_error(t.error);
  return m;
}

Result<Timing> FromProto(const v1::Timing& m) {
  Timing t;
  FieldErrors errors;
  errors.Add(CheckMiniBatch("micro_batch", m.micro_batch()));
  t.micro_batch = m.micro_batch();
  errors.Add(CheckAlgorithm({m.algo(), m.engine_config()}));
  t.algo = m.algo();
  t.engine_config = m.engine_config();
  Result<TimingStatus> status = TimingStatusFromProto(m.status());
  if (status.ok()) {
    t.status = *status;
  } else {
    errors.Add(status.status());
  }
  const Status time = CheckTime("time_ms", m.time_ms());
  errors.Add(time);
  if (time.ok() && status.ok() && t.status == TimingStatus::kOk && m.time_ms() <= 0) {
    errors.AddField("time_ms",
                    "must be positive when status is OK, got " + std::to_string(m.time_ms()));
  }
  t.time_ms = m.time_ms();
  errors.Add(CheckTime("spread_ms", m.spread_ms()));
  t.spread_ms = m.spread_ms();
  errors.Add(CheckNonNegative("samples", m.samples()));
  t.samples = m.samples();
  t.workspace_bytes = m.workspace_bytes();
  errors.Add(CheckLength("error", m.error(), kMaxMessageBytes));
  t.error = m.error();
  if (!errors.ok()) return errors.ToStatus();
  return t;
}

// ---- Segment ----------------------------------------------------------------------------------

v1::Segment ToProto(const Segment& s) {
  v1::Segment m;
  m.set_micro_batch(s.micro_batch);
  m.set_algo(s.algo);
  m.set_engine_config(s.engine_config);
  m.set_time_ms(s.time_ms);
  m.set_workspace_bytes(s.workspace_bytes);
  return m;
}

Result<Segment> FromProto(const v1::Segment& m) {
  Segment s;
  UCUDNN_RETURN_IF_ERROR(CheckMiniBatch("micro_batch", m.micro_batch()));
  s.micro_batch = m.micro_batch();
  UCUDNN_RETURN_IF_ERROR(CheckAlgorithm({m.algo(), m.engine_config()}));
  s.algo = m.algo();
  s.engine_config = m.engine_config();
  UCUDNN_RETURN_IF_ERROR(CheckTime("time_ms", m.time_ms()));
  s.time_ms = m.time_ms();
  s.workspace_bytes = m.workspace_bytes();
  return s;
}

// ---- IlpReport --------------------------------------------------------------------------------

v1::IlpReport ToProto(const IlpReport& r) {
  v1::IlpReport m;
  m.set_used(r.used);
  m.set_status(r.status);
  m.set_objective_ms(r.objective_ms);
  m.set_bound_ms(r.bound_ms);
  m.set_gap(r.gap);
  m.set_solve_seconds(r.solve_seconds);
  m.set_variables(r.variables);
  m.set_constraints(r.constraints);
  return m;
}

// The report is informational: a gap of infinity (objective 0) is a fact, not an error, so only
// the counts and the status text are checked.
Result<IlpReport> FromProto(const v1::IlpReport& m) {
  IlpReport r;
  r.used = m.used();
  UCUDNN_RETURN_IF_ERROR(CheckLength("status", m.status(), kMaxMessageBytes));
  r.status = m.status();
  r.objective_ms = m.objective_ms();
  r.bound_ms = m.bound_ms();
  r.gap = m.gap();
  r.solve_seconds = m.solve_seconds();
  UCUDNN_RETURN_IF_ERROR(CheckNonNegative("variables", m.variables()));
  r.variables = m.variables();
  UCUDNN_RETURN_IF_ERROR(CheckNonNegative("constraints", m.constraints()));
  r.constraints = m.constraints();
  return r;
}

// ---- KernelPlan -------------------------------------------------------------------------------

v1::KernelPlan ToProto(const KernelPlan& k) {
  v1::KernelPlan m;
  *m.mutable_kernel() = ToProto(k.kernel);
  m.set_status(ToProto(k.status));
  m.set_reason(k.reason);
  for (const Segment& s : k.config.segments) *m.add_segments() = ToProto(s);
  m.set_time_ms(k.config.time_ms);
  m.set_workspace_bytes(k.config.workspace_bytes);
  if (k.undivided) *m.mutable_undivided() = ToProto(*k.undivided);
  const bool known = k.status == KernelPlanStatus::kPlanned && k.undivided &&
                     k.undivided->time_ms > 0 && k.config.time_ms > 0;
  m.set_speedup(known ? k.undivided->time_ms / k.config.time_ms : 0.0);
  m.set_problem_hash(HashHex(StableHash(k.kernel.problem)));
  m.set_framework_ms(k.framework_ms);
  m.set_framework_workspace_bytes(k.framework_workspace_bytes);
  return m;
}

Result<KernelPlan> FromProto(const v1::KernelPlan& m) {
  KernelPlan k;
  if (!m.has_kernel()) return Required("kernel");
  Result<Kernel> kernel = FromProto(m.kernel());
  if (!kernel.ok()) return Nested("kernel", kernel.status());
  k.kernel = std::move(kernel).value();
  UCUDNN_ASSIGN_OR_RETURN(k.status, KernelPlanStatusFromProto(m.status()));
  UCUDNN_RETURN_IF_ERROR(CheckLength("reason", m.reason(), kMaxMessageBytes));
  k.reason = m.reason();

  int64_t batch_sum = 0;
  uint64_t largest_workspace = 0;
  for (int i = 0; i < m.segments_size(); ++i) {
    Result<Segment> segment = FromProto(m.segments(i));
    if (!segment.ok()) return Nested(Indexed("segments", i), segment.status());
    // Each size is at most kMaxBatch, so the running sum cannot overflow before it is checked.
    batch_sum += segment->micro_batch;
    if (batch_sum > k.kernel.mini_batch) {
      return InvalidArgument(Indexed("segments", i) +
                             ".micro_batch: segments exceed the mini-batch " +
                             std::to_string(k.kernel.mini_batch));
    }
    largest_workspace = std::max(largest_workspace, segment->workspace_bytes);
    if (IsFramework(*segment) && m.segments_size() != 1) {
      return InvalidArgument(Indexed("segments", i) +
                             ".algo: the framework's own convolution is the kernel's only segment");
    }
    k.config.segments.push_back(std::move(segment).value());
  }
  UCUDNN_RETURN_IF_ERROR(CheckTime("time_ms", m.time_ms()));
  k.config.time_ms = m.time_ms();
  k.config.workspace_bytes = m.workspace_bytes();
  if (k.status == KernelPlanStatus::kPlanned) {
    if (batch_sum != k.kernel.mini_batch) {
      return InvalidArgument("segments: micro-batch sizes sum to " + std::to_string(batch_sum) +
                             ", expected the mini-batch " + std::to_string(k.kernel.mini_batch));
    }
    if (m.workspace_bytes() != largest_workspace) {
      return InvalidArgument("workspace_bytes: must be the largest segment workspace (" +
                             std::to_string(largest_workspace) + "), got " +
                             std::to_string(m.workspace_bytes()));
    }
  }

  if (m.has_undivided()) {
    Result<Segment> undivided = FromProto(m.undivided());
    if (!undivided.ok()) return Nested("undivided", undivided.status());
    if (undivided->micro_batch != k.kernel.mini_batch) {
      return InvalidArgument("undivided.micro_batch: must be the mini-batch " +
                             std::to_string(k.kernel.mini_batch) + ", got " +
                             std::to_string(undivided->micro_batch));
    }
    k.undivided = std::move(undivided).value();
  }
  UCUDNN_RETURN_IF_ERROR(CheckTime("framework_ms", m.framework_ms()));
  k.framework_ms = m.framework_ms();
  k.framework_workspace_bytes = m.framework_workspace_bytes();

  if (!m.problem_hash().empty()) {
    const std::string expected = HashHex(StableHash(k.kernel.problem));
    if (m.problem_hash() != expected) {
      return InvalidArgument("problem_hash: does not match kernel.problem (expected " + expected +
                             ", got " + QuoteForError(m.problem_hash()) + ")");
    }
  }
  return k;
}

// ---- Plan -------------------------------------------------------------------------------------

v1::Plan ToProto(const NetworkPlan& plan, const DeviceFingerprint& device) {
  v1::Plan m;
  m.set_schema_version(kPlanSchemaVersion);
  *m.mutable_device() = ToProto(device);
  bool complete = true;
  for (const KernelPlan& k : plan.kernels) {
    *m.add_kernels() = ToProto(k);
    complete = complete && k.status == KernelPlanStatus::kPlanned;
  }
  m.set_status(complete ? v1::PLAN_STATUS_COMPLETE : v1::PLAN_STATUS_PARTIAL);
  m.set_policy(ToProto(plan.policy));
  m.set_workspace_mode(ToProto(plan.workspace_mode));
  m.set_workspace_bytes(plan.workspace_budget_bytes);
  m.set_total_time_ms(plan.total_time_ms);
  m.set_total_undivided_ms(plan.total_undivided_ms);
  m.set_undivided_sum_ms(plan.undivided_sum_ms);
  m.set_total_workspace_bytes(plan.total_workspace_bytes);
  *m.mutable_ilp() = ToProto(plan.ilp);
  m.set_framework(plan.framework);
  return m;
}

Result<NetworkPlan> FromProto(const v1::Plan& m) {
  if (m.schema_version() == 0) return Required("schema_version");
  if (m.schema_version() > kPlanSchemaVersion) {
    return FailedPrecondition("schema_version: " + std::to_string(m.schema_version()) +
                              " is newer than this build understands (" +
                              std::to_string(kPlanSchemaVersion) + ")");
  }
  if (!m.has_device()) return Required("device");
  Result<DeviceFingerprint> device = FromProto(m.device());
  if (!device.ok()) return Nested("device", device.status());

  NetworkPlan plan;
  UCUDNN_RETURN_IF_ERROR(CheckKernelCount(m.kernels_size()));
  int first_unplanned = -1;
  for (int i = 0; i < m.kernels_size(); ++i) {
    Result<KernelPlan> k = FromProto(m.kernels(i));
    if (!k.ok()) return Nested(Indexed("kernels", i), k.status());
    if (k->status != KernelPlanStatus::kPlanned && first_unplanned < 0) first_unplanned = i;
    plan.kernels.push_back(std::move(k).value());
  }
  switch (m.status()) {
    case v1::PLAN_STATUS_UNSPECIFIED:
      return Required("status");
    case v1::PLAN_STATUS_COMPLETE:
      if (first_unplanned >= 0) {
        return InvalidArgument(
            "status: COMPLETE, but " + Indexed("kernels", first_unplanned) + " is " +
            std::string(KernelPlanStatusName(m.kernels(first_unplanned).status())));
      }
      plan.complete = true;
      break;
    case v1::PLAN_STATUS_PARTIAL:
      if (first_unplanned < 0) {
        return InvalidArgument("status: PARTIAL, but every kernel is PLANNED");
      }
      plan.complete = false;
      break;
    default:
      return UnknownEnum("status", m.status());
  }
  UCUDNN_ASSIGN_OR_RETURN(plan.policy, FromProto(m.policy()));
  UCUDNN_ASSIGN_OR_RETURN(plan.workspace_mode, FromProto(m.workspace_mode()));
  UCUDNN_RETURN_IF_ERROR(CheckWorkspaceBudget(m.workspace_bytes()));
  plan.workspace_budget_bytes = m.workspace_bytes();
  UCUDNN_RETURN_IF_ERROR(CheckTime("total_time_ms", m.total_time_ms()));
  plan.total_time_ms = m.total_time_ms();
  UCUDNN_RETURN_IF_ERROR(CheckTime("total_undivided_ms", m.total_undivided_ms()));
  plan.total_undivided_ms = m.total_undivided_ms();
  UCUDNN_RETURN_IF_ERROR(CheckTime("undivided_sum_ms", m.undivided_sum_ms()));
  plan.undivided_sum_ms = m.undivided_sum_ms();
  plan.total_workspace_bytes = m.total_workspace_bytes();
  Result<IlpReport> ilp = FromProto(m.ilp());
  if (!ilp.ok()) return Nested("ilp", ilp.status());
  plan.ilp = std::move(ilp).value();
  if (!m.framework().empty()) {
    UCUDNN_RETURN_IF_ERROR(CheckFrameworkIdentity("framework", m.framework()));
    plan.framework = m.framework();
  }
  return plan;
}

// ---- GetPlanRequest ---------------------------------------------------------------------------

v1::GetPlanRequest ToProto(const PlanRequest& request, uint32_t max_wait_ms) {
  v1::GetPlanRequest m;
  *m.mutable_device() = ToProto(request.device);
  for (const Kernel& k : request.kernels) *m.add_kernels() = ToProto(k);
  m.set_policy(ToProto(request.policy));
  m.set_workspace_mode(ToProto(request.workspace_mode));
  m.set_workspace_bytes(request.workspace_bytes);
  m.set_max_wait_ms(max_wait_ms);
  if (request.algorithms != AlgorithmSpace::kAll) m.set_algorithms(ToProto(request.algorithms));
  m.set_framework(request.framework);
  return m;
}

Result<PlanRequest> FromProto(const v1::GetPlanRequest& m) { return FromProto(m, ""); }

Result<PlanRequest> FromProto(const v1::GetPlanRequest& m, std::string_view path) {
  PlanRequest request;
  FieldErrors errors;
  if (!m.has_device()) {
    errors.AddField(FieldPath(path, "device"), "required");
  } else {
    Result<DeviceFingerprint> device = FromProto(m.device());
    if (device.ok()) {
      request.device = std::move(device).value();
    } else {
      errors.Add(FieldPath(path, "device"), device.status());
    }
  }

  // The count first: a request of a million kernels is refused before any is looked at.
  if (m.kernels_size() == 0) {
    errors.AddField(FieldPath(path, "kernels"), "at least 1 kernel, got 0");
  } else if (Status count = CheckKernelCount(m.kernels_size()); !count.ok()) {
    errors.Add(path, count);
  } else {
    request.kernels.reserve(static_cast<size_t>(m.kernels_size()));
    for (int i = 0; i < m.kernels_size(); ++i) {
      Result<Kernel> k = FromProto(m.kernels(i));
      if (k.ok()) {
        request.kernels.push_back(std::move(k).value());
      } else {
        errors.Add(FieldPath(path, "kernels", i), k.status());
      }
    }
  }

  if (auto policy = FromProto(m.policy()); policy.ok()) {
    request.policy = *policy;
  } else {
    errors.Add(path, policy.status());
  }
  if (auto mode = FromProto(m.workspace_mode()); mode.ok()) {
    request.workspace_mode = *mode;
  } else {
    errors.Add(path, mode.status());
  }
  errors.Add(path, CheckWorkspaceBudget(m.workspace_bytes()));
  request.workspace_bytes = m.workspace_bytes();
  if (auto algorithms = FromProto(m.algorithms()); algorithms.ok()) {
    request.algorithms = *algorithms;
  } else {
    errors.Add(path, algorithms.status());
  }
  if (!m.framework().empty()) {
    errors.Add(CheckFrameworkIdentity(FieldPath(path, "framework"), m.framework()));
    request.framework = m.framework();
  }
  if (m.max_wait_ms() > kMaxWaitMs) {
    errors.AddField(FieldPath(path, "max_wait_ms"), "at most " + std::to_string(kMaxWaitMs) +
                                                        ", got " + std::to_string(m.max_wait_ms()));
  }
  if (!errors.ok()) return errors.ToStatus();
  return request;
}

}  // namespace ucudnn
