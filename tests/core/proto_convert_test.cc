#include "ucudnn/proto/proto_convert.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/test_problems.h"
#include "support/devices.h"

namespace ucudnn {
namespace {

using google::protobuf::util::MessageDifferencer;
using test_support::H100;
using test_support::Xeon;
using testdata::AlexNetConv2BwdData;
using testdata::GroupedDilatedBwdFilter;
using testdata::RandomValidProblem;
using testdata::Resnet3x3;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Kernel MakeKernel(const ConvProblem& p, int64_t mini_batch, std::string name) {
  Kernel k;
  k.problem = p;
  k.mini_batch = mini_batch;
  k.name = std::move(name);
  return k;
}

Segment MakeSegment(int64_t micro_batch, int algo, double time_ms, uint64_t workspace) {
  Segment s;
  s.micro_batch = micro_batch;
  s.algo = algo;
  s.time_ms = time_ms;
  s.workspace_bytes = workspace;
  return s;
}

// A kernel planned as 64 + 64 + 128 with a slower undivided baseline.
KernelPlan PlannedKernel() {
  KernelPlan k;
  k.kernel = MakeKernel(Resnet3x3(), 256, "res3/fwd");
  k.status = KernelPlanStatus::kPlanned;
  k.config.segments = {MakeSegment(64, 1, 0.25, 1 << 20), MakeSegment(64, 1, 0.25, 1 << 20),
                       MakeSegment(128, 6, 0.5, 48 << 20)};
  k.config.time_ms = 1.0;
  k.config.workspace_bytes = 48 << 20;
  k.undivided = MakeSegment(256, 0, 2.5, 0);
  k.framework_ms = 1.25;
  k.framework_workspace_bytes = 120 << 20;
  return k;
}

KernelPlan MissingKernel() {
  KernelPlan k;
  k.kernel = MakeKernel(AlexNetConv2BwdData(), 128, "conv2/bwd_data");
  k.status = KernelPlanStatus::kMissing;
  k.reason = "timings missing: benchmark job 17 queued";
  return k;
}

KernelPlan InfeasibleKernel() {
  KernelPlan k;
  k.kernel = MakeKernel(GroupedDilatedBwdFilter(), 32, "");
  k.status = KernelPlanStatus::kInfeasible;
  k.reason = "no algorithm fits 0 bytes of workspace";
  return k;
}

NetworkPlan CompletePlan() {
  NetworkPlan plan;
  plan.kernels = {PlannedKernel(), PlannedKernel()};
  plan.kernels[1].kernel.name = "res3b/fwd";
  plan.workspace_mode = WorkspaceMode::kTotalSum;
  plan.policy = BatchPolicy::kAll;
  plan.workspace_budget_bytes = 96ull << 20;
  plan.total_time_ms = 2.0;
  plan.total_undivided_ms = 5.0;
  plan.undivided_sum_ms = 4.5;
  plan.total_workspace_bytes = 96ull << 20;
  plan.complete = true;
  plan.ilp.used = true;
  plan.ilp.status = "optimal";
  plan.ilp.objective_ms = 2.0;
  plan.ilp.bound_ms = 1.9;
  plan.ilp.gap = 0.05;
  plan.ilp.solve_seconds = 0.012;
  plan.ilp.variables = 14;
  plan.ilp.constraints = 3;
  return plan;
}

PlanRequest MakeRequest() {
  PlanRequest r;
  r.device = H100();
  r.kernels = {MakeKernel(Resnet3x3(), 256, "a"), MakeKernel(AlexNetConv2BwdData(), 128, "b"),
               MakeKernel(GroupedDilatedBwdFilter(), 1, "c"),
               MakeKernel(Resnet3x3(), kMaxBatch, "d")};
  r.policy = BatchPolicy::kUndivided;
  r.workspace_mode = WorkspaceMode::kTotalShared;
  r.workspace_bytes = 123456789;
  return r;
}

template <typename T>
void ExpectInvalid(const Result<T>& r, const std::string& message) {
  ASSERT_FALSE(r.ok()) << "expected: " << message;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(r.status().message(), message);
}

// ---- Hashes -----------------------------------------------------------------------------------

TEST(HashHex, FormatsSixteenLowercaseDigits) {
  EXPECT_EQ(HashHex(0), "0000000000000000");
  EXPECT_EQ(HashHex(1), "0000000000000001");
  EXPECT_EQ(HashHex(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(HashHex(UINT64_MAX), "ffffffffffffffff");
  EXPECT_EQ(HashHex(StableHash(Resnet3x3())), "ff1a07aebaf31d65");
}

TEST(HashHex, ParsesItsOwnOutputOnly) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t v = rng();
    Result<uint64_t> parsed = ParseHashHex(HashHex(v));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, v);
  }
  for (const char* bad : {"", "0", "ff1a07aebaf31d6", "ff1a07aebaf31d650", "FF1A07AEBAF31D65",
                          "0xff1a07aebaf31d", "ff1a07aebaf31d6g", " f1a07aebaf31d65"}) {
    ExpectInvalid(ParseHashHex(bad, "problem_hash"),
                  std::string("problem_hash: must be 16 lowercase hex digits, got '") + bad + "'");
  }
}

// ---- Enums ------------------------------------------------------------------------------------

TEST(ProtoEnums, ValuesMapOneToOne) {
  EXPECT_EQ(ToProto(ConvOp::kForward), v1::CONV_OP_FORWARD);
  EXPECT_EQ(ToProto(ConvOp::kBackwardData), v1::CONV_OP_BACKWARD_DATA);
  EXPECT_EQ(ToProto(ConvOp::kBackwardFilter), v1::CONV_OP_BACKWARD_FILTER);
  EXPECT_EQ(ToProto(DataType::kFloat32), v1::DATA_TYPE_FLOAT32);
  EXPECT_EQ(ToProto(DataType::kFloat16), v1::DATA_TYPE_FLOAT16);
  EXPECT_EQ(ToProto(DataType::kBFloat16), v1::DATA_TYPE_BFLOAT16);
  EXPECT_EQ(ToProto(Layout::kNCHW), v1::TENSOR_LAYOUT_NCHW);
  EXPECT_EQ(ToProto(Layout::kNHWC), v1::TENSOR_LAYOUT_NHWC);
  EXPECT_EQ(ToProto(MathMode::kDefault), v1::MATH_MODE_DEFAULT);
  EXPECT_EQ(ToProto(MathMode::kTensorOp), v1::MATH_MODE_TENSOR_OP);
  EXPECT_EQ(ToProto(MathMode::kTensorOpAllowConversion), v1::MATH_MODE_TENSOR_OP_ALLOW_CONVERSION);
  EXPECT_EQ(ToProto(MathMode::kFma), v1::MATH_MODE_FMA);
  EXPECT_EQ(ToProto(TimingStatus::kOk), v1::TIMING_STATUS_OK);
  EXPECT_EQ(ToProto(TimingStatus::kUnsupported), v1::TIMING_STATUS_UNSUPPORTED);
  EXPECT_EQ(ToProto(TimingStatus::kFailed), v1::TIMING_STATUS_FAILED);
  EXPECT_EQ(ToProto(KernelPlanStatus::kPlanned), v1::KERNEL_PLAN_STATUS_PLANNED);
  EXPECT_EQ(ToProto(KernelPlanStatus::kMissing), v1::KERNEL_PLAN_STATUS_MISSING);
  EXPECT_EQ(ToProto(KernelPlanStatus::kInfeasible), v1::KERNEL_PLAN_STATUS_INFEASIBLE);
}

TEST(ProtoEnums, BatchPolicyAndWorkspaceMode) {
  for (BatchPolicy p : {BatchPolicy::kUndivided, BatchPolicy::kPowerOfTwo, BatchPolicy::kAll}) {
    Result<BatchPolicy> back = FromProto(ToProto(p));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, p);
  }
  EXPECT_EQ(ToProto(BatchPolicy::kUndivided), v1::BATCH_POLICY_UNDIVIDED);
  EXPECT_EQ(ToProto(BatchPolicy::kPowerOfTwo), v1::BATCH_POLICY_POWER_OF_TWO);
  EXPECT_EQ(ToProto(BatchPolicy::kAll), v1::BATCH_POLICY_ALL);
  EXPECT_EQ(*FromProto(v1::BATCH_POLICY_UNSPECIFIED), BatchPolicy::kPowerOfTwo);
  ExpectInvalid(FromProto(static_cast<v1::BatchPolicy>(4)), "policy: unknown value 4");
  ExpectInvalid(FromProto(static_cast<v1::BatchPolicy>(-1)), "policy: unknown value -1");

