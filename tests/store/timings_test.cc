// Devices, problems and timings: round trips, upserts, batch reads, input checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <pqxx/pqxx>
#include <regex>

#include "store_test_util.h"

namespace ucudnn::store {
namespace {

using test_support::H100;
using testing_util::A100;
using testing_util::Conv3x3;
using testing_util::SampleEngineTimings;
using testing_util::SampleTimings;
using testing_util::StoreTest;

std::vector<Timing> Sorted(std::vector<Timing> t) {
  std::sort(t.begin(), t.end(), [](const Timing& a, const Timing& b) {
    // The store's order: engine configurations (algo -1) by key, byte-wise, then legacy ones.
    return std::tie(a.micro_batch, a.algo, a.engine_config) <
           std::tie(b.micro_batch, b.algo, b.engine_config);
  });
  return t;
}

using TimingsTest = StoreTest;

TEST_F(TimingsTest, DeviceAndProblemKeysAreTheirHashes) {
  auto device = store_->UpsertDevice(H100());
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ(*device, H100().Hash());
  auto again = store_->UpsertDevice(H100());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *device);

  auto problem = store_->UpsertProblem(Conv3x3(128, ConvOp::kBackwardFilter));
  ASSERT_TRUE(problem.ok()) << problem.status().ToString();
  EXPECT_EQ(*problem, StableHash(Conv3x3(128, ConvOp::kBackwardFilter)));

  pqxx::connection conn(url());
  pqxx::nontransaction tx(conn);
  pqxx::row row = tx.exec_params1("SELECT canonical_key, op, c, r FROM problems WHERE id = $1",
                                  static_cast<int64_t>(*problem));
  EXPECT_EQ(row[0].as<std::string>(), CanonicalKey(Conv3x3(128, ConvOp::kBackwardFilter)));
  EXPECT_EQ(row[1].as<std::string>(), "bwd_filter");
  EXPECT_EQ(row[2].as<int>(), 128);
  EXPECT_EQ(row[3].as<int>(), 3);
}

TEST_F(TimingsTest, HashCollisionIsReportedNotMerged) {
  // A row that owns H100's hash with another fingerprint key, as a collision would.
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec_params(
        "INSERT INTO devices (id, fingerprint_key, backend, name, cc_major, cc_minor, sm_count, "
        "memory_bytes, cudnn_version, cuda_runtime_version) "
        "VALUES ($1, 'v1;backend=cpu;other', 'cpu', 'other', 0, 0, 4, 1, 0, 0)",
        static_cast<int64_t>(H100().Hash()));
    tx.commit();
  }
  auto device = store_->UpsertDevice(H100());
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(device.status().message().find("collides"), std::string::npos);
}

TEST_F(TimingsTest, PutThenGetRoundTripsExactly) {
  const auto timings = SampleTimings(64, 4);
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), timings, "worker-a").ok());

  auto table = store_->GetTimings(H100(), Conv3x3(64));
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->entries, Sorted(timings));  // every field, doubles exact, error text intact

  auto records = store_->GetTimingRecords(H100(), Conv3x3(64));
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), timings.size());
  const std::regex rfc3339(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");
  for (const TimingRecord& r : *records) {
    EXPECT_EQ(r.measured_by, "worker-a");
    EXPECT_TRUE(std::regex_match(r.measured_at, rfc3339)) << r.measured_at;
  }

  // Other device, other problem: nothing.
  auto other_device = store_->GetTimings(A100(), Conv3x3(64));
  ASSERT_TRUE(other_device.ok());
  EXPECT_TRUE(other_device->entries.empty());
  auto other_problem = store_->GetTimings(H100(), Conv3x3(32));
  ASSERT_TRUE(other_problem.ok());
  EXPECT_TRUE(other_problem->entries.empty());
}

