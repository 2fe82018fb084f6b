// Every value of every enum the store keeps, driven by the proto's descriptors (so a value added
// to ucudnn.proto is covered without editing this file), written to a real PostgreSQL and read
// back: the CHECK constraints of the schema must admit each one (issue 15: 'fma' could not be
// stored).
#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>

#include <functional>
#include <string>
#include <vector>

#include "store_test_util.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/v1/ucudnn.pb.h"

namespace ucudnn::store {
namespace {

using test_support::H100;
using testing_util::SampleTimings;
using testing_util::StoreTest;

// The proto's values of `descriptor` other than the UNSPECIFIED zero.
std::vector<int> SpecifiedValues(const google::protobuf::EnumDescriptor* descriptor) {
  std::vector<int> values;
  for (int i = 0; i < descriptor->value_count(); ++i) {
    if (descriptor->value(i)->number() != 0) values.push_back(descriptor->value(i)->number());
  }
  return values;
}

v1::ConvProblem BaseProblem() { return ToProto(testing_util::Conv3x3(64)); }

class EnumsTest : public StoreTest {
 protected:
  // Stores `message` as a job's problem with `policy`, then reads the job back; returns it.
  Job RoundTrip(const v1::ConvProblem& message, BatchPolicy policy = BatchPolicy::kPowerOfTwo) {
    auto problem = FromProto(message);
    EXPECT_TRUE(problem.ok()) << problem.status().ToString() << "\n" << message.DebugString();
    if (!problem.ok()) return {};
    auto enqueued = store_->EnqueueJob(H100(), *problem, 4, policy);
    EXPECT_TRUE(enqueued.ok()) << enqueued.status().ToString() << "\n" << message.DebugString();
    if (!enqueued.ok()) return {};
    auto job = store_->GetJob(enqueued->job_id);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : Job{};
  }

  // Every specified value of one problem field, set by `set` on the base problem.
  void EveryValueOfProblemField(const google::protobuf::EnumDescriptor* descriptor,
                                const std::function<void(v1::ConvProblem&, int)>& set,
                                const std::function<int(const v1::ConvProblem&)>& get) {
    const std::vector<int> values = SpecifiedValues(descriptor);
    ASSERT_FALSE(values.empty());
    for (int value : values) {
      SCOPED_TRACE(descriptor->FindValueByNumber(value)->name());
      v1::ConvProblem message = BaseProblem();
      set(message, value);
      const Job job = RoundTrip(message);
      EXPECT_EQ(get(ToProto(job.problem)), value);
    }
  }
};

TEST_F(EnumsTest, EveryConvOp) {
  EveryValueOfProblemField(
      v1::ConvOp_descriptor(),
      [](v1::ConvProblem& p, int v) { p.set_op(static_cast<v1::ConvOp>(v)); },
      [](const v1::ConvProblem& p) { return static_cast<int>(p.op()); });
}

TEST_F(EnumsTest, EveryDataTypeAsDataAndComputeType) {
  EveryValueOfProblemField(
      v1::DataType_descriptor(),
      [](v1::ConvProblem& p, int v) { p.set_data_type(static_cast<v1::DataType>(v)); },
      [](const v1::ConvProblem& p) { return static_cast<int>(p.data_type()); });
  // Compute types with the same data type (every type accumulates in itself).
  EveryValueOfProblemField(
      v1::DataType_descriptor(),
      [](v1::ConvProblem& p, int v) {
        p.set_data_type(static_cast<v1::DataType>(v));
        p.set_compute_type(static_cast<v1::DataType>(v));
      },
      [](const v1::ConvProblem& p) { return static_cast<int>(p.compute_type()); });
}

TEST_F(EnumsTest, EveryLayout) {
  EveryValueOfProblemField(
      v1::TensorLayout_descriptor(),
      [](v1::ConvProblem& p, int v) { p.set_layout(static_cast<v1::TensorLayout>(v)); },
      [](const v1::ConvProblem& p) { return static_cast<int>(p.layout()); });
}

TEST_F(EnumsTest, EveryMathModeIncludingFma) {
  EveryValueOfProblemField(
      v1::MathMode_descriptor(),
      [](v1::ConvProblem& p, int v) { p.set_math(static_cast<v1::MathMode>(v)); },
      [](const v1::ConvProblem& p) { return static_cast<int>(p.math()); });
  // fma timings can be written and read as well.
  v1::ConvProblem message = BaseProblem();
  message.set_math(v1::MATH_MODE_FMA);
  auto problem = FromProto(message);
  ASSERT_TRUE(problem.ok()) << problem.status().ToString();
  const auto timings = SampleTimings(4, 2);
  ASSERT_TRUE(store_->PutTimings(H100(), *problem, timings, "enums-test").ok());
  auto table = store_->GetTimings(H100(), *problem);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->entries.size(), timings.size());
}

TEST_F(EnumsTest, EveryBatchPolicyAsPolicyAndClaimedPolicy) {
  const std::vector<int> values = SpecifiedValues(v1::BatchPolicy_descriptor());
  ASSERT_FALSE(values.empty());
  ASSERT_TRUE(store_->RegisterWorker("enums-worker", "host", H100()).ok());
  int64_t channels = 8;
  for (int value : values) {
    SCOPED_TRACE(v1::BatchPolicy_Name(value));
    auto policy = FromProto(static_cast<v1::BatchPolicy>(value));
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    const Job job = RoundTrip(ToProto(testing_util::Conv3x3(channels++)), *policy);
    EXPECT_EQ(static_cast<int>(ToProto(job.policy)), value);
    // Claiming stores it again as claimed_policy.
    auto claimed = store_->ClaimJob(H100().Hash(), "enums-worker", std::chrono::seconds(60));
    ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
    ASSERT_TRUE(claimed->has_value());
    EXPECT_EQ((*claimed)->id, job.id);
    EXPECT_EQ(static_cast<int>(ToProto((*claimed)->policy)), value);
  }
}

TEST_F(EnumsTest, EveryTimingStatus) {
  const std::vector<int> values = SpecifiedValues(v1::TimingStatus_descriptor());
  ASSERT_FALSE(values.empty());
  std::vector<Timing> timings;
  for (int value : values) {
    v1::Timing message = ToProto(SampleTimings(1, 1).front());
    message.set_algo(value);  // one row per status
    message.set_status(static_cast<v1::TimingStatus>(value));
    if (value != v1::TIMING_STATUS_OK) message.set_error("status " + v1::TimingStatus_Name(value));
    auto timing = FromProto(message);
    ASSERT_TRUE(timing.ok()) << timing.status().ToString();
    timings.push_back(*timing);
  }
  const ConvProblem problem = testing_util::Conv3x3(32);
  ASSERT_TRUE(store_->PutTimings(H100(), problem, timings, "enums-test").ok());
  auto records = store_->GetTimingRecords(H100(), problem);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(static_cast<int>(ToProto((*records)[i].timing.status)), values[i]);
  }
}