  for (WorkspaceMode m :
       {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalSum, WorkspaceMode::kTotalShared}) {
    Result<WorkspaceMode> back = FromProto(ToProto(m));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(ToProto(WorkspaceMode::kPerKernel), v1::WORKSPACE_MODE_PER_KERNEL);
  EXPECT_EQ(ToProto(WorkspaceMode::kTotalSum), v1::WORKSPACE_MODE_TOTAL_SUM);
  EXPECT_EQ(ToProto(WorkspaceMode::kTotalShared), v1::WORKSPACE_MODE_TOTAL_SHARED);
  EXPECT_EQ(*FromProto(v1::WORKSPACE_MODE_UNSPECIFIED), WorkspaceMode::kPerKernel);
  ExpectInvalid(FromProto(static_cast<v1::WorkspaceMode>(9)), "workspace_mode: unknown value 9");
}

// ---- ConvProblem ------------------------------------------------------------------------------

TEST(ProtoConvProblem, RoundTripsRandomValidProblems) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    const ConvProblem p = RandomValidProblem(rng);
    const v1::ConvProblem m = ToProto(p);
    Result<ConvProblem> back = FromProto(m);
    ASSERT_TRUE(back.ok()) << CanonicalKey(p) << ": " << back.status().ToString();
    ASSERT_EQ(*back, p) << CanonicalKey(p);
    // Through the wire format too.
    v1::ConvProblem wire;
    ASSERT_TRUE(wire.ParseFromString(m.SerializeAsString()));
    ASSERT_TRUE(MessageDifferencer::Equals(wire, m));
  }
}

TEST(ProtoConvProblem, WritesEveryFieldExplicitly) {
  const v1::ConvProblem m = ToProto(GroupedDilatedBwdFilter());
  EXPECT_EQ(m.op(), v1::CONV_OP_BACKWARD_FILTER);
  EXPECT_EQ(m.c(), 256);
  EXPECT_EQ(m.h(), 14);
  EXPECT_EQ(m.w(), 15);
  EXPECT_EQ(m.k(), 512);
  EXPECT_EQ(m.r(), 3);
  EXPECT_EQ(m.s(), 1);
  EXPECT_EQ(m.pad_h(), 2);
  EXPECT_EQ(m.pad_w(), 0);
  EXPECT_EQ(m.stride_h(), 2);
  EXPECT_EQ(m.stride_w(), 1);
  EXPECT_EQ(m.dilation_h(), 2);
  EXPECT_EQ(m.dilation_w(), 1);
  EXPECT_EQ(m.groups(), 32);
  EXPECT_EQ(m.data_type(), v1::DATA_TYPE_BFLOAT16);
  EXPECT_EQ(m.compute_type(), v1::DATA_TYPE_FLOAT32);
  EXPECT_EQ(m.layout(), v1::TENSOR_LAYOUT_NHWC);
  EXPECT_EQ(m.math(), v1::MATH_MODE_TENSOR_OP_ALLOW_CONVERSION);
  // Defaults are written too: a reader never has to know them.
  const v1::ConvProblem d = ToProto(Resnet3x3());
  EXPECT_EQ(d.stride_h(), 1);
  EXPECT_EQ(d.groups(), 1);
  EXPECT_EQ(d.data_type(), v1::DATA_TYPE_FLOAT32);
  EXPECT_EQ(d.math(), v1::MATH_MODE_DEFAULT);
}

TEST(ProtoConvProblem, UnsetFieldsTakeTheDocumentedDefaults) {
  v1::ConvProblem m;
  m.set_op(v1::CONV_OP_FORWARD);
  m.set_c(64);
  m.set_h(56);
  m.set_w(56);
  m.set_k(64);
  m.set_r(3);
  m.set_s(3);
  m.set_pad_h(1);
  m.set_pad_w(1);
  Result<ConvProblem> p = FromProto(m);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, Resnet3x3());
  EXPECT_EQ(p->stride_h, 1);
  EXPECT_EQ(p->stride_w, 1);
  EXPECT_EQ(p->dilation_h, 1);
  EXPECT_EQ(p->dilation_w, 1);
  EXPECT_EQ(p->groups, 1);
  EXPECT_EQ(p->data_type, DataType::kFloat32);
  EXPECT_EQ(p->compute_type, DataType::kFloat32);
  EXPECT_EQ(p->layout, Layout::kNCHW);
  EXPECT_EQ(p->math, MathMode::kDefault);
}

TEST(ProtoConvProblem, InvalidFields) {
  const v1::ConvProblem good = ToProto(Resnet3x3());
  auto with = [&](const std::function<void(v1::ConvProblem&)>& change) {
    v1::ConvProblem m = good;
    change(m);
    return FromProto(m);
  };
  ExpectInvalid(with([](auto& m) { m.set_op(v1::CONV_OP_UNSPECIFIED); }), "op: required");
  ExpectInvalid(with([](auto& m) { m.set_op(static_cast<v1::ConvOp>(4)); }), "op: unknown value 4");
  ExpectInvalid(with([](auto& m) { m.set_data_type(static_cast<v1::DataType>(4)); }),
                "data_type: unknown value 4");
  ExpectInvalid(with([](auto& m) { m.set_compute_type(static_cast<v1::DataType>(-3)); }),
                "compute_type: unknown value -3");
  ExpectInvalid(with([](auto& m) { m.set_layout(static_cast<v1::TensorLayout>(3)); }),
                "layout: unknown value 3");
  ExpectInvalid(with([](auto& m) { m.set_math(static_cast<v1::MathMode>(5)); }),
                "math: unknown value 5");
  ExpectInvalid(with([](auto& m) { m.set_c(0); }), "c: must be in [1, 65536], got 0");
  ExpectInvalid(with([](auto& m) { m.set_stride_h(-1); }),
                "stride_h: must be in [1, 1024], got -1");
  ExpectInvalid(with([](auto& m) { m.set_groups(-4); }), "groups: must be in [1, 65536], got -4");
}