// The framework's own time (algo -2) is kept as first stored, whoever submits it again: two
// ranks of a job that measure a kernel at once then plan with the same number.
TEST_F(TimingsTest, AFrameworkTimeIsKeptAsFirstStored) {
  const auto framework = [](const std::string& identity, double ms) {
    Timing t;
    t.micro_batch = 64;
    t.algo = kFrameworkAlgo;
    t.engine_config = identity;
    t.time_ms = ms;
    t.samples = 15;
    return t;
  };
  ASSERT_TRUE(
      store_->PutTimings(H100(), Conv3x3(64), {framework("torch-a/benchmark", 1.0)}, "rank-0")
          .ok());
  ASSERT_TRUE(
      store_
          ->PutTimings(H100(), Conv3x3(64),
                       {framework("torch-a/benchmark", 2.0), framework("torch-b/benchmark", 3.0)},
                       "rank-1")
          .ok());
  auto records = store_->GetTimingRecords(H100(), Conv3x3(64));
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 2u);
  for (const TimingRecord& r : *records) {
    const bool first = r.timing.engine_config == "torch-a/benchmark";
    EXPECT_EQ(r.timing.time_ms, first ? 1.0 : 3.0) << r.timing.engine_config;
    EXPECT_EQ(r.measured_by, first ? "rank-0" : "rank-1") << r.timing.engine_config;
  }
}

// A worker's own limit (kWorkerLimitError) never replaces a measurement of the same key; it does
// replace a failure, and a real failure (cuDNN's verdict) replaces a measurement as any write.
TEST_F(TimingsTest, WorkerLimitRowsNeverReplaceMeasurements) {
  const auto timing = [](int64_t b, int algo, TimingStatus status, std::string error) {
    Timing t;
    t.micro_batch = b;
    t.algo = algo;
    t.status = status;
    t.error = std::move(error);
    t.time_ms = status == TimingStatus::kOk ? 1.5 : 0.0;
    t.samples = status == TimingStatus::kOk ? 5 : 0;
    return t;
  };
  const std::string limit = std::string(kWorkerLimitError) + "workspace 3 GiB over this cap";
  const std::vector<Timing> stored = {
      timing(1, 0, TimingStatus::kOk, ""), timing(1, 1, TimingStatus::kOk, ""),
      timing(1, 2, TimingStatus::kFailed, "CUDNN_STATUS_EXECUTION_FAILED"),
      timing(2, 2, TimingStatus::kOk, "")};
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), stored, "big-cap").ok());
  const std::vector<Timing> ours = {
      timing(1, 0, TimingStatus::kOk, ""),         // a measurement: replaces
      timing(1, 1, TimingStatus::kFailed, limit),  // a limit over a measurement: kept out
      timing(1, 2, TimingStatus::kFailed, limit),  // a limit over a failure: replaces
      timing(2, 1, TimingStatus::kFailed, limit),  // nothing stored: written
      timing(2, 2, TimingStatus::kFailed, "CUDNN_STATUS_BAD_PARAM"),  // cuDNN's verdict: replaces
  };
  ASSERT_TRUE(IsWorkerLimit(ours[1]) && !IsWorkerLimit(ours[4]));
  auto imported = store_->ImportTimings(H100(), {{Conv3x3(64), ours}}, "small-cap");
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(*imported, 4);  // rows written: all but the limit over a measurement

  auto records = store_->GetTimingRecords(H100(), Conv3x3(64));
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 5u);
  for (const TimingRecord& r : *records) {
    const bool kept = r.timing.micro_batch == 1 && r.timing.algo == 1;
    SCOPED_TRACE("b=" + std::to_string(r.timing.micro_batch) +
                 " algo=" + std::to_string(r.timing.algo));
    EXPECT_EQ(r.measured_by, kept ? "big-cap" : "small-cap");
    if (kept) {
      EXPECT_EQ(r.timing.status, TimingStatus::kOk);
    }
  }
  // The same through a plain write.
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), {ours[1]}, "small-cap").ok());
  auto again = store_->GetTimings(H100(), Conv3x3(64));
  ASSERT_TRUE(again.ok());
  for (const Timing& t : again->entries) {
    if (t.micro_batch == 1 && t.algo == 1) {
      EXPECT_EQ(t.status, TimingStatus::kOk);
    }
  }
}

