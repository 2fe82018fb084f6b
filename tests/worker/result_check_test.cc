// The results a plan could use checked before the timings are stored (engine/result_check.h): on
// the CPU backend, with a backend that breaks one algorithm's output (a wrong value, an element
// never written), the benchmark records that configuration as a wrong result (kFailed, never
// planned) where it is on its size's time/workspace front, and times the others as before. No
// GPU, no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/random_fill.h"
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
// scaled, or its last element left as the caller's memory held it). Algorithm 2's times are
// reported 100x faster (on every size's front: a plan would choose it) unless `broken_is_slow`,
// then 100x slower, so that another that needs no more workspace beats it.
class BrokenAlgorithmBackend : public RenamedCpuBackend {
 public:
  explicit BrokenAlgorithmBackend(Breakage breakage, bool every_algorithm = false,
                                  bool broken_is_slow = false)
      : RenamedCpuBackend("broken cpu"),
        breakage_(breakage),
        every_(every_algorithm),
        scale_(broken_is_slow ? 100.0 : 0.01) {}
  // Timed runs go to the inner backend (not through Run() below): only checks and references
  // call Run().
  Result<std::vector<double>> TimeRuns(const ConvProblem& p, int64_t batch, const Algorithm& algo,
                                       const ConvOperands& operands, void* workspace,
                                       size_t workspace_bytes, int warmup, int runs) override {
    UCUDNN_ASSIGN_OR_RETURN(std::vector<double> times,
                            RenamedCpuBackend::TimeRuns(p, batch, algo, operands, workspace,
                                                        workspace_bytes, warmup, runs));
    if (algo.id == 2) {
      for (double& ms : times) ms *= scale_;
    }
    return times;
  }
  int checked_runs_of_algorithm_two() const { return checked_runs_; }
  int checked_runs() const { return all_checked_runs_; }
  // Samples the fp32 reference ran over, summed over its runs.
  int64_t reference_samples() const { return reference_samples_; }
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
    checked_runs_ += algo.id == 2 && p.math != MathMode::kFma;  // not the fp32 reference
    all_checked_runs_ += p.math != MathMode::kFma;
    reference_samples_ += p.math == MathMode::kFma ? batch : 0;
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
  double scale_;
  int checked_runs_ = 0;
  int all_checked_runs_ = 0;
  int64_t reference_samples_ = 0;
};

// The broken backend with device numerics (ConvBackend::WidenToFloat, DifferenceNorms) computed
// on the host as a device would, or lying: norms of zero whatever the vectors hold.
class DeviceNumericsBackend : public BrokenAlgorithmBackend {
 public:
  explicit DeviceNumericsBackend(bool lying)
      : BrokenAlgorithmBackend(Breakage::kWrongValues), lying_(lying) {}
  Status WidenToFloat(void* dst, const void* src, DataType type, size_t count) override {
    ++widened_;
    const std::vector<float> values = ToFloat(src, count, type);  // CPU "device" memory
    std::copy(values.begin(), values.end(), static_cast<float*>(dst));
    return Status::Ok();
  }
  Result<std::pair<double, double>> DifferenceNorms(const void* got, DataType type,
                                                    const void* want, size_t count) override {
    ++norms_;
    if (lying_) return std::pair<double, double>{0.0, 1.0};
    const std::vector<float> values = ToFloat(got, count, type);
    const float* reference = static_cast<const float*>(want);
    double difference = 0, norm = 0;
    for (size_t i = 0; i < count; ++i) {
      difference += (values[i] - reference[i]) * static_cast<double>(values[i] - reference[i]);
      norm += reference[i] * static_cast<double>(reference[i]);
    }
    return std::pair<double, double>{difference, norm};
  }
  int widened() const { return widened_; }
  int norms() const { return norms_; }