TEST(ProtoConvProblem, ThreeDRoundTripsAndTwoDMessagesHaveNoDepth) {
  ConvProblem p = Resnet3x3();
  p.d = 8;
  p.t = 3;
  p.pad_d = 1;
  p.stride_d = 2;
  p.dilation_d = 1;
  const v1::ConvProblem m = ToProto(p);
  EXPECT_EQ(m.d(), 8);
  EXPECT_EQ(m.t(), 3);
  EXPECT_EQ(m.pad_d(), 1);
  EXPECT_EQ(m.stride_d(), 2);
  Result<ConvProblem> back = FromProto(m);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, p);
  // A 2-D problem's message is the one of before 3-D: no depth field on the wire.
  const v1::ConvProblem flat = ToProto(Resnet3x3());
  EXPECT_EQ(flat.d(), 0);
  EXPECT_EQ(flat.t(), 0);
  EXPECT_EQ(flat.stride_d(), 0);
  // A depth of 1 with a depth stride is the 2-D problem (one key for both).
  v1::ConvProblem depth_one = flat;
  depth_one.set_d(1);
  depth_one.set_t(1);
  depth_one.set_stride_d(2);
  Result<ConvProblem> normalized = FromProto(depth_one);
  ASSERT_TRUE(normalized.ok()) << normalized.status().ToString();
  EXPECT_EQ(*normalized, Resnet3x3());
  v1::ConvProblem bad = m;
  bad.set_pad_d(5);
  ExpectInvalid(FromProto(bad),
                "pad_d: must be in [0, 2] (below the dilated filter depth 3), got 5");
}

// ---- DeviceFingerprint ------------------------------------------------------------------------

TEST(ProtoFingerprint, RoundTrips) {
  for (const DeviceFingerprint& f : {H100(), Xeon(), CpuFingerprint()}) {
    const v1::DeviceFingerprint m = ToProto(f);
    EXPECT_EQ(m.backend(), f.backend);
    EXPECT_EQ(m.name(), f.name);
    EXPECT_EQ(m.memory_bytes(), f.memory_bytes);
    Result<DeviceFingerprint> back = FromProto(m);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, f);
    EXPECT_EQ(back->Hash(), f.Hash());
  }
  DeviceFingerprint every = H100();
  every.cc_minor = 7;
  every.blas = "none";
  every.memory_bytes = UINT64_MAX;
  Result<DeviceFingerprint> back = FromProto(ToProto(every));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, every);
}

TEST(ProtoFingerprint, Invalid) {
  v1::DeviceFingerprint m = ToProto(H100());
  m.set_backend("gpu");
  ExpectInvalid(FromProto(m), "backend: must be \"cudnn\" or \"cpu\", got 'gpu'");
  ExpectInvalid(FromProto(v1::DeviceFingerprint()),
                "backend: must be \"cudnn\" or \"cpu\", got ''");
}

// ---- Kernel -----------------------------------------------------------------------------------

TEST(ProtoKernel, RoundTrips) {
  for (const Kernel& k :
       {MakeKernel(Resnet3x3(), 256, "conv/fwd"), MakeKernel(AlexNetConv2BwdData(), 1, ""),
        MakeKernel(GroupedDilatedBwdFilter(), kMaxBatch, std::string(kMaxKernelNameBytes, 'n'))}) {
    Result<Kernel> back = FromProto(ToProto(k));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, k);
  }
  // A kernel's own workspace limit: absent stays absent, 0 and 1 TiB are kept as given.
  Kernel k = MakeKernel(Resnet3x3(), 256, "conv/fwd");
  EXPECT_FALSE(ToProto(k).has_workspace_limit_bytes());
  for (uint64_t limit : {uint64_t{0}, uint64_t{12345}, kMaxWorkspaceBytes}) {
    k.workspace_limit = limit;
    const v1::Kernel m = ToProto(k);
    ASSERT_TRUE(m.has_workspace_limit_bytes());
    EXPECT_EQ(m.workspace_limit_bytes(), limit);
    Result<Kernel> back = FromProto(m);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, k);
  }
}

TEST(ProtoKernel, Invalid) {
  const v1::Kernel good = ToProto(MakeKernel(Resnet3x3(), 256, "x"));
  v1::Kernel m = good;
  m.clear_problem();
  ExpectInvalid(FromProto(m), "problem: required");
  m = good;
  m.mutable_problem()->set_k(0);
  ExpectInvalid(FromProto(m), "problem.k: must be in [1, 65536], got 0");
  m = good;
  m.set_mini_batch(0);
  ExpectInvalid(FromProto(m), "mini_batch: must be in [1, 65536], got 0");
  m.set_mini_batch(kMaxBatch + 1);
  ExpectInvalid(FromProto(m), "mini_batch: must be in [1, 65536], got 65537");
  m = good;
  m.set_name(std::string(kMaxKernelNameBytes + 1, 'n'));
  ExpectInvalid(FromProto(m), "name: at most 128 bytes, got 129");
  for (const char* forged : {"conv\x1b[2J", "conv\nfake line", "conv\r", "conv\t1"}) {
    m.set_name(forged);
    ExpectInvalid(FromProto(m),
                  "name: must not contain control characters (ESC, line breaks, tabs)");
  }
  m = good;
  m.set_workspace_limit_bytes(kMaxWorkspaceBytes + 1);
  ExpectInvalid(FromProto(m), "workspace_limit_bytes: must be at most 1 TiB, got 1099511627777");
}

// ---- Timing -----------------------------------------------------------------------------------

TEST(ProtoTiming, RoundTripsEveryStatus) {
  Timing ok;
  ok.micro_batch = 64;
  ok.algo = 6;
  ok.time_ms = 0.4375;
  ok.spread_ms = 0.0125;
  ok.samples = 7;
  ok.workspace_bytes = 3ull << 33;
  ok.status = TimingStatus::kOk;
  Timing unsupported = ok;
  unsupported.status = TimingStatus::kUnsupported;
  unsupported.time_ms = 0;
  unsupported.spread_ms = 0;
  unsupported.samples = 0;
  unsupported.workspace_bytes = 0;
  unsupported.error = "CUDNN_STATUS_NOT_SUPPORTED";
  Timing failed = ok;
  failed.status = TimingStatus::kFailed;
  failed.error = std::string(kMaxMessageBytes, 'e');
  for (const Timing& t : {ok, unsupported, failed}) {
    const v1::Timing m = ToProto(t);
    EXPECT_TRUE(m.measured_by().empty());
    Result<Timing> back = FromProto(m);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, t);
  }
  // Server-side fields are accepted and ignored.
  v1::Timing m = ToProto(ok);
  m.set_measured_by("worker-1");
  m.set_measured_at("2025-01-01T00:00:00Z");
  Result<Timing> back = FromProto(m);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, ok);
}

TEST(ProtoTiming, Invalid) {
  Timing t;
  t.micro_batch = 8;
  t.algo = 1;
  t.time_ms = 1.5;
  t.samples = 5;
  const v1::Timing good = ToProto(t);
  auto with = [&](const std::function<void(v1::Timing&)>& change) {
    v1::Timing m = good;
    change(m);
    return FromProto(m);
  };
  ExpectInvalid(with([](auto& m) { m.set_micro_batch(0); }),
                "micro_batch: must be in [1, 65536], got 0");
  ExpectInvalid(with([](auto& m) { m.set_micro_batch(65537); }),
                "micro_batch: must be in [1, 65536], got 65537");
  ExpectInvalid(with([](auto& m) { m.set_algo(-1); }),
                "algo: must be >= 0 without engine_config, got -1");
  ExpectInvalid(with([](auto& m) { m.set_status(v1::TIMING_STATUS_UNSPECIFIED); }),
                "status: required");
  ExpectInvalid(with([](auto& m) { m.set_status(static_cast<v1::TimingStatus>(4)); }),
                "status: unknown value 4");
  ExpectInvalid(with([](auto& m) { m.set_time_ms(-1); }),
                "time_ms: must be finite and >= 0, got -1.000000");
  ExpectInvalid(with([](auto& m) { m.set_time_ms(kInf); }),
                "time_ms: must be finite and >= 0, got inf");
  ExpectInvalid(with([](auto& m) { m.set_time_ms(kNaN); }),
                "time_ms: must be finite and >= 0, got nan");
  ExpectInvalid(with([](auto& m) { m.set_time_ms(0); }),
                "time_ms: must be positive when status is OK, got 0.000000");
  ExpectInvalid(with([](auto& m) { m.set_spread_ms(-0.5); }),
                "spread_ms: must be finite and >= 0, got -0.500000");
  ExpectInvalid(with([](auto& m) { m.set_samples(-1); }), "samples: must be >= 0, got -1");
  ExpectInvalid(with([](auto& m) { m.set_error(std::string(kMaxMessageBytes + 1, 'e')); }),
                "error: at most 4096 bytes, got 4097");
}