TEST_F(TimingsTest, UpsertReplacesAndKeepsOneRowPerKey) {
  const auto first = SampleTimings(16, 3, 1.0);
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), first, "worker-a").ok());
  auto second = SampleTimings(16, 3, 2.5);  // same keys, other values
  second.resize(4);
  Timing extra = first[0];
  extra.micro_batch = 32;
  extra.time_ms = 9.75;
  second.push_back(extra);
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), second, "worker-b").ok());

  auto records = store_->GetTimingRecords(H100(), Conv3x3(64));
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), first.size() + 1);  // replaced in place, one new key
  for (const TimingRecord& r : *records) {
    const bool replaced = std::any_of(second.begin(), second.end(), [&](const Timing& t) {
      return t.micro_batch == r.timing.micro_batch && t.algo == r.timing.algo;
    });
    EXPECT_EQ(r.measured_by, replaced ? "worker-b" : "worker-a");
    if (replaced) {
      const auto it = std::find_if(second.begin(), second.end(), [&](const Timing& t) {
        return t.micro_batch == r.timing.micro_batch && t.algo == r.timing.algo;
      });
      EXPECT_EQ(r.timing, *it);
    }
  }
}

// Engine configurations are rows of their own beside the legacy algorithms: the key of a row is
// (micro_batch, algo, engine_config), and the worker-limit rule holds per row.
TEST_F(TimingsTest, EngineConfigurationsAreRowsOfTheirOwn) {
  const std::vector<std::string> keys = {"eng34{k3=2;k14=-1}", "eng34{k3=3}", "eng34", "eng7"};
  std::vector<Timing> mixed = SampleTimings(8, 3);
  for (const Timing& t : SampleEngineTimings(8, keys)) mixed.push_back(t);
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), mixed, "worker-a").ok());
  auto table = store_->GetTimings(H100(), Conv3x3(64));
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->entries, Sorted(mixed));  // keys intact, in the documented order

  // A re-measurement of one configuration replaces that row only; a worker's limit does not
  // replace a measured configuration but lands where none was measured.
  Timing remeasured = SampleEngineTimings(1, {"eng34{k3=3}"}, 4.0)[0];
  Timing limited = SampleEngineTimings(1, {"eng34"})[0];
  limited.status = TimingStatus::kFailed;
  limited.error = std::string(kWorkerLimitError) + "workspace over this cap";
  limited.time_ms = 0;
  Timing fresh = limited;
  fresh.engine_config = "eng35";
  ASSERT_TRUE(
      store_->PutTimings(H100(), Conv3x3(64), {remeasured, limited, fresh}, "worker-b").ok());
  auto records = store_->GetTimingRecords(H100(), Conv3x3(64));
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), mixed.size() + 1);
  int by_b = 0;
  for (const TimingRecord& r : *records) {
    SCOPED_TRACE(std::to_string(r.timing.micro_batch) + "@" + AlgorithmText(AlgorithmOf(r.timing)));
    if (r.measured_by == "worker-b") {
      ++by_b;
      EXPECT_EQ(r.timing.micro_batch, 1);
      EXPECT_TRUE(r.timing == remeasured || r.timing == fresh);
    } else if (r.timing.micro_batch == 1 && r.timing.engine_config == "eng34") {
      EXPECT_EQ(r.timing.status, TimingStatus::kOk);  // the limit was kept out
    }
  }
  EXPECT_EQ(by_b, 2);

  // The identity rule, with the row named.
  std::vector<Timing> bad = SampleEngineTimings(2, {"eng34"});
  bad[1].algo = 5;
  Status s = store_->PutTimings(H100(), Conv3x3(32), bad, "w");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("timings[1].algo: must be -1", 0), 0u) << s.message();
  bad = SampleEngineTimings(2, {"eng34"});
  bad[0].engine_config = "eng34{k14=-1;k3=2}";
  s = store_->PutTimings(H100(), Conv3x3(32), bad, "w");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("timings[0].engine_config: ", 0), 0u) << s.message();
  bad = SampleEngineTimings(2, {"eng34"});
  bad.push_back(bad[0]);
  bad.back().time_ms = 7.5;
  s = store_->PutTimings(H100(), Conv3x3(32), bad, "w");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("duplicate (micro_batch 1, algo eng34)"), std::string::npos)
      << s.message();
  auto untouched = store_->GetTimings(H100(), Conv3x3(32));
  ASSERT_TRUE(untouched.ok());
  EXPECT_TRUE(untouched->entries.empty());
}

