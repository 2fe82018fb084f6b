// Shared pieces of the store tests: sample devices, problems and timings (never all-zero), and a
// fixture with a migrated store on a fresh database.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "support/devices.h"
#include "support/postgres_fixture.h"
#include "support/problems.h"
#include "ucudnn/store/store.h"

namespace ucudnn::store::testing_util {

inline DeviceFingerprint A100() {
  DeviceFingerprint f = test_support::H100();
  f.name = "NVIDIA A100-SXM4-40GB";
  f.cc_major = 8;
  f.sm_count = 108;
  f.memory_bytes = 42505273344ull;
  return f;
}

// ResNet-style 3x3 convolution with `channels` in and out.
inline ConvProblem Conv3x3(int64_t channels, ConvOp op = ConvOp::kForward) {
  return test_support::SquareConv(op, channels, 14, channels);
}

// Timings at micro-batches 1, 2, 4, ... up to `max_batch` for algorithms 0..algos-1, with
// distinct, non-zero values derived from `seed`.
inline std::vector<Timing> SampleTimings(int64_t max_batch, int algos, double seed = 1.0) {
  std::vector<Timing> out;
  for (int64_t b = 1; b <= max_batch; b *= 2) {
    for (int a = 0; a < algos; ++a) {
      Timing t;
      t.micro_batch = b;
      t.algo = a;
      t.time_ms = seed * (0.013 * static_cast<double>(b) + 0.101 * (a + 1)) + 1e-7 / 3;
      t.spread_ms = t.time_ms / 17.0;
      t.samples = 5 + a;
      t.workspace_bytes = static_cast<uint64_t>(b) * (uint64_t{1} << (10 + a)) * 3;
      if (a == algos - 1 && b > 1) {
        t.status = TimingStatus::kUnsupported;
        t.error = "CUDNN_STATUS_NOT_SUPPORTED \"quoted\" \\ back,slash {brace}";
      }
      out.push_back(t);
    }
  }
  return out;
}

// Timings of engine configurations `keys` (canonical, EngineConfigKey()) at micro-batches 1, 2,
// 4, ... up to `max_batch`, distinct and non-zero, told apart from SampleTimings' by their keys.
inline std::vector<Timing> SampleEngineTimings(int64_t max_batch,
                                               const std::vector<std::string>& keys,
                                               double seed = 1.0) {
  std::vector<Timing> out;
  for (int64_t b = 1; b <= max_batch; b *= 2) {
    for (size_t i = 0; i < keys.size(); ++i) {
      Timing t;
      t.micro_batch = b;
      t.algo = kEngineAlgo;
      t.engine_config = keys[i];
      t.time_ms = seed * (0.011 * static_cast<double>(b) + 0.097 * static_cast<double>(i + 1));
      t.spread_ms = t.time_ms / 19.0;
      t.samples = 7;
      t.workspace_bytes = static_cast<uint64_t>(b) * (uint64_t{1} << 12) * (i + 1);
      out.push_back(t);
    }
  }
  return out;
}

class StoreTest : public test_support::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (HasFatalFailure()) return;
    store_ = OpenStore();
    ASSERT_NE(store_, nullptr);
    auto migrated = store_->Migrate();
    ASSERT_TRUE(migrated.ok()) << migrated.status().ToString();
  }

  std::unique_ptr<Store> OpenStore(
      int pool_size = 4, std::chrono::seconds failed_job_cooldown = std::chrono::hours(1)) {
    StoreOptions options;
    options.url = url();
    options.pool_size = pool_size;
    options.failed_job_cooldown = failed_job_cooldown;
    options.acquire_timeout = std::chrono::milliseconds(5000);
    options.reconnect_backoff_initial = std::chrono::milliseconds(20);
    options.reconnect_backoff_max = std::chrono::milliseconds(200);
    auto opened = Store::Open(options);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }

  std::unique_ptr<Store> store_;
};

}  // namespace ucudnn::store::testing_util