// ---- Segment, IlpReport -----------------------------------------------------------------------

Segment EngineSegment(int64_t micro_batch, const std::string& key, double time_ms,
                      uint64_t workspace) {
  Segment s = MakeSegment(micro_batch, kEngineAlgo, time_ms, workspace);
  s.engine_config = key;
  return s;
}

TEST(ProtoTiming, EngineConfigurationsRoundTripAndAreValidated) {
  Timing t;
  t.micro_batch = 32;
  t.algo = kEngineAlgo;
  t.engine_config = "eng34{k3=2;k14=-1}";
  t.time_ms = 0.3125;
  t.samples = 9;
  t.workspace_bytes = 5ull << 20;
  const v1::Timing m = ToProto(t);
  EXPECT_EQ(m.algo(), -1);
  EXPECT_EQ(m.engine_config(), "eng34{k3=2;k14=-1}");
  v1::Timing wire;
  ASSERT_TRUE(wire.ParseFromString(m.SerializeAsString()));
  Result<Timing> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, t);

  auto with = [&](const std::function<void(v1::Timing&)>& change) {
    v1::Timing changed = m;
    change(changed);
    return FromProto(changed);
  };
  ExpectInvalid(with([](auto& x) { x.set_algo(3); }),
                "algo: must be -1 with an engine configuration, got 3");
  ExpectInvalid(with([](auto& x) { x.set_engine_config("eng34{k14=-1;k3=2}"); }),
                "engine_config: engine configuration 'eng34{k14=-1;k3=2}': not in canonical order "
                "(knobs sorted by type)");
  ExpectInvalid(with([](auto& x) { x.set_engine_config("algo6"); }),
                "engine_config: engine configuration 'algo6': must start with 'eng'");
}

TEST(ProtoSegment, RoundTripsAndValidates) {
  const Segment s = MakeSegment(32, 7, 0.125, 1ull << 40);
  Result<Segment> back = FromProto(ToProto(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, s);
  v1::Segment m = ToProto(s);
  m.set_micro_batch(0);
  ExpectInvalid(FromProto(m), "micro_batch: must be in [1, 65536], got 0");
  m = ToProto(s);
  m.set_algo(-2);
  // -2 is the framework's own convolution: its identity is required.
  ExpectInvalid(FromProto(m), "engine_config: must not be empty");
  m.set_engine_config("torch-2.11");
  EXPECT_TRUE(FromProto(m).ok()) << "the framework's own convolution";
  m.set_algo(-3);
  ExpectInvalid(FromProto(m), "algo: must be >= -2, got -3");
  m = ToProto(s);
  m.set_time_ms(kNaN);
  ExpectInvalid(FromProto(m), "time_ms: must be finite and >= 0, got nan");
}

TEST(ProtoIlpReport, RoundTripsAndValidates) {
  const IlpReport r = CompletePlan().ilp;
  Result<IlpReport> back = FromProto(ToProto(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->used, r.used);
  EXPECT_EQ(back->status, r.status);
  EXPECT_EQ(back->objective_ms, r.objective_ms);
  EXPECT_EQ(back->bound_ms, r.bound_ms);
  EXPECT_EQ(back->gap, r.gap);
  EXPECT_EQ(back->solve_seconds, r.solve_seconds);
  EXPECT_EQ(back->variables, r.variables);
  EXPECT_EQ(back->constraints, r.constraints);
  v1::IlpReport m = ToProto(r);
  m.set_gap(kInf);  // objective 0: reported as is
  EXPECT_TRUE(FromProto(m).ok());
  m.set_variables(-1);
  ExpectInvalid(FromProto(m), "variables: must be >= 0, got -1");
  m = ToProto(r);
  m.set_constraints(-5);
  ExpectInvalid(FromProto(m), "constraints: must be >= 0, got -5");
}

// ---- KernelPlan -------------------------------------------------------------------------------

void ExpectSameKernelPlan(const KernelPlan& a, const KernelPlan& b) {
  EXPECT_EQ(a.kernel, b.kernel);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.undivided, b.undivided);
  EXPECT_EQ(a.framework_ms, b.framework_ms);
  EXPECT_EQ(a.framework_workspace_bytes, b.framework_workspace_bytes);
}

TEST(ProtoKernelPlan, RoundTrips) {
  for (const KernelPlan& k : {PlannedKernel(), MissingKernel(), InfeasibleKernel()}) {
    Result<KernelPlan> back = FromProto(ToProto(k));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ExpectSameKernelPlan(*back, k);
  }
  // Planned without a baseline (nothing fits undivided).
  KernelPlan k = PlannedKernel();
  k.undivided.reset();
  Result<KernelPlan> back = FromProto(ToProto(k));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->undivided.has_value());
}

TEST(ProtoKernelPlan, DerivedFields) {
  const v1::KernelPlan m = ToProto(PlannedKernel());
  EXPECT_EQ(m.status(), v1::KERNEL_PLAN_STATUS_PLANNED);
  EXPECT_DOUBLE_EQ(m.speedup(), 2.5);
  EXPECT_EQ(m.problem_hash(), "ff1a07aebaf31d65");
  EXPECT_EQ(m.segments_size(), 3);
  EXPECT_EQ(m.workspace_bytes(), 48u << 20);
  EXPECT_TRUE(m.has_undivided());
  KernelPlan no_baseline = PlannedKernel();
  no_baseline.undivided.reset();
  EXPECT_EQ(ToProto(no_baseline).speedup(), 0);
  EXPECT_FALSE(ToProto(no_baseline).has_undivided());
  EXPECT_EQ(ToProto(MissingKernel()).speedup(), 0);
  EXPECT_EQ(ToProto(MissingKernel()).problem_hash(), HashHex(StableHash(AlexNetConv2BwdData())));
}

