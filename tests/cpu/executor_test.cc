#include "ucudnn/core/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/conv_reference.h"
#include "support/operands.h"
#include "ucudnn/backends/cpu_backend.h"

namespace ucudnn {
namespace {

using test_support::BindOperands;
using test_support::RandomVector;
using testing::RandomSmallProblem;
using testing::ReferenceConv;
using testing::RelativeL2;

// Delegates to a CpuBackend and records every Run, to see what the executor issued.
class RecordingBackend : public ConvBackend {
 public:
  struct Call {
    int64_t batch;
    int algo;
    ConvOperands operands;
    float alpha, beta;
  };

  const DeviceFingerprint& fingerprint() const override { return cpu_.fingerprint(); }
  std::vector<AlgorithmInfo> Algorithms(ConvOp op) const override { return cpu_.Algorithms(op); }
  Result<size_t> WorkspaceSize(const ConvProblem& p, int64_t batch,
                               const Algorithm& algo) override {
    return cpu_.WorkspaceSize(p, batch, algo);
  }
  Status Run(const ConvProblem& p, int64_t batch, const Algorithm& algo, const ConvOperands& o,
             void* ws, size_t ws_bytes, float alpha, float beta) override {
    calls.push_back({batch, algo.id, o, alpha, beta});
    return cpu_.Run(p, batch, algo, o, ws, ws_bytes, alpha, beta);
  }
  Status Synchronize() override { return cpu_.Synchronize(); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override {
    return cpu_.Allocate(bytes);
  }
  Status CopyToDevice(void* d, const void* h, size_t n) override {
    return cpu_.CopyToDevice(d, h, n);
  }
  Status CopyToHost(void* h, const void* d, size_t n) override { return cpu_.CopyToHost(h, d, n); }
  Result<std::vector<double>> TimeRuns(const ConvProblem& p, int64_t batch, const Algorithm& algo,
                                       const ConvOperands& o, void* ws, size_t ws_bytes, int warmup,
                                       int runs) override {
    return cpu_.TimeRuns(p, batch, algo, o, ws, ws_bytes, warmup, runs);
  }

  std::vector<Call> calls;

 private:
  CpuBackend cpu_;
};

// The tensors of one op at a mini-batch: two random inputs and a random initial output.
struct OpData {
  std::vector<float> a, b, out;