TEST_F(TimingsTest, GetTimingsForProblemsAnswersAWholeNetworkInOrder) {
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(64), SampleTimings(8, 2, 1.0), "w").ok());
  ASSERT_TRUE(store_->PutTimings(H100(), Conv3x3(128), SampleTimings(4, 3, 3.0), "w").ok());
  ASSERT_TRUE(store_->PutTimings(A100(), Conv3x3(256), SampleTimings(4, 3, 3.0), "w").ok());

  const std::vector<ConvProblem> network = {Conv3x3(128), Conv3x3(256), Conv3x3(64), Conv3x3(128)};
  auto tables = store_->GetTimingsForProblems(H100(), network);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_EQ(tables->size(), 4u);
  EXPECT_EQ((*tables)[0].entries, Sorted(SampleTimings(4, 3, 3.0)));
  EXPECT_TRUE((*tables)[1].entries.empty());  // only measured on the A100
  EXPECT_EQ((*tables)[2].entries, Sorted(SampleTimings(8, 2, 1.0)));
  EXPECT_EQ((*tables)[3].entries, (*tables)[0].entries);  // a repeated layer

  auto none = store_->GetTimingsForProblems(H100(), {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(TimingsTest, BadInputIsRejectedWithTheFieldNamed) {
  auto timings = SampleTimings(4, 2);
  timings[1].time_ms = std::nan("");
  Status s = store_->PutTimings(H100(), Conv3x3(64), timings, "w");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("timings[1].time_ms"), std::string::npos) << s.message();

  ConvProblem bad = Conv3x3(64);
  bad.c = 0;
  s = store_->PutTimings(H100(), bad, SampleTimings(4, 2), "w");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("problem: c", 0), 0u) << s.message();

  DeviceFingerprint no_name = H100();
  no_name.name.clear();
  s = store_->PutTimings(no_name, Conv3x3(64), SampleTimings(4, 2), "w");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("device"), std::string::npos);

  s = store_->PutTimings(H100(), Conv3x3(64), SampleTimings(4, 2), std::string(200, 'x'));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("measured_by"), std::string::npos);

  auto table = store_->GetTimings(H100(), Conv3x3(64));
  ASSERT_TRUE(table.ok());
  EXPECT_TRUE(table->entries.empty());  // nothing written by the rejected calls
}

TEST_F(TimingsTest, ImportWritesManyProblemsAtOnceOrNothing) {
  std::vector<ProblemTimings> batch;
  for (int64_t c : {16, 32, 64}) {
    batch.push_back({Conv3x3(c), SampleTimings(8, 2, static_cast<double>(c))});
  }
  auto rows = store_->ImportTimings(H100(), batch, "import:resnet50.csv");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(*rows, 3 * 8);
  auto records = store_->GetTimingRecords(H100(), Conv3x3(32));
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 8u);
  EXPECT_EQ((*records)[0].measured_by, "import:resnet50.csv");

  // One bad problem: the whole import is refused.
  batch.push_back({Conv3x3(128), SampleTimings(2, 1)});
  batch.back().timings[0].algo = -1;
  auto refused = store_->ImportTimings(H100(), batch, "import:second.csv");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("problems[3]"), std::string::npos)
      << refused.status().message();
  auto untouched = store_->GetTimings(H100(), Conv3x3(128));
  ASSERT_TRUE(untouched.ok());
  EXPECT_TRUE(untouched->entries.empty());
}

}  // namespace
}  // namespace ucudnn::store
