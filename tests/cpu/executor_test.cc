#include "ucudnn/core/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/conv_reference.h"
#include "ucudnn/core/cpu_backend.h"
#include "ucudnn/core/random_fill.h"

namespace ucudnn {
namespace {

using testing::RandomSmallProblem;
using testing::SizesOf;

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
  Result<size_t> WorkspaceSize(const ConvProblem& p, int64_t batch, int algo) override {
    return cpu_.WorkspaceSize(p, batch, algo);
  }
  Status Run(const ConvProblem& p, int64_t batch, int algo, const ConvOperands& o, void* ws,
             size_t ws_bytes, float alpha, float beta) override {
    calls.push_back({batch, algo, o, alpha, beta});
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
  Result<std::vector<double>> TimeRuns(const ConvProblem& p, int64_t batch, int algo,
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

  ConvOperands Operands(ConvOp op) {
    ConvOperands o;
    switch (op) {
      case ConvOp::kForward:
        o.x = a.data();
        o.w = b.data();
        o.y = out.data();
        break;
      case ConvOp::kBackwardData:
        o.dy = a.data();
        o.w = b.data();
        o.dx = out.data();
        break;
      case ConvOp::kBackwardFilter:
        o.x = a.data();
        o.dy = b.data();
        o.dw = out.data();
        break;
    }
    return o;
  }
};

std::vector<float> Random(size_t count, uint64_t seed) {
  std::vector<float> v(count);
  GenerateRandom(v.data(), count, DataType::kFloat32, seed);
  return v;
}

OpData MakeData(const ConvProblem& p, int64_t batch, uint64_t seed) {
  const testing::TensorSizes s = SizesOf(p, batch);
  switch (p.op) {
    case ConvOp::kForward:
      return {Random(s.x, seed), Random(s.w, seed + 1), Random(s.y, seed + 2)};
    case ConvOp::kBackwardData:
      return {Random(s.y, seed), Random(s.w, seed + 1), Random(s.x, seed + 2)};
    case ConvOp::kBackwardFilter:
      return {Random(s.x, seed), Random(s.y, seed + 1), Random(s.w, seed + 2)};
  }
  return {};
}

std::vector<Segment> Segments(std::initializer_list<std::pair<int64_t, int>> sizes_and_algos) {
  std::vector<Segment> segments;
  for (const auto& [size, algo] : sizes_and_algos) segments.push_back({size, algo, 0.0, 0});
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

double NormalizedL2(const std::vector<float>& got, const std::vector<float>& want) {
  return testing::RelativeL2(got, want);
}

constexpr int64_t kMiniBatch = 7;

std::vector<std::vector<Segment>> SegmentLists() {
  return {
      Segments({{7, kCpuAlgoIm2colGemm}}),
      Segments({{1, kCpuAlgoDirect}, {2, kCpuAlgoIm2colGemm}, {4, kCpuAlgoIm2colGemmPerSample}}),
      Segments({{4, kCpuAlgoIm2colGemm}, {3, kCpuAlgoDirect}}),
      Segments({{1, 1}, {1, 2}, {1, 0}, {1, 1}, {1, 2}, {1, 0}, {1, 1}}),
      Segments({{2, kCpuAlgoIm2colGemm},
                {2, kCpuAlgoIm2colGemm},
                {2, kCpuAlgoIm2colGemm},
                {1, kCpuAlgoIm2colGemm}}),
      Segments({{5, kCpuAlgoIm2colGemmPerSample}, {2, kCpuAlgoDirect}}),
  };
}

class ExecutorEquivalenceTest : public ::testing::TestWithParam<ConvOp> {};

// Micro-batched execution gives the undivided result, for forward and backward-data (disjoint
// output slices) and backward-filter (accumulation, beta = 1 after the first segment).
TEST_P(ExecutorEquivalenceTest, MicroBatchedEqualsUndivided) {
  const ConvOp op = GetParam();
  RecordingBackend backend;
  std::mt19937_64 rng(42 + static_cast<int>(op));
  for (int trial = 0; trial < 6; ++trial) {
    const ConvProblem p = RandomSmallProblem(op, rng);
    const float alpha = trial % 2 == 0 ? 1.0f : 0.75f;
    const float beta = trial % 3 == 0 ? 0.0f : (trial % 3 == 1 ? 1.0f : -0.5f);
    const OpData data = MakeData(p, kMiniBatch, 100 + trial);

    OpData undivided = data;
    ASSERT_TRUE(
        backend.Run(p, kMiniBatch, kCpuAlgoDirect, undivided.Operands(op), nullptr, 0, alpha, beta)
            .ok());
    for (const std::vector<Segment>& segments : SegmentLists()) {
      SCOPED_TRACE(CanonicalKey(p) + " segments=" + std::to_string(segments.size()) +
                   " beta=" + std::to_string(beta));
      OpData micro = data;
      const size_t ws_bytes = LargestWorkspace(backend, p, segments);
      std::vector<char> workspace(ws_bytes);
      backend.calls.clear();
      Status st = ExecuteMicroBatched(backend, p, kMiniBatch, segments, micro.Operands(op),
                                      workspace.data(), ws_bytes, alpha, beta);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(backend.calls.size(), segments.size());
      EXPECT_LT(NormalizedL2(micro.out, undivided.out), 1e-6);
      // What each segment got: its own size and algorithm, and the right beta.
      for (size_t i = 0; i < segments.size(); ++i) {
        EXPECT_EQ(backend.calls[i].batch, segments[i].micro_batch);
        EXPECT_EQ(backend.calls[i].algo, segments[i].algo);
        EXPECT_EQ(backend.calls[i].alpha, alpha);
        const float want_beta = (op == ConvOp::kBackwardFilter && i > 0) ? 1.0f : beta;
        EXPECT_EQ(backend.calls[i].beta, want_beta);
      }
    }
  }
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
                    "data_type", d);
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