TEST(ProtoKernelPlan, Invalid) {
  const v1::KernelPlan good = ToProto(PlannedKernel());
  auto with = [&](const std::function<void(v1::KernelPlan&)>& change) {
    v1::KernelPlan m = good;
    change(m);
    return FromProto(m);
  };
  ExpectInvalid(with([](auto& m) { m.clear_kernel(); }), "kernel: required");
  ExpectInvalid(with([](auto& m) { m.mutable_kernel()->mutable_problem()->set_c(0); }),
                "kernel.problem.c: must be in [1, 65536], got 0");
  ExpectInvalid(with([](auto& m) { m.mutable_kernel()->set_mini_batch(0); }),
                "kernel.mini_batch: must be in [1, 65536], got 0");
  ExpectInvalid(with([](auto& m) { m.set_status(v1::KERNEL_PLAN_STATUS_UNSPECIFIED); }),
                "status: required");
  ExpectInvalid(with([](auto& m) { m.set_status(static_cast<v1::KernelPlanStatus>(7)); }),
                "status: unknown value 7");
  ExpectInvalid(with([](auto& m) { m.set_reason(std::string(kMaxMessageBytes + 1, 'r')); }),
                "reason: at most 4096 bytes, got 4097");
  ExpectInvalid(with([](auto& m) { m.mutable_segments(1)->set_micro_batch(0); }),
                "segments[1].micro_batch: must be in [1, 65536], got 0");
  ExpectInvalid(with([](auto& m) { m.mutable_segments(2)->set_algo(-1); }),
                "segments[2].algo: must be >= 0 without engine_config, got -1");
  ExpectInvalid(with([](auto& m) { m.mutable_segments(2)->set_micro_batch(64); }),
                "segments: micro-batch sizes sum to 192, expected the mini-batch 256");
  ExpectInvalid(with([](auto& m) { m.add_segments()->set_micro_batch(1); }),
                "segments[3].micro_batch: segments exceed the mini-batch 256");
  ExpectInvalid(with([](auto& m) { m.clear_segments(); }),
                "segments: micro-batch sizes sum to 0, expected the mini-batch 256");
  ExpectInvalid(with([](auto& m) { m.set_workspace_bytes(1); }),
                "workspace_bytes: must be the largest segment workspace (50331648), got 1");
  ExpectInvalid(with([](auto& m) { m.set_time_ms(-1); }),
                "time_ms: must be finite and >= 0, got -1.000000");
  ExpectInvalid(with([](auto& m) { m.mutable_undivided()->set_micro_batch(128); }),
                "undivided.micro_batch: must be the mini-batch 256, got 128");
  ExpectInvalid(with([](auto& m) { m.mutable_undivided()->set_time_ms(kInf); }),
                "undivided.time_ms: must be finite and >= 0, got inf");
  ExpectInvalid(with([](auto& m) { m.set_problem_hash("0000000000000000"); }),
                "problem_hash: does not match kernel.problem (expected ff1a07aebaf31d65, got "
                "'0000000000000000')");
  // No hash is fine (nothing to check); speedup is derived, never trusted.
  Result<KernelPlan> no_hash = with([](auto& m) {
    m.clear_problem_hash();
    m.set_speedup(-3);
  });
  EXPECT_TRUE(no_hash.ok()) << no_hash.status().ToString();
  // Missing kernels need no segments.
  EXPECT_TRUE(FromProto(ToProto(MissingKernel())).ok());
}

// ---- Plan -------------------------------------------------------------------------------------

void ExpectSamePlan(const NetworkPlan& a, const NetworkPlan& b) {
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i) ExpectSameKernelPlan(a.kernels[i], b.kernels[i]);
  EXPECT_EQ(a.workspace_mode, b.workspace_mode);
  EXPECT_EQ(a.policy, b.policy);
  EXPECT_EQ(a.workspace_budget_bytes, b.workspace_budget_bytes);
  EXPECT_EQ(a.total_time_ms, b.total_time_ms);
  EXPECT_EQ(a.total_undivided_ms, b.total_undivided_ms);
  EXPECT_EQ(a.undivided_sum_ms, b.undivided_sum_ms);
  EXPECT_EQ(a.total_workspace_bytes, b.total_workspace_bytes);
  EXPECT_EQ(a.complete, b.complete);
  EXPECT_EQ(a.ilp.used, b.ilp.used);
  EXPECT_EQ(a.ilp.status, b.ilp.status);
  EXPECT_EQ(a.ilp.gap, b.ilp.gap);
  EXPECT_EQ(a.ilp.variables, b.ilp.variables);
}

TEST(ProtoPlan, RoundTripsCompleteAndPartial) {
  const NetworkPlan complete = CompletePlan();
  const v1::Plan m = ToProto(complete, H100());
  EXPECT_EQ(m.schema_version(), 1u);
  EXPECT_EQ(m.status(), v1::PLAN_STATUS_COMPLETE);
  EXPECT_EQ(m.policy(), v1::BATCH_POLICY_ALL);
  EXPECT_EQ(m.workspace_mode(), v1::WORKSPACE_MODE_TOTAL_SUM);
  EXPECT_EQ(m.workspace_bytes(), 96ull << 20);
  EXPECT_EQ(m.kernels(1).kernel().name(), "res3b/fwd");
  EXPECT_TRUE(m.plan_hash().empty());  // the server's to set
  Result<NetworkPlan> back = FromProto(m);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSamePlan(*back, complete);
  Result<DeviceFingerprint> device = FromProto(m.device());
  ASSERT_TRUE(device.ok());
  EXPECT_EQ(*device, H100());

  NetworkPlan partial = CompletePlan();
  partial.kernels.push_back(MissingKernel());
  partial.kernels.push_back(InfeasibleKernel());
  partial.complete = false;
  partial.ilp = IlpReport();
  const v1::Plan pm = ToProto(partial, Xeon());
  EXPECT_EQ(pm.status(), v1::PLAN_STATUS_PARTIAL);
  // Through the wire format.
  v1::Plan wire;
  ASSERT_TRUE(wire.ParseFromString(pm.SerializeAsString()));
  Result<NetworkPlan> partial_back = FromProto(wire);
  ASSERT_TRUE(partial_back.ok()) << partial_back.status().ToString();
  ExpectSamePlan(*partial_back, partial);

  // No kernels at all is vacuously complete.
  const v1::Plan empty = ToProto(NetworkPlan(), H100());
  EXPECT_EQ(empty.status(), v1::PLAN_STATUS_COMPLETE);
  Result<NetworkPlan> empty_back = FromProto(empty);
  ASSERT_TRUE(empty_back.ok());
  EXPECT_TRUE(empty_back->complete);
  EXPECT_EQ(empty_back->policy, BatchPolicy::kPowerOfTwo);
}

TEST(ProtoSegment, EngineSegmentsRoundTripInAPlan) {
  const Segment engine = EngineSegment(64, "eng12{k3=2}", 0.25, 1 << 20);
  Result<Segment> back = FromProto(ToProto(engine));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, engine);

  // A plan mixing both spaces: engine and legacy segments, an engine undivided baseline.
  KernelPlan mixed = PlannedKernel();
  mixed.config.segments[1] = EngineSegment(64, "eng12{k3=2}", 0.25, 1 << 20);
  mixed.undivided = EngineSegment(256, "eng7", 2.0, 0);
  NetworkPlan plan = CompletePlan();
  plan.kernels[0] = mixed;
  v1::Plan wire;
  ASSERT_TRUE(wire.ParseFromString(ToProto(plan, H100()).SerializeAsString()));
  EXPECT_EQ(wire.kernels(0).segments(1).engine_config(), "eng12{k3=2}");
  EXPECT_EQ(wire.kernels(0).segments(0).engine_config(), "");
  Result<NetworkPlan> plan_back = FromProto(wire);
  ASSERT_TRUE(plan_back.ok()) << plan_back.status().ToString();
  ExpectSamePlan(*plan_back, plan);

  wire.mutable_kernels(0)->mutable_segments(1)->set_algo(0);
  ExpectInvalid(FromProto(wire),
                "kernels[0].segments[1].algo: must be -1 with an engine configuration, got 0");
  wire.mutable_kernels(0)->mutable_segments(1)->set_algo(-1);
  wire.mutable_kernels(0)->mutable_segments(1)->set_engine_config("eng12{}");
  ExpectInvalid(FromProto(wire),
                "kernels[0].segments[1].engine_config: engine configuration 'eng12{}': empty knob "
                "list (write no braces instead)");
}