TEST_F(EnumsTest, EveryJobState) {
  ASSERT_TRUE(store_->RegisterWorker("enums-worker", "host", H100()).ok());
  const auto lease = std::chrono::seconds(60);
  auto enqueue = [&](int64_t channels) {
    auto r = store_->EnqueueJob(H100(), testing_util::Conv3x3(channels), 1, BatchPolicy::kAll);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->job_id : 0;
  };
  auto state_of = [&](int64_t id) {
    auto job = store_->GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->state : JobState::kQueued;
  };
  const int64_t queued = enqueue(16);
  EXPECT_EQ(state_of(queued), JobState::kQueued);
  auto claimed = store_->ClaimJob(H100().Hash(), "enums-worker", lease);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  EXPECT_EQ(state_of(queued), JobState::kRunning);
  auto done = store_->CompleteJob(queued, "enums-worker", SampleTimings(1, 1));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(state_of(queued), JobState::kDone);

  const int64_t failing = enqueue(24);
  claimed = store_->ClaimJob(H100().Hash(), "enums-worker", lease);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  auto failed = store_->FailJob(failing, "enums-worker", "boom", /*max_attempts=*/1);
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(state_of(failing), JobState::kFailed);
  // Every state ListJobs can filter by is accepted back.
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed}) {
    auto parsed = ParseJobState(ToString(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
    EXPECT_TRUE(store_->ListJobs(s, 10).ok());
  }
}

TEST_F(EnumsTest, BothBackends) {
  for (const DeviceFingerprint& device : {H100(), test_support::Xeon()}) {
    auto id = store_->UpsertDevice(device);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(*id, device.Hash());
  }
  auto devices = store_->ListDevices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 2u);
  for (const auto& d : *devices) EXPECT_EQ(d.hash, d.fingerprint.Hash()) << d.fingerprint.Key();
}

}  // namespace
}  // namespace ucudnn::store
