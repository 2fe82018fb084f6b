// A configuration's result checked before its timing is stored (engine/result_check.h): on the
// CPU backend, with a backend that breaks one algorithm's output (a wrong value, an element never
// written), the benchmark records that configuration as a wrong result (kFailed, never planned)
// and times the others as before. No GPU, no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ucudnn/core/dp.h"
#include "ucudnn/engine/benchmark.h"
#include "ucudnn/engine/result_check.h"
#include "worker/worker_test_util.h"

namespace ucudnn::worker {
namespace {

using namespace ucudnn::worker::testing;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;
using ::testing::StartsWith;

enum class Breakage { kNone, kWrongValues, kUnwrittenElement };

// The CPU backend with algorithm 2 broken as `breakage` says (after a correct run: half the output
// scaled, or its last element left as the caller's memory held it).
class BrokenAlgorithmBackend : public RenamedCpuBackend {
 public:
  explicit BrokenAlgorithmBackend(Breakage breakage, bool every_algorithm = false)
      : RenamedCpuBackend("broken cpu"), breakage_(breakage), every_(every_algorithm) {}
  Status Run(const ConvProblem& p, int64_t batch, const Algorithm& algo,
             const ConvOperands& operands, void* workspace, size_t workspace_bytes, float alpha,
             float beta) override {
    void* out = p.op == ConvOp::kForward        ? operands.y
                : p.op == ConvOp::kBackwardData ? operands.dx
                                                : operands.dw;
    const size_t count =
        static_cast<size_t>(p.op == ConvOp::kForward        ? batch * p.output_elements_per_sample()
                            : p.op == ConvOp::kBackwardData ? batch * p.input_elements_per_sample()
                                                            : p.filter_elements());
    // Only algorithm 2 (or every one) on the problem's own data breaks: the fp32 reference runs
    // algorithm 0 in FMA math.
    const bool broken =
        (algo.id == 2 || every_) && p.data_type == DataType::kFloat32 && p.math != MathMode::kFma;
    float* values = static_cast<float*>(out);
    const float last = broken ? values[count - 1] : 0.0f;
    UCUDNN_RETURN_IF_ERROR(
        RenamedCpuBackend::Run(p, batch, algo, operands, workspace, workspace_bytes, alpha, beta));
    if (!broken) return Status::Ok();
    if (breakage_ == Breakage::kWrongValues) {
      for (size_t i = 0; i < count / 2; ++i) values[i] *= 1.5f;
    } else if (breakage_ == Breakage::kUnwrittenElement) {
      values[count - 1] = last;
    }
    return Status::Ok();
  }

 private:
  Breakage breakage_;
  bool every_;
};

BenchmarkOptions CheckedOptions() {
  BenchmarkOptions o = FastBenchmarkOptions();
  o.check_results = true;
  return o;
}

void ExpectOnlyAlgorithmTwoWrong(const TimingTable& table) {
  int wrong = 0;
  for (const Timing& t : table.entries) {
    if (t.algo == 2) {
      EXPECT_EQ(t.status, TimingStatus::kFailed) << t.micro_batch;
      EXPECT_THAT(t.error, StartsWith(std::string(kWrongResultError))) << t.error;
      EXPECT_THAT(t.error, HasSubstr("against the fp32 reference (bound 1e-02), which 2 other"));
      ++wrong;
    } else {
      EXPECT_EQ(t.status, TimingStatus::kOk) << t.algo << " " << t.error;
      EXPECT_GT(t.time_ms, 0);
    }
  }
  EXPECT_GT(wrong, 0);
}

TEST(ResultCheckTest, AWrongConfigurationIsStoredFailedAndNeverPlanned) {
  for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    SCOPED_TRACE(std::string(ToString(op)));
    BrokenAlgorithmBackend backend(Breakage::kWrongValues);
    Result<TimingTable> table =
        BenchmarkProblem(backend, TinyProblem(op, 4), 4, BatchPolicy::kAll, CheckedOptions());
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    ExpectOnlyAlgorithmTwoWrong(*table);
    // The planner never picks it: only kOk timings are candidates.
    for (const Timing& t : table->entries) {
      if (t.status != TimingStatus::kOk) {
        EXPECT_EQ(t.algo, 2);
      }
    }
  }
}

TEST(ResultCheckTest, AnElementNeverWrittenIsAWrongResult) {
  BrokenAlgorithmBackend backend(Breakage::kUnwrittenElement);
  Result<TimingTable> table = BenchmarkProblem(backend, TinyProblem(ConvOp::kForward, 4), 2,
                                               BatchPolicy::kAll, CheckedOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ExpectOnlyAlgorithmTwoWrong(*table);
}

// Every configuration off the reference: the reference (or its bound) is what is in doubt, and
// no configuration is marked wrong.
TEST(ResultCheckTest, NothingIsMarkedWhenNoConfigurationAgreesWithTheReference) {
  BrokenAlgorithmBackend backend(Breakage::kWrongValues, /*every_algorithm=*/true);
  Result<TimingTable> table = BenchmarkProblem(backend, TinyProblem(ConvOp::kForward, 4), 2,
                                               BatchPolicy::kAll, CheckedOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  for (const Timing& t : table->entries) EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
}

TEST(ResultCheckTest, CorrectConfigurationsPassInEveryPrecisionAndIn3d) {
  ConvProblem three_d = TinyProblem(ConvOp::kBackwardFilter, 4);
  three_d.d = 5;
  three_d.t = 3;
  three_d.pad_d = 1;
  for (ConvProblem p : {TinyProblem(ConvOp::kForward, 4), three_d}) {
    for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
      p.data_type = type;
      p.math = type == DataType::kFloat32 ? MathMode::kDefault : MathMode::kTensorOp;
      BrokenAlgorithmBackend backend(Breakage::kNone);
      Result<TimingTable> table =
          BenchmarkProblem(backend, p, 2, BatchPolicy::kAll, CheckedOptions());
      ASSERT_TRUE(table.ok()) << table.status().ToString();
      for (const Timing& t : table->entries) {
        EXPECT_EQ(t.status, TimingStatus::kOk) << CanonicalKey(p) << " " << t.error;
      }
    }
  }
}

TEST(ResultCheckTest, BoundsFollowThePrecision) {
  ConvProblem p = TinyProblem(ConvOp::kForward, 4);
  EXPECT_EQ(ResultBound(p), 1e-2);  // fp32 that may use TF32
  p.math = MathMode::kFma;
  EXPECT_EQ(ResultBound(p), 1e-3);
  p.data_type = DataType::kFloat16;
  EXPECT_EQ(ResultBound(p), 2e-2);
  p.data_type = DataType::kBFloat16;
  EXPECT_EQ(ResultBound(p), 3e-2);
  EXPECT_EQ(RelativeL2({1, 2}, {1, 2}), 0.0);
  EXPECT_TRUE(std::isinf(RelativeL2({1, NAN}, {1, 2})));
  EXPECT_NEAR(RelativeL2({0, 0}, {3, 4}), 1.0, 1e-12);
}

}  // namespace
}  // namespace ucudnn::worker