TEST(ProtoPlan, Invalid) {
  NetworkPlan partial = CompletePlan();
  partial.kernels.push_back(MissingKernel());
  const v1::Plan good_complete = ToProto(CompletePlan(), H100());
  const v1::Plan good_partial = ToProto(partial, H100());
  auto with = [](v1::Plan m, const std::function<void(v1::Plan&)>& change) {
    change(m);
    return FromProto(m);
  };
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_schema_version(0); }),
                "schema_version: required");
  Result<NetworkPlan> newer = with(good_complete, [](auto& m) { m.set_schema_version(2); });
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(newer.status().message(), "schema_version: 2 is newer than this build understands (1)");
  ExpectInvalid(with(good_complete, [](auto& m) { m.clear_device(); }), "device: required");
  ExpectInvalid(with(good_complete, [](auto& m) { m.mutable_device()->set_sm_count(0); }),
                "device.sm_count: must be positive for backend \"cudnn\", got 0");
  ExpectInvalid(
      with(good_complete,
           [](auto& m) { m.mutable_kernels(1)->mutable_kernel()->mutable_problem()->set_c(0); }),
      "kernels[1].kernel.problem.c: must be in [1, 65536], got 0");
  ExpectInvalid(
      with(good_complete, [](auto& m) { m.mutable_kernels(0)->mutable_segments(0)->set_algo(-1); }),
      "kernels[0].segments[0].algo: must be >= 0 without engine_config, got -1");
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_status(v1::PLAN_STATUS_UNSPECIFIED); }),
                "status: required");
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_status(static_cast<v1::PlanStatus>(5)); }),
                "status: unknown value 5");
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_status(v1::PLAN_STATUS_PARTIAL); }),
                "status: PARTIAL, but every kernel is PLANNED");
  ExpectInvalid(with(good_partial, [](auto& m) { m.set_status(v1::PLAN_STATUS_COMPLETE); }),
                "status: COMPLETE, but kernels[2] is KERNEL_PLAN_STATUS_MISSING");
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_policy(static_cast<v1::BatchPolicy>(8)); }),
                "policy: unknown value 8");
  ExpectInvalid(
      with(good_complete, [](auto& m) { m.set_workspace_mode(static_cast<v1::WorkspaceMode>(8)); }),
      "workspace_mode: unknown value 8");
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_workspace_bytes(kMaxWorkspaceBytes + 1); }),
                "workspace_bytes: at most 1 TiB (1099511627776), got 1099511627777");
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_total_time_ms(kNaN); }),
                "total_time_ms: must be finite and >= 0, got nan");
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_total_undivided_ms(-2); }),
                "total_undivided_ms: must be finite and >= 0, got -2.000000");
  ExpectInvalid(with(good_complete, [](auto& m) { m.set_undivided_sum_ms(kNaN); }),
                "undivided_sum_ms: must be finite and >= 0, got nan");
  ExpectInvalid(with(good_complete, [](auto& m) { m.mutable_ilp()->set_variables(-1); }),
                "ilp.variables: must be >= 0, got -1");
  ExpectInvalid(with(good_complete,
                     [](auto& m) {
                       const v1::KernelPlan k = m.kernels(0);
                       m.clear_kernels();
                       for (int i = 0; i < kMaxKernelsPerRequest + 1; ++i) *m.add_kernels() = k;
                     }),
                "kernels: at most 4096 kernels, got 4097");
}

// ---- GetPlanRequest ---------------------------------------------------------------------------

TEST(ProtoPlanRequest, RoundTrips) {
  const PlanRequest r = MakeRequest();
  const v1::GetPlanRequest m = ToProto(r, 2500);
  EXPECT_EQ(m.max_wait_ms(), 2500u);
  EXPECT_EQ(m.policy(), v1::BATCH_POLICY_UNDIVIDED);
  EXPECT_EQ(m.workspace_mode(), v1::WORKSPACE_MODE_TOTAL_SHARED);
  Result<PlanRequest> back = FromProto(m);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->device, r.device);
  EXPECT_EQ(back->kernels, r.kernels);
  EXPECT_EQ(back->policy, r.policy);
  EXPECT_EQ(back->workspace_mode, r.workspace_mode);
  EXPECT_EQ(back->workspace_bytes, r.workspace_bytes);
  EXPECT_EQ(back->ilp_time_limit_s, PlanRequest().ilp_time_limit_s);
  EXPECT_EQ(ToProto(r).max_wait_ms(), 0u);
}

TEST(ProtoPlanRequest, DefaultsAndLimitsThatPass) {
  v1::GetPlanRequest m;
  *m.mutable_device() = ToProto(Xeon());
  v1::Kernel* k = m.add_kernels();
  k->set_mini_batch(32);
  v1::ConvProblem* p = k->mutable_problem();
  p->set_op(v1::CONV_OP_BACKWARD_DATA);
  p->set_c(3);
  p->set_h(224);
  p->set_w(224);
  p->set_k(64);
  p->set_r(7);
  p->set_s(7);
  Result<PlanRequest> r = FromProto(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->policy, BatchPolicy::kPowerOfTwo);
  EXPECT_EQ(r->workspace_mode, WorkspaceMode::kPerKernel);
  EXPECT_EQ(r->workspace_bytes, 0u);  // 0 allows no workspace; it is not a default
  EXPECT_EQ(r->kernels[0].problem.stride_h, 1);
  EXPECT_EQ(r->kernels[0].problem.groups, 1);
  EXPECT_EQ(r->kernels[0].name, "");

  m.set_workspace_bytes(kMaxWorkspaceBytes);
  m.set_max_wait_ms(kMaxWaitMs);
  while (m.kernels_size() < kMaxKernelsPerRequest) *m.add_kernels() = m.kernels(0);
  r = FromProto(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kernels.size(), 4096u);
  EXPECT_EQ(r->workspace_bytes, uint64_t{1} << 40);
}