 private:
  bool lying_;
  int widened_ = 0;
  int norms_ = 0;
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
      EXPECT_THAT(t.error, HasSubstr("against the fp32 reference (bound 1e-02), which "));
      EXPECT_THAT(t.error, HasSubstr("other configuration(s) meet"));
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
    // One reference where the output is per sample (each size's is a prefix of the largest's);
    // a backward-filter's grows with the sizes checked
    // (ABackwardFilterReferenceGrowsWithTheSizesChecked).
    if (op != ConvOp::kBackwardFilter) {
      EXPECT_EQ(backend.reference_samples(), 4);
    }
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

// A plan takes, at each workspace limit, the fastest configuration that fits: one that another
// beats with no more workspace is never planned, so it is not checked (a check at a large size
// costs as much as its measurement), and its timing is stored as measured.
TEST(ResultCheckTest, OnlyTheConfigurationsAPlanCouldUseAreChecked) {
  BrokenAlgorithmBackend backend(Breakage::kWrongValues, /*every_algorithm=*/false,
                                 /*broken_is_slow=*/true);
  Result<TimingTable> table = BenchmarkProblem(backend, TinyProblem(ConvOp::kForward, 4), 4,
                                               BatchPolicy::kAll, CheckedOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(backend.checked_runs_of_algorithm_two(), 0);
  for (const Timing& t : table->entries) {
    EXPECT_EQ(t.status, TimingStatus::kOk) << t.algo << " " << t.error;
  }
  // On every size's front (the fastest), the same configuration is checked once, at the largest
  // size, and blocked at every size.
  BrokenAlgorithmBackend fast(Breakage::kWrongValues);
  table = BenchmarkProblem(fast, TinyProblem(ConvOp::kForward, 4), 4, BatchPolicy::kAll,
                           CheckedOptions());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(fast.checked_runs_of_algorithm_two(), 1);
  ExpectOnlyAlgorithmTwoWrong(*table);
  for (const Timing& t : table->entries) {
    if (t.algo == 2) {
      EXPECT_THAT(t.error, HasSubstr("at micro-batch 4 against")) << t.error;
    }
  }
}

// A backend's device numerics stand in for the host's round trip (inputs widened there, two
// norms back per check), and one that lies (norms of zero: every result "right") is caught at
// the problem's first check and not used: the wrong configuration is still blocked.
TEST(ResultCheckTest, DeviceNumericsAreUsedWhereTheyAgreeWithTheHost) {
  for (bool lying : {false, true}) {
    SCOPED_TRACE(lying ? "lying device numerics" : "device numerics");
    DeviceNumericsBackend backend(lying);
    Result<TimingTable> table = BenchmarkProblem(backend, TinyProblem(ConvOp::kForward, 4), 4,
                                                 BatchPolicy::kAll, CheckedOptions());
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    ExpectOnlyAlgorithmTwoWrong(*table);
    EXPECT_EQ(backend.widened(), 2);  // the two inputs, once
    // Lying: asked once (the poisoned output), then never again; else once more per check.
    EXPECT_GT(backend.checked_runs(), 1);
    EXPECT_EQ(backend.norms(), lying ? 1 : 1 + backend.checked_runs());
  }
  EXPECT_EQ(RelativeL2FromNorms(9, 25), 0.6);
  EXPECT_EQ(RelativeL2FromNorms(4, 0), 2.0);
  EXPECT_TRUE(std::isinf(RelativeL2FromNorms(NAN, 1)));
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

// A backward-filter's reference sums over the samples: checks in increasing sizes grow one
// reference (each size adds its samples beyond the last one's), so together they cost one run
// over the largest size, and each size's reference is right (a correct configuration agrees at
// every size; one summing the wrong samples would be off by order 1). A smaller size after a
// larger one is computed afresh.
TEST(ResultCheckTest, ABackwardFilterReferenceGrowsWithTheSizesChecked) {
  BrokenAlgorithmBackend backend(Breakage::kNone);
  const ConvProblem p = TinyProblem(ConvOp::kBackwardFilter, 4);
  const int64_t samples = 4;
  const OpTensorSizes sizes = OpSizes(p, samples);
  Result<std::unique_ptr<BackendBuffer>> x = backend.Allocate(sizes.first_input * sizeof(float));
  Result<std::unique_ptr<BackendBuffer>> dy = backend.Allocate(sizes.second_input * sizeof(float));
  Result<std::unique_ptr<BackendBuffer>> dw = backend.Allocate(sizes.output * sizeof(float));
  ASSERT_TRUE(x.ok() && dy.ok() && dw.ok());
  ASSERT_TRUE(FillRandomTiled(backend, (*x)->data(), sizes.first_input, p.data_type, 1).ok());
  ASSERT_TRUE(FillRandomTiled(backend, (*dy)->data(), sizes.second_input, p.data_type, 2).ok());
  ConvOperands operands = BindOperands(p.op, (*x)->data(), (*dy)->data(), (*dw)->data());
  operands.samples = samples;
  ResultChecker checker(backend, p, operands);
  const Algorithm algo(1);
  auto check = [&](int64_t batch) {
    Result<size_t> ws = backend.WorkspaceSize(p, batch, algo);
    ASSERT_TRUE(ws.ok()) << ws.status().ToString();
    Result<std::unique_ptr<BackendBuffer>> workspace = backend.Allocate(*ws);
    ASSERT_TRUE(workspace.ok());
    Result<std::optional<double>> error = checker.Check(batch, algo, (*workspace)->data(), *ws);
    ASSERT_TRUE(error.ok()) << error.status().ToString();
    ASSERT_TRUE(error->has_value());
    EXPECT_LE(**error, ResultBound(p)) << "micro-batch " << batch;
  };
  for (int64_t batch = 1; batch <= samples; ++batch) check(batch);
  EXPECT_EQ(backend.reference_samples(), samples);
  check(2);
  EXPECT_EQ(backend.reference_samples(), samples + 2);
}

// A backend preferring reference algorithm 1 before 0 (as cuDNN's backward-data does), where 1
// runs, asks more workspace than the checker allows, or declines the problem; it records the
// algorithm of every reference run (the fp32 FMA ones).
class PreferredReferenceBackend : public BrokenAlgorithmBackend {
 public:
  enum class First { kRuns, kTooLarge, kDeclines };
  explicit PreferredReferenceBackend(First first)
      : BrokenAlgorithmBackend(Breakage::kNone), first_(first) {}
  std::vector<Algorithm> ReferenceAlgorithms(ConvOp) const override { return {1, 0}; }
  Result<size_t> WorkspaceSize(const ConvProblem& p, int64_t batch,
                               const Algorithm& algo) override {
    if (p.math == MathMode::kFma && algo.id == 1 && first_ == First::kTooLarge) {
      return size_t{1} << 40;
    }
    return BrokenAlgorithmBackend::WorkspaceSize(p, batch, algo);
  }
  Status Run(const ConvProblem& p, int64_t batch, const Algorithm& algo,
             const ConvOperands& operands, void* workspace, size_t workspace_bytes, float alpha,
             float beta) override {
    if (p.math == MathMode::kFma) {
      if (algo.id == 1 && first_ == First::kDeclines) return Unsupported("not this layout");
      reference_algorithms.push_back(algo.id);
    }
    return BrokenAlgorithmBackend::Run(p, batch, algo, operands, workspace, workspace_bytes, alpha,
                                       beta);
  }
  std::vector<int> reference_algorithms;  // of the reference runs that ran

 private:
  First first_;
};

// The reference runs the backend's first reference algorithm that runs within the workspace
// allowed (the last one with whatever it needs), and every later reference of the problem with
// the same one; the checks agree either way.
TEST(ResultCheckTest, TheReferenceIsTheFirstOfTheBackendsAlgorithmsThatRuns) {
  using First = PreferredReferenceBackend::First;
  for (const First first : {First::kRuns, First::kTooLarge, First::kDeclines}) {
    SCOPED_TRACE("case " + std::to_string(static_cast<int>(first)));
    PreferredReferenceBackend backend(first);
    for (const ConvOp op : {ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
      backend.reference_algorithms.clear();
      const ConvProblem p = TinyProblem(op, 4);
      Result<TimingTable> table =
          BenchmarkProblem(backend, p, 2, BatchPolicy::kAll, CheckedOptions());
      ASSERT_TRUE(table.ok()) << table.status().ToString();
      for (const Timing& t : table->entries) EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
      ASSERT_FALSE(backend.reference_algorithms.empty());
      const int used = first == First::kRuns ? 1 : 0;
      for (const int algo : backend.reference_algorithms) EXPECT_EQ(algo, used);
    }
  }
}

TEST(ResultCheckTest, CorrectConfigurationsPassInEveryPrecisionAndIn3d) {
  ConvProblem three_d = TinyProblem(ConvOp::kBackwardFilter, 4);
  three_d.d = 5;
  three_d.t = 3;
  three_d.pad_d = 1;
  // Channels-last: a smaller size's reference is still a prefix of the largest's.
  ConvProblem nhwc = TinyProblem(ConvOp::kBackwardData, 4);
  nhwc.layout = Layout::kNHWC;
  for (ConvProblem p : {TinyProblem(ConvOp::kForward, 4), three_d, nhwc}) {
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