  ConvOperands Operands(ConvOp op) { return BindOperands(op, a.data(), b.data(), out.data()); }
};

OpData MakeData(const ConvProblem& p, int64_t batch, uint64_t seed) {
  const test_support::OpTensorSizes s = test_support::OpSizes(p, batch);
  return {RandomVector(s.first_input, seed), RandomVector(s.second_input, seed + 1),
          RandomVector(s.output, seed + 2)};
}

std::vector<Segment> Segments(std::initializer_list<std::pair<int64_t, int>> sizes_and_algos) {
  std::vector<Segment> segments;
  for (const auto& [size, algo] : sizes_and_algos) segments.push_back({size, algo, 0.0, 0, {}});
  return segments;
}

size_t LargestWorkspace(ConvBackend& backend, const ConvProblem& p,
                        const std::vector<Segment>& segments) {
  size_t largest = 0;
  for (const Segment& s : segments) {
    largest = std::max(largest, *backend.WorkspaceSize(p, s.micro_batch, s.algo));
  }
  return largest;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kGuard = 12345.0f;  // written past the end of outputs to catch overruns
constexpr size_t kGuardElements = 32;

// A random partition of `mini_batch` into 1 to 8 segments (never more than the samples), each
// with a random algorithm.
std::vector<Segment> RandomSegments(int64_t mini_batch, std::mt19937_64& rng) {
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t count = uniform(1, std::min<int64_t>(mini_batch, 8));
  std::vector<int64_t> cuts = {0, mini_batch};
  while (static_cast<int64_t>(cuts.size()) < count + 1) {
    const int64_t cut = uniform(1, mini_batch - 1);
    if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<Segment> segments;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    segments.push_back(
        {cuts[i + 1] - cuts[i], static_cast<int>(uniform(0, kCpuAlgoCount - 1)), 0.0, 0, {}});
  }
  return segments;
}

std::string Describe(const std::vector<Segment>& segments) {
  std::string out;
  for (const Segment& s : segments) {
    out +=
        (out.empty() ? "" : " + ") + std::to_string(s.micro_batch) + "@" + std::to_string(s.algo);
  }
  return out;
}

// The output tensor of an op, with guard elements after it.
struct Output {
  std::vector<float> data;
  size_t size = 0;
  std::vector<float> Values() const {
    return {data.begin(), data.begin() + static_cast<std::ptrdiff_t>(size)};
  }
  bool GuardIntact() const {
    for (size_t i = size; i < data.size(); ++i) {
      if (data[i] != kGuard) return false;
    }
    return true;
  }
};

// `initial`, or NaN everywhere when beta is 0 (the op must not read it, and an element it does
// not write stays NaN and fails the comparison), then the guard.
Output MakeOutput(const std::vector<float>& initial, float beta) {
  Output out;
  out.size = initial.size();
  out.data = beta == 0.0f ? std::vector<float>(initial.size(), kNaN) : initial;
  out.data.resize(initial.size() + kGuardElements, kGuard);
  return out;
}

ConvOperands WithOutput(ConvOp op, OpData& inputs, Output& out) {
  ConvOperands o = inputs.Operands(op);
  switch (op) {
    case ConvOp::kForward:
      o.y = out.data.data();
      break;
    case ConvOp::kBackwardData:
      o.dx = out.data.data();
      break;
    case ConvOp::kBackwardFilter:
      o.dw = out.data.data();
      break;
  }
  return o;
}

constexpr int kTrialsPerOp = 90;  // each (alpha, beta) pair ten times; well under a second

class ExecutorEquivalenceTest : public ::testing::TestWithParam<ConvOp> {};

// For random problems (strides, padding, dilation, groups), random mini-batches and random
// segmentations with a random algorithm per segment, micro-batched execution gives the undivided
// result (normalized L2 < 1e-6) and the float64 reference (< 1e-5), for forward and
// backward-data (disjoint output slices) and backward-filter (accumulation, beta = 1 after the
// first segment), with alpha and beta honoured. Outputs are NaN-poisoned when beta is 0 and
// guarded past their end.
TEST_P(ExecutorEquivalenceTest, MicroBatchedEqualsUndividedAndTheReference) {
  const ConvOp op = GetParam();
  RecordingBackend backend;
  std::mt19937_64 rng(20240611 + static_cast<int>(op));
  constexpr float kAlphas[] = {1.0f, 0.75f, -2.0f};
  constexpr float kBetas[] = {0.0f, 1.0f, -0.5f};
  int segmented_trials = 0;
  for (int trial = 0; trial < kTrialsPerOp; ++trial) {
    const ConvProblem p = RandomSmallProblem(op, rng);
    const int64_t mini_batch = std::uniform_int_distribution<int64_t>(1, 24)(rng);
    const std::vector<Segment> segments = RandomSegments(mini_batch, rng);
    const int undivided_algo = std::uniform_int_distribution<int>(0, kCpuAlgoCount - 1)(rng);
    const float alpha = kAlphas[trial % 3];
    const float beta = kBetas[(trial / 3) % 3];
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + CanonicalKey(p) +
                 " mini_batch=" + std::to_string(mini_batch) + " segments=" + Describe(segments) +
                 " undivided algo=" + std::to_string(undivided_algo) +
                 " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta));
    if (segments.size() > 1) ++segmented_trials;
    OpData data = MakeData(p, mini_batch, 1000 + static_cast<uint64_t>(trial) * 7);

    // Undivided: one call over the whole mini-batch.
    Output undivided = MakeOutput(data.out, beta);
    {
      const size_t ws_bytes = *backend.WorkspaceSize(p, mini_batch, undivided_algo);
      std::vector<char> workspace(ws_bytes);
      ASSERT_TRUE(backend
                      .Run(p, mini_batch, undivided_algo, WithOutput(op, data, undivided),
                           workspace.data(), ws_bytes, alpha, beta)
                      .ok());
    }

    // Micro-batched, in a workspace of exactly the largest segment's size.
    Output micro = MakeOutput(data.out, beta);
    const size_t ws_bytes = LargestWorkspace(backend, p, segments);
    std::vector<char> workspace(ws_bytes);
    backend.calls.clear();
    Status st = ExecuteMicroBatched(backend, p, mini_batch, segments, WithOutput(op, data, micro),
                                    workspace.data(), ws_bytes, alpha, beta);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(micro.GuardIntact());
    EXPECT_TRUE(undivided.GuardIntact());
    EXPECT_LT(RelativeL2(micro.Values(), undivided.Values()), 1e-6);

    // Both against alpha * reference + beta * initial, in float64.
    std::vector<double> want = ReferenceConv(p, mini_batch, data.a, data.b);
    ASSERT_EQ(want.size(), data.out.size());
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] = double{alpha} * want[i] + (beta == 0.0f ? 0.0 : double{beta} * data.out[i]);
    }
    EXPECT_LT(RelativeL2(micro.Values(), want), 1e-5);
    EXPECT_LT(RelativeL2(undivided.Values(), want), 1e-5);

    // What each segment got: its own size and algorithm, alpha, and the right beta.
    ASSERT_EQ(backend.calls.size(), segments.size());
    for (size_t i = 0; i < segments.size(); ++i) {
      EXPECT_EQ(backend.calls[i].batch, segments[i].micro_batch);
      EXPECT_EQ(backend.calls[i].algo, segments[i].algo);
      EXPECT_EQ(backend.calls[i].alpha, alpha);
      const float want_beta = (op == ConvOp::kBackwardFilter && i > 0) ? 1.0f : beta;
      EXPECT_EQ(backend.calls[i].beta, want_beta);
    }
  }
  // The random segmentations did split most mini-batches.
  EXPECT_GE(segmented_trials, kTrialsPerOp / 2);
}

INSTANTIATE_TEST_SUITE_P(AllOps, ExecutorEquivalenceTest,
                         ::testing::Values(ConvOp::kForward, ConvOp::kBackwardData,
                                           ConvOp::kBackwardFilter),
                         [](const auto& info) { return std::string(ToString(info.param)); });

TEST(ExecutorTest, OffsetsOperandsBySamplesDone) {
  RecordingBackend backend;
  ConvProblem p;
  p.op = ConvOp::kForward;
  p.c = 3;
  p.h = p.w = 5;
  p.k = 2;
  p.r = p.s = 3;  // output 2 x 3 x 3
  OpData data = MakeData(p, 6, 9);
  const ConvOperands ops = data.Operands(p.op);
  const auto segments = Segments({{1, 0}, {3, 0}, {2, 0}});
  ASSERT_TRUE(ExecuteMicroBatched(backend, p, 6, segments, ops, nullptr, 0, 1.0f, 0.0f).ok());
  ASSERT_EQ(backend.calls.size(), 3u);
  const int64_t starts[] = {0, 1, 4};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(backend.calls[i].operands.x,
              static_cast<const float*>(ops.x) + starts[i] * p.input_elements_per_sample());
    EXPECT_EQ(backend.calls[i].operands.y,
              static_cast<float*>(ops.y) + starts[i] * p.output_elements_per_sample());
    EXPECT_EQ(backend.calls[i].operands.w, ops.w);  // the filter is shared
  }
}

TEST(ExecutorTest, TimedRunsWalkTheSlicesTheOperandsHold) {
  ConvProblem p;
  p.op = ConvOp::kBackwardData;
  p.c = 3;
  p.h = p.w = 5;
  p.k = 2;
  p.r = p.s = 3;
  OpData data = MakeData(p, 7, 9);
  ConvOperands ops = data.Operands(p.op);
  // Without the sample count, or with no more samples than the run's batch: always the start.
  for (int64_t samples : {0, 2, 3}) {
    ops.samples = samples;
    for (int64_t run : {0, 1, 5}) {
      EXPECT_EQ(TimedRunOperands(p, ops, 2, run).dy, ops.dy) << samples << " " << run;
    }
  }
  // 7 samples hold three slices of 2: runs 0, 1, 2, 3 start at samples 0, 2, 4, 0.
  ops.samples = 7;
  const int64_t starts[] = {0, 2, 4, 0};
  for (int64_t run = 0; run < 4; ++run) {
    const ConvOperands slice = TimedRunOperands(p, ops, 2, run);
    EXPECT_EQ(slice.dy,
              static_cast<const float*>(ops.dy) + starts[run] * p.output_elements_per_sample());
    EXPECT_EQ(slice.dx, static_cast<float*>(ops.dx) + starts[run] * p.input_elements_per_sample());
    EXPECT_EQ(slice.w, ops.w);  // the filter is shared
  }
}

// Every bad request is refused before anything runs, and the output keeps its contents.
TEST(ExecutorTest, RejectsBadRequestsWithoutTouchingTheOutput) {
  RecordingBackend backend;
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    ConvProblem p;
    p.op = op;
    p.c = 4;
    p.h = p.w = 6;
    p.k = 4;
    p.r = p.s = 3;
    p.pad_h = p.pad_w = 1;
    p.groups = 2;
    const OpData data = MakeData(p, 4, 5);
    const auto good = Segments({{2, kCpuAlgoIm2colGemm}, {2, kCpuAlgoDirect}});
    const size_t ws_bytes = LargestWorkspace(backend, p, good);
    ASSERT_GT(ws_bytes, 0u);
    std::vector<char> workspace(ws_bytes);

    auto expect_rejected = [&](const std::vector<Segment>& segments, ConvOperands ops, void* ws,
                               size_t bytes, const ConvProblem& problem, StatusCode code,
                               const std::string& field, const OpData& copy) {
      SCOPED_TRACE(std::string(ToString(op)) + " expecting " + field);
      backend.calls.clear();
      Status st = ExecuteMicroBatched(backend, problem, 4, segments, ops, ws, bytes, 1.0f, 0.0f);
      EXPECT_EQ(st.code(), code) << st.ToString();
      EXPECT_NE(st.message().find(field), std::string::npos) << st.ToString();
      EXPECT_TRUE(backend.calls.empty());
      EXPECT_EQ(copy.out, data.out);
    };

    OpData d = data;
    const ConvOperands ops = d.Operands(op);
    expect_rejected({}, ops, workspace.data(), ws_bytes, p, StatusCode::kInvalidArgument,
                    "segments", d);
    expect_rejected(Segments({{2, 1}, {1, 0}}), ops, workspace.data(), ws_bytes, p,
                    StatusCode::kInvalidArgument, "sum", d);
    expect_rejected(Segments({{2, 1}, {2, 0}, {1, 0}}), ops, workspace.data(), ws_bytes, p,
                    StatusCode::kInvalidArgument, "sum", d);
    expect_rejected(Segments({{2, 1}, {0, 0}, {2, 0}}), ops, workspace.data(), ws_bytes, p,
                    StatusCode::kInvalidArgument, "segments[1].micro_batch", d);
    expect_rejected(Segments({{6, 1}, {-2, 0}}), ops, workspace.data(), ws_bytes, p,
                    StatusCode::kInvalidArgument, "micro_batch", d);
    expect_rejected(Segments({{2, 1}, {2, 7}}), ops, workspace.data(), ws_bytes, p,
                    StatusCode::kInvalidArgument, "segments[1]", d);
    // The whole-batch im2col at 4 samples needs more than the plan's largest segment.
    expect_rejected(Segments({{4, kCpuAlgoIm2colGemm}}), ops, workspace.data(), ws_bytes, p,
                    StatusCode::kInvalidArgument, "workspace_bytes", d);
    expect_rejected(good, ops, workspace.data(), ws_bytes - 1, p, StatusCode::kInvalidArgument,
                    "workspace_bytes", d);
    expect_rejected(good, ops, nullptr, ws_bytes, p, StatusCode::kInvalidArgument, "workspace", d);
    ConvProblem fp16 = p;
    fp16.data_type = fp16.compute_type = DataType::kFloat16;
    expect_rejected(good, ops, workspace.data(), ws_bytes, fp16, StatusCode::kUnsupported,
                    "compute_type", d);
    ConvProblem invalid = p;
    invalid.groups = 3;
    expect_rejected(good, ops, workspace.data(), ws_bytes, invalid, StatusCode::kInvalidArgument,
                    "groups", d);

    // Each operand the op needs, missing in turn.
    const char* names[] = {"x", "w", "dy", "y", "dx", "dw"};
    for (int missing = 0; missing < 6; ++missing) {
      ConvOperands holed = ops;
      const void** slots[] = {&holed.x, &holed.w, &holed.dy};
      void** out_slots[] = {&holed.y, &holed.dx, &holed.dw};
      const bool was_set =
          missing < 3 ? *slots[missing] != nullptr : *out_slots[missing - 3] != nullptr;
      if (!was_set) continue;
      if (missing < 3) {
        *slots[missing] = nullptr;
      } else {
        *out_slots[missing - 3] = nullptr;
      }
      expect_rejected(good, holed, workspace.data(), ws_bytes, p, StatusCode::kInvalidArgument,
                      std::string("operands.") + names[missing], d);
    }

    // And the good plan runs.
    backend.calls.clear();
    EXPECT_TRUE(
        ExecuteMicroBatched(backend, p, 4, good, ops, workspace.data(), ws_bytes, 1.0f, 0.0f).ok());
    EXPECT_EQ(backend.calls.size(), 2u);
  }
}

TEST(ExecutorTest, RejectsABadMiniBatch) {
  RecordingBackend backend;
  ConvProblem p;
  p.c = p.k = 1;
  p.h = p.w = p.r = p.s = 1;
  std::vector<float> x(1, 1.0f), w(1, 1.0f), y(1, 2.0f);
  ConvOperands ops;
  ops.x = x.data();
  ops.w = w.data();
  ops.y = y.data();
  Status st = ExecuteMicroBatched(backend, p, 0, Segments({{1, 0}}), ops, nullptr, 0, 1, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend.calls.empty());
  EXPECT_EQ(y[0], 2.0f);
}

}  // namespace
}  // namespace ucudnn