// Every field of GetPlanRequest that can be wrong, with the exact message the caller sees.
TEST(ProtoPlanRequest, EveryInvalidFieldIsNamed) {
  const v1::GetPlanRequest good = ToProto(MakeRequest(), 1000);
  ASSERT_TRUE(FromProto(good).ok());
  auto with = [&](const std::function<void(v1::GetPlanRequest&)>& change) {
    v1::GetPlanRequest m = good;
    change(m);
    return FromProto(m);
  };
  using R = v1::GetPlanRequest;
  auto problem3 = [](R& m) { return m.mutable_kernels(3)->mutable_problem(); };
  const std::vector<std::pair<std::function<void(R&)>, std::string>> cases = {
      // device
      {[](R& m) { m.clear_device(); }, "device: required"},
      {[](R& m) { m.mutable_device()->set_backend("gpu"); },
       "device.backend: must be \"cudnn\" or \"cpu\", got 'gpu'"},
      {[](R& m) { m.mutable_device()->set_name(""); }, "device.name: required"},
      {[](R& m) { m.mutable_device()->set_name(std::string(257, 'g')); },
       "device.name: at most 256 bytes, got 257"},
      {[](R& m) { m.mutable_device()->set_cc_major(0); },
       "device.cc_major: must be positive for backend \"cudnn\", got 0"},
      {[](R& m) { m.mutable_device()->set_cc_minor(-1); }, "device.cc_minor: must be >= 0, got -1"},
      {[](R& m) { m.mutable_device()->set_sm_count(0); },
       "device.sm_count: must be positive for backend \"cudnn\", got 0"},
      {[](R& m) { m.mutable_device()->set_memory_bytes(0); },
       "device.memory_bytes: must be positive for backend \"cudnn\", got 0"},
      {[](R& m) { m.mutable_device()->set_cudnn_version(0); },
       "device.cudnn_version: must be positive for backend \"cudnn\", got 0"},
      {[](R& m) { m.mutable_device()->set_cuda_runtime_version(-1); },
       "device.cuda_runtime_version: must be >= 0, got -1"},
      {[](R& m) { m.mutable_device()->set_blas(std::string(300, 'b')); },
       "device.blas: at most 256 bytes, got 300"},
      // kernels
      {[](R& m) { m.clear_kernels(); }, "kernels: at least 1 kernel, got 0"},
      {[](R& m) {
         while (m.kernels_size() < 5000) *m.add_kernels() = m.kernels(0);
       },
       "kernels: at most 4096 kernels, got 5000"},
      {[](R& m) { m.mutable_kernels(3)->set_workspace_limit_bytes(kMaxWorkspaceBytes + 1); },
       "kernels[3].workspace_limit_bytes: must be at most 1 TiB, got 1099511627777"},
      {[](R& m) { m.mutable_kernels(3)->clear_problem(); }, "kernels[3].problem: required"},
      {[](R& m) { m.mutable_kernels(3)->set_mini_batch(0); },
       "kernels[3].mini_batch: must be in [1, 65536], got 0"},
      {[](R& m) { m.mutable_kernels(3)->set_mini_batch(65537); },
       "kernels[3].mini_batch: must be in [1, 65536], got 65537"},
      {[](R& m) { m.mutable_kernels(3)->set_mini_batch(-5); },
       "kernels[3].mini_batch: must be in [1, 65536], got -5"},
      {[](R& m) { m.mutable_kernels(3)->set_name(std::string(129, 'n')); },
       "kernels[3].name: at most 128 bytes, got 129"},
      // kernels[i].problem, every field
      {[&](R& m) { problem3(m)->set_op(v1::CONV_OP_UNSPECIFIED); },
       "kernels[3].problem.op: required"},
      {[&](R& m) { problem3(m)->set_op(static_cast<v1::ConvOp>(9)); },
       "kernels[3].problem.op: unknown value 9"},
      {[&](R& m) { problem3(m)->set_c(0); }, "kernels[3].problem.c: must be in [1, 65536], got 0"},
      {[&](R& m) { problem3(m)->set_c(65537); },
       "kernels[3].problem.c: must be in [1, 65536], got 65537"},
      {[&](R& m) { problem3(m)->set_h(0); }, "kernels[3].problem.h: must be in [1, 32768], got 0"},
      {[&](R& m) { problem3(m)->set_h(32769); },
       "kernels[3].problem.h: must be in [1, 32768], got 32769"},
      {[&](R& m) { problem3(m)->set_w(-1); },
       "kernels[3].problem.w: must be in [1, 32768], got -1"},
      {[&](R& m) { problem3(m)->set_w(32769); },
       "kernels[3].problem.w: must be in [1, 32768], got 32769"},
      {[&](R& m) { problem3(m)->set_k(0); }, "kernels[3].problem.k: must be in [1, 65536], got 0"},
      {[&](R& m) { problem3(m)->set_k(1 << 20); },
       "kernels[3].problem.k: must be in [1, 65536], got 1048576"},
      {[&](R& m) { problem3(m)->set_r(0); }, "kernels[3].problem.r: must be in [1, 1024], got 0"},
      {[&](R& m) { problem3(m)->set_r(1025); },
       "kernels[3].problem.r: must be in [1, 1024], got 1025"},
      {[&](R& m) { problem3(m)->set_s(0); }, "kernels[3].problem.s: must be in [1, 1024], got 0"},
      {[&](R& m) { problem3(m)->set_s(1025); },
       "kernels[3].problem.s: must be in [1, 1024], got 1025"},
      {[&](R& m) { problem3(m)->set_pad_h(-1); },
       "kernels[3].problem.pad_h: must be in [0, 2] (below the dilated filter height 3), got -1"},
      {[&](R& m) { problem3(m)->set_pad_h(3); },
       "kernels[3].problem.pad_h: must be in [0, 2] (below the dilated filter height 3), got 3"},
      {[&](R& m) { problem3(m)->set_pad_w(-1); },
       "kernels[3].problem.pad_w: must be in [0, 2] (below the dilated filter width 3), got -1"},
      {[&](R& m) { problem3(m)->set_pad_w(3); },
       "kernels[3].problem.pad_w: must be in [0, 2] (below the dilated filter width 3), got 3"},
      {[&](R& m) { problem3(m)->set_stride_h(-1); },
       "kernels[3].problem.stride_h: must be in [1, 1024], got -1"},
      {[&](R& m) { problem3(m)->set_stride_h(1025); },
       "kernels[3].problem.stride_h: must be in [1, 1024], got 1025"},
      {[&](R& m) { problem3(m)->set_stride_w(-1); },
       "kernels[3].problem.stride_w: must be in [1, 1024], got -1"},
      {[&](R& m) { problem3(m)->set_stride_w(1025); },
       "kernels[3].problem.stride_w: must be in [1, 1024], got 1025"},
      {[&](R& m) { problem3(m)->set_dilation_h(-1); },
       "kernels[3].problem.dilation_h: must be in [1, 1024], got -1"},
      {[&](R& m) { problem3(m)->set_dilation_h(1025); },
       "kernels[3].problem.dilation_h: must be in [1, 1024], got 1025"},
      {[&](R& m) { problem3(m)->set_dilation_w(-1); },
       "kernels[3].problem.dilation_w: must be in [1, 1024], got -1"},
      {[&](R& m) { problem3(m)->set_dilation_w(1025); },
       "kernels[3].problem.dilation_w: must be in [1, 1024], got 1025"},
      {[&](R& m) { problem3(m)->set_groups(-1); },
       "kernels[3].problem.groups: must be in [1, 65536], got -1"},
      {[&](R& m) { problem3(m)->set_groups(65537); },
       "kernels[3].problem.groups: must be in [1, 65536], got 65537"},
      {[&](R& m) { problem3(m)->set_groups(3); },
       "kernels[3].problem.groups: must divide c (64), got 3"},
      {[&](R& m) {
         problem3(m)->set_k(48);
         problem3(m)->set_groups(64);
       },
       "kernels[3].problem.groups: must divide k (48), got 64"},
      {[&](R& m) { problem3(m)->set_data_type(static_cast<v1::DataType>(7)); },
       "kernels[3].problem.data_type: unknown value 7"},
      {[&](R& m) { problem3(m)->set_compute_type(static_cast<v1::DataType>(7)); },
       "kernels[3].problem.compute_type: unknown value 7"},
      {[&](R& m) { problem3(m)->set_layout(static_cast<v1::TensorLayout>(7)); },
       "kernels[3].problem.layout: unknown value 7"},
      {[&](R& m) { problem3(m)->set_math(static_cast<v1::MathMode>(7)); },
       "kernels[3].problem.math: unknown value 7"},
      {[&](R& m) {
         problem3(m)->set_h(1);
         problem3(m)->set_pad_h(0);
       },
       "kernels[3].problem.out_h: must be positive, but h + 2 * pad_h (1) is smaller than the "
       "dilated filter height (3)"},
      {[&](R& m) {
         problem3(m)->set_w(1);
         problem3(m)->set_pad_w(0);
       },
       "kernels[3].problem.out_w: must be positive, but w + 2 * pad_w (1) is smaller than the "
       "dilated filter width (3)"},
      {[&](R& m) {
         problem3(m)->set_c(65536);
         problem3(m)->set_h(32768);
         problem3(m)->set_w(32768);
       },
       "kernels[3].problem.c * h * w: input elements per sample must be at most 68719476736, got "
       "70368744177664"},
      // the rest of the request
      {[](R& m) { m.set_policy(static_cast<v1::BatchPolicy>(4)); }, "policy: unknown value 4"},
      {[](R& m) { m.set_workspace_mode(static_cast<v1::WorkspaceMode>(4)); },
       "workspace_mode: unknown value 4"},
      {[](R& m) { m.set_workspace_bytes(kMaxWorkspaceBytes + 1); },
       "workspace_bytes: at most 1 TiB (1099511627776), got 1099511627777"},
      {[](R& m) { m.set_workspace_bytes(UINT64_MAX); },
       "workspace_bytes: at most 1 TiB (1099511627776), got 18446744073709551615"},
      {[](R& m) { m.set_max_wait_ms(kMaxWaitMs + 1); }, "max_wait_ms: at most 600000, got 600001"},
      {[](R& m) { m.set_max_wait_ms(UINT32_MAX); }, "max_wait_ms: at most 600000, got 4294967295"},
  };
  for (const auto& [change, message] : cases) {
    SCOPED_TRACE(message);
    ExpectInvalid(with(change), message);
  }
  // A valid cpu device needs no GPU fields.
  Result<PlanRequest> cpu = with([](R& m) { *m.mutable_device() = ToProto(Xeon()); });
  EXPECT_TRUE(cpu.ok()) << cpu.status().ToString();
}

