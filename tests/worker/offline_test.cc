// Offline mode when not everything can be measured: a problem that fails does not lose the run,
// a lost device stops its own thread only, and the file holds what was measured with a header
// naming what is missing. CPU backend playing a GPU in trouble; no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ucudnn/core/timing_csv.h"
#include "ucudnn/worker/idle_gate.h"
#include "ucudnn/worker/offline.h"
#include "worker/worker_test_util.h"

namespace ucudnn::worker {
namespace {

using namespace ucudnn::worker::testing;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

class OfflineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/ucudnn_offline_test_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  OfflineRequest Request(std::vector<Kernel> kernels) {
    OfflineRequest request;
    request.kernels = std::move(kernels);
    request.policy = BatchPolicy::kPowerOfTwo;
    request.benchmark = FastBenchmarkOptions();
    request.benchmark.short_run_ms = 0;  // 2 runs per configuration: countable
    request.benchmark.config_time_budget_ms = 60'000;
    request.output = dir_ + "/timings.csv";
    return request;
  }
  std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string dir_;
};

// Too big for a device that allocates at most 64 KiB at once, even at micro-batch 1.
ConvProblem BigProblem() {
  ConvProblem p = TinyProblem(ConvOp::kForward, 64);
  p.h = p.w = 32;  // 64 x 32 x 32 fp32 input: 256 KiB per sample
  return p;
}

TEST_F(OfflineTest, AFailingProblemDoesNotLoseTheOthers) {
  auto gpu = std::make_unique<RenamedCpuBackend>("small gpu");
  gpu->FailAllocationsAbove(64 << 10);
  std::vector<BenchmarkDevice> devices;
  devices.push_back({"gpu0", std::move(gpu)});
  OfflineRequest request = Request({
      {TinyProblem(ConvOp::kForward, 3), 2, "conv1/fwd"},
      {BigProblem(), 2, "big/fwd"},
      {TinyProblem(ConvOp::kBackwardData, 3), 2, "conv1/bwd_data"},
  });
  auto summary = RunOffline(devices, request);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_FALSE(summary->complete());
  EXPECT_FALSE(summary->cancelled);
  EXPECT_EQ(summary->problems, 2);
  ASSERT_EQ(summary->failed.size(), 1u);
  EXPECT_THAT(summary->failed[0], HasSubstr("big fwd"));
  EXPECT_THAT(summary->failed[0], HasSubstr("RESOURCE_EXHAUSTED"));
  EXPECT_TRUE(summary->not_measured.empty());

  const std::string text = Read(request.output);
  EXPECT_THAT(text, HasSubstr("# INCOMPLETE: 1 of 3 problems not measured (1 failed)"));
  EXPECT_THAT(text, HasSubstr("# failed: big fwd"));
  auto header = ParseDeviceHeader(text);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->name, "small gpu");
  auto tables = ReadTimingCsvFile(request.output);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_EQ(tables->size(), 2u);
  EXPECT_EQ(tables->count(CanonicalKey(BigProblem())), 0u);
  for (const auto& [key, entry] : *tables) EXPECT_EQ(entry.layer, "conv1");
}

TEST_F(OfflineTest, ALostDeviceStopsItsThreadAndTheFileNamesWhatIsMissing) {
  auto gpu = std::make_unique<RenamedCpuBackend>("flaky gpu");
  // The first problem (2 sizes x 3 algorithms x 2 runs) completes; the second loses the device.
  gpu->LoseDeviceAfterRuns(12);
  std::vector<BenchmarkDevice> devices;
  devices.push_back({"gpu0", std::move(gpu)});
  OfflineRequest request = Request({
      {TinyProblem(ConvOp::kForward, 3), 2, "conv1/fwd"},
      {TinyProblem(ConvOp::kBackwardData, 3), 2, "conv1/bwd_data"},
      {TinyProblem(ConvOp::kBackwardFilter, 3), 2, "conv1/bwd_filter"},
  });
  auto summary = RunOffline(devices, request);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->problems, 1);
  EXPECT_EQ(summary->lost_devices, std::vector<std::string>{"gpu0"});
  ASSERT_EQ(summary->failed.size(), 1u);
  EXPECT_THAT(summary->failed[0], HasSubstr("conv1 bwd_data"));
  EXPECT_THAT(summary->failed[0], HasSubstr("DEVICE_LOST"));
  ASSERT_EQ(summary->not_measured.size(), 1u);
  EXPECT_THAT(summary->not_measured[0], HasSubstr("conv1 bwd_filter"));
  const std::string text = Read(request.output);
  EXPECT_THAT(text,
              HasSubstr("# INCOMPLETE: 2 of 3 problems not measured (1 failed, device lost)"));
  auto tables = ReadTimingCsvFile(request.output);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  EXPECT_EQ(tables->size(), 1u);
}