// Several wrong fields at once: every one is named, in the order of the message's fields, in one
// deterministic message; under a path when the request is nested in another message.
TEST(ProtoPlanRequest, SeveralInvalidFieldsAreAllNamed) {
  v1::GetPlanRequest m = ToProto(MakeRequest(), 1000);
  m.mutable_device()->set_backend("tpu");
  m.mutable_kernels(0)->mutable_problem()->set_c(0);
  m.mutable_kernels(0)->mutable_problem()->set_stride_w(-2);
  m.mutable_kernels(0)->set_mini_batch(0);
  m.mutable_kernels(2)->clear_problem();
  m.mutable_kernels(3)->mutable_problem()->set_math(static_cast<v1::MathMode>(7));
  m.set_workspace_mode(static_cast<v1::WorkspaceMode>(4));
  m.set_max_wait_ms(kMaxWaitMs + 1);
  const std::string expected =
      "8 invalid fields: device.backend: must be \"cudnn\" or \"cpu\", got 'tpu'; "
      "kernels[0].problem.c: must be in [1, 65536], got 0; "
      "kernels[0].problem.stride_w: must be in [1, 1024], got -2; "
      "kernels[0].mini_batch: must be in [1, 65536], got 0; "
      "kernels[2].problem: required; "
      "kernels[3].problem.math: unknown value 7; "
      "workspace_mode: unknown value 4; "
      "max_wait_ms: at most 600000, got 600001";
  ExpectInvalid(FromProto(m), expected);
  ExpectInvalid(FromProto(m), expected);  // deterministic

  Result<PlanRequest> nested = FromProto(m, "request");
  ASSERT_FALSE(nested.ok());
  const std::string& message = nested.status().message();
  EXPECT_EQ(message.rfind("8 invalid fields: request.device.backend: ", 0), 0u) << message;
  for (const char* field :
       {"request.kernels[0].problem.c:", "request.kernels[0].problem.stride_w:",
        "request.kernels[0].mini_batch:", "request.kernels[2].problem: required",
        "request.kernels[3].problem.math:", "request.workspace_mode:", "request.max_wait_ms:"}) {
    EXPECT_NE(message.find(field), std::string::npos) << field << " in " << message;
  }
  // One wrong field reads as before, also nested.
  v1::GetPlanRequest one = ToProto(MakeRequest(), 1000);
  one.set_policy(static_cast<v1::BatchPolicy>(9));
  ExpectInvalid(FromProto(one, "request"), "request.policy: unknown value 9");
}

TEST(ProtoPlanRequest, ManyInvalidFieldsAreCapped) {
  v1::GetPlanRequest m = ToProto(MakeRequest(), 1000);
  while (m.kernels_size() < 100) *m.add_kernels() = m.kernels(0);
  for (auto& kernel : *m.mutable_kernels()) {
    kernel.set_mini_batch(0);
    kernel.mutable_problem()->set_k(0);
  }
  Result<PlanRequest> r = FromProto(m);
  ASSERT_FALSE(r.ok());
  const std::string& message = r.status().message();
  EXPECT_EQ(message.rfind("200 invalid fields (first 16): kernels[0].problem.k: ", 0), 0u)
      << message;
  EXPECT_NE(message.find("kernels[7].mini_batch"), std::string::npos) << message;
  EXPECT_EQ(message.find("kernels[8]"), std::string::npos) << message;
  size_t entries = 1;
  for (size_t at = message.find("; "); at != std::string::npos; at = message.find("; ", at + 1)) {
    ++entries;
  }
  EXPECT_EQ(entries, kMaxReportedFieldErrors);
}

TEST(FieldErrorsTest, CollectsNestsAndKeepsOtherErrorsFirst) {
  FieldErrors errors;
  EXPECT_TRUE(errors.ok());
  EXPECT_TRUE(errors.ToStatus().ok());
  errors.Add("a", Status::Ok());
  errors.AddField("x", "bad");
  EXPECT_EQ(errors.ToStatus().message(), "x: bad");
  // A joined status contributes each entry under the path, and its count.
  errors.Add("kernels[1].problem", InvalidArgument("2 invalid fields: c: one; h: two"));
  errors.Add("", InvalidArgument("limit: three"));
  EXPECT_EQ(errors.count(), 4u);
  EXPECT_EQ(errors.ToStatus().message(),
            "4 invalid fields: x: bad; kernels[1].problem.c: one; kernels[1].problem.h: two; "
            "limit: three");
  // An error that is not about a field wins: the input could not be judged.
  errors.Add("device", Unavailable("database down"));
  EXPECT_EQ(errors.ToStatus().code(), StatusCode::kUnavailable);
  EXPECT_EQ(FieldPath("", "kernels", 3), "kernels[3]");
  EXPECT_EQ(FieldPath("request", "device"), "request.device");
  EXPECT_EQ(FieldPath("request", ""), "request");
}

TEST(ProtoTiming, SeveralInvalidFieldsAreAllNamed) {
  v1::Timing m;
  m.set_micro_batch(0);
  m.set_algo(-1);
  m.set_status(v1::TIMING_STATUS_OK);
  m.set_time_ms(0);
  m.set_samples(-3);
  ExpectInvalid(FromProto(m),
                "4 invalid fields: micro_batch: must be in [1, 65536], got 0; algo: must be >= 0 "
                "without engine_config, got -1; time_ms: must be positive when status is OK, got "
                "0.000000; samples: must "
                "be >= 0, got -3");
}

TEST(ProtoKernel, SeveralInvalidFieldsAreAllNamed) {
  v1::Kernel m = ToProto(MakeKernel(Resnet3x3(), 256, "x"));
  m.mutable_problem()->set_h(0);
  m.mutable_problem()->set_op(v1::CONV_OP_UNSPECIFIED);
  m.set_name(std::string(kMaxKernelNameBytes + 1, 'n'));
  ExpectInvalid(FromProto(m),
                "3 invalid fields: problem.op: required; problem.h: must be in [1, 32768], got 0; "
                "name: at most 128 bytes, got 129");
}

}  // namespace
}  // namespace ucudnn