TEST_F(OfflineTest, NothingMeasuredWritesNothing) {
  auto gpu = std::make_unique<RenamedCpuBackend>("broken gpu");
  gpu->FailAllocations();
  std::vector<BenchmarkDevice> devices;
  devices.push_back({"gpu0", std::move(gpu)});
  OfflineRequest request = Request({{TinyProblem(ConvOp::kForward, 3), 2, "conv1/fwd"}});
  auto summary = RunOffline(devices, request);
  EXPECT_EQ(summary.status().code(), StatusCode::kInternal);
  EXPECT_THAT(summary.status().message(), HasSubstr("out of device memory"));
  EXPECT_FALSE(std::filesystem::exists(request.output));
}

TEST_F(OfflineTest, CancelledBeforeAnythingWasMeasuredWritesNothing) {
  std::vector<BenchmarkDevice> devices = CpuDevice("gpu0");
  OfflineRequest request = Request({{TinyProblem(ConvOp::kForward, 3), 2, "conv1/fwd"}});
  const std::atomic<bool> cancel{true};
  auto summary = RunOffline(devices, request, &cancel);
  // Either the watcher stopped the run first (nothing written), or the problem was done before
  // it looked: both are clean.
  if (summary.ok()) {
    EXPECT_TRUE(summary->complete() || summary->cancelled);
  } else {
    EXPECT_EQ(summary.status().code(), StatusCode::kUnavailable) << summary.status().ToString();
    EXPECT_FALSE(std::filesystem::exists(request.output));
  }
}

TEST_F(OfflineTest, ACompleteRunSaysSo) {
  std::vector<BenchmarkDevice> devices = CpuDevice("cpu");
  OfflineRequest request = Request({{TinyProblem(ConvOp::kForward, 3), 2, "conv1/fwd"}});
  auto summary = RunOffline(devices, request);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(summary->complete());
  EXPECT_EQ(Read(request.output).find("INCOMPLETE"), std::string::npos);
}

// Looks the gate takes, on a device where nothing else runs.
class CountingProbe : public GpuActivityProbe {
 public:
  explicit CountingProbe(int* samples) : samples_(samples) {}
  std::string_view name() const override { return "counting"; }
  Result<GpuActivitySample> Sample() override {
    ++*samples_;
    return GpuActivitySample{};
  }

 private:
  int* samples_;
};

// The device's idle gate (--idle-gate) is consulted offline as in the daemon: before and after
// every measurement.
TEST_F(OfflineTest, MeasuresThroughTheDevicesIdleGate) {
  std::vector<BenchmarkDevice> devices = CpuDevice("gpu0");
  int samples = 0;
  IdleGateConfig config;
  config.self_pid = 1;
  devices.front().gate = std::make_unique<IdleGate>(std::make_unique<CountingProbe>(&samples),
                                                    config, [](std::chrono::milliseconds) {});
  OfflineRequest request = Request({{TinyProblem(ConvOp::kForward, 3), 2, "conv1/fwd"}});
  auto summary = RunOffline(devices, request);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(summary->complete());
  EXPECT_GT(samples, 0) << "the gate was never consulted";
}

}  // namespace
}  // namespace ucudnn::worker
