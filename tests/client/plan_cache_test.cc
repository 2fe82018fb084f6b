// The local plan cache: format round trip, every kind of damage, merge on save.
#include <gtest/gtest.h>

#include <fstream>

#include "plan_cache.h"
#include "support/devices.h"
#include "test_util.h"
#include "ucudnn/core/fingerprint.h"

namespace ucudnn::testing {
namespace {

using client::CacheRecord;
using client::ParseCache;
using client::PlanCache;
using client::SerializeCache;

DeviceFingerprint Device(const std::string& name = "test gpu") {
  DeviceFingerprint f = test_support::H100();
  f.name = name;
  return f;
}

KernelPlan Planned(ConvOp op, int64_t batch, int64_t micro) {
  KernelPlan kp;
  kp.kernel = Kernel{SmallProblem(op), batch, "k"};
  kp.status = KernelPlanStatus::kPlanned;
  for (int64_t left = batch; left > 0; left -= micro) {
    Segment s{std::min(left, micro), 1, 0.25, 4096, {}};
    kp.config.segments.push_back(s);
    kp.config.time_ms += s.time_ms;
    kp.config.workspace_bytes = 4096;
  }
  kp.undivided = Segment{batch, 0, 9.0, 0, {}};
  return kp;
}

CacheRecord PerKernel(const DeviceFingerprint& device, const KernelPlan& kp, uint64_t limit) {
  CacheRecord r;
  r.device = device;
  r.plan.kernels = {kp};
  r.plan.workspace_mode = WorkspaceMode::kPerKernel;
  r.plan.policy = BatchPolicy::kPowerOfTwo;
  r.plan.workspace_budget_bytes = limit;
  r.plan.complete = true;
  return r;
}

TEST(PlanCacheTest, RoundTrip) {
  const std::vector<CacheRecord> records = {
      PerKernel(Device(), Planned(ConvOp::kForward, 8, 4), 1 << 20),
      PerKernel(Device("other"), Planned(ConvOp::kBackwardFilter, 6, 4), 0)};
  Result<std::vector<CacheRecord>> parsed = ParseCache(SerializeCache(records));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].device, Device());
  EXPECT_EQ((*parsed)[1].device, Device("other"));
  EXPECT_EQ((*parsed)[0].plan.kernels[0].config, records[0].plan.kernels[0].config);
  EXPECT_EQ((*parsed)[1].plan.kernels[0].kernel.problem, records[1].plan.kernels[0].kernel.problem);
  EXPECT_EQ((*parsed)[0].plan.workspace_budget_bytes, 1u << 20);
  EXPECT_TRUE(ParseCache(SerializeCache({})).ok());
}

TEST(PlanCacheTest, EngineSegmentsRoundTripAndVersionOneFilesStillRead) {
  KernelPlan mixed = Planned(ConvOp::kForward, 8, 4);
  mixed.config.segments[0].algo = kEngineAlgo;
  mixed.config.segments[0].engine_config = "eng34{k3=2;k14=-1}";
  const std::vector<CacheRecord> records = {PerKernel(Device(), mixed, 1 << 20)};
  const std::string bytes = SerializeCache(records);
  EXPECT_EQ(bytes.rfind("ucudnn-plan-cache " + std::to_string(client::kPlanCacheVersion) + "\n", 0),
            0u);
  Result<std::vector<CacheRecord>> parsed = ParseCache(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].plan.kernels[0].config, mixed.config);
  EXPECT_EQ((*parsed)[0].plan.kernels[0].config.segments[0].engine_config, "eng34{k3=2;k14=-1}");

  // A file written before engine configurations (version 1, legacy segments) reads as before:
  // the records are the same messages.
  const std::vector<CacheRecord> legacy = {
      PerKernel(Device(), Planned(ConvOp::kForward, 8, 4), 1 << 20)};
  std::string version_one = SerializeCache(legacy);
  version_one[std::string("ucudnn-plan-cache ").size()] = '1';
  Result<std::vector<CacheRecord>> old = ParseCache(version_one);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ((*old)[0].plan.kernels[0].config, legacy[0].plan.kernels[0].config);
  std::string version_zero = version_one;
  version_zero[std::string("ucudnn-plan-cache ").size()] = '0';
  EXPECT_NE(ParseCache(version_zero)
                .status()
                .message()
                .find("1 to " + std::to_string(client::kPlanCacheVersion)),
            std::string::npos);
}

TEST(PlanCacheTest, OlderFilesDropThePlansOfABenchmarkingFramework) {
  // Version 3 files were planned before ties went to ucudnn where the framework benchmarks in the
  // job: those records are left for the server to plan again; the others still read.
  std::vector<CacheRecord> records = {
      PerKernel(Device(), Planned(ConvOp::kForward, 8, 4), 1 << 20),
      PerKernel(Device(), Planned(ConvOp::kForward, 16, 4), 1 << 20),
      PerKernel(Device(), Planned(ConvOp::kForward, 32, 4), 1 << 20)};
  records[0].plan.framework = "torch-2.11.0+cu130/benchmark";
  records[1].plan.framework = "torch-2.11.0+cu130/heuristic";
  const std::string bytes = SerializeCache(records);
  Result<std::vector<CacheRecord>> current = ParseCache(bytes);
  ASSERT_TRUE(current.ok()) << current.status().ToString();
  EXPECT_EQ(current->size(), 3u);
  std::string version_three = bytes;
  version_three[std::string("ucudnn-plan-cache ").size()] = '3';
  Result<std::vector<CacheRecord>> old = ParseCache(version_three);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  ASSERT_EQ(old->size(), 2u);
  EXPECT_EQ((*old)[0].plan.framework, "torch-2.11.0+cu130/heuristic");
  EXPECT_EQ((*old)[1].plan.framework, "");
}

TEST(PlanCacheTest, OlderFilesDropThePlansOfGroupedKernels) {
  // Version 4 files hold plans from grouped kernels' timings taken before workers warmed up
  // runtime-compiled engines at each size (schema 8 measures those problems again): such records
  // are left for the server to plan again; dense ones still read.
  KernelPlan depthwise = Planned(ConvOp::kForward, 8, 4);
  depthwise.kernel.problem.c = depthwise.kernel.problem.k = 4;
  depthwise.kernel.problem.groups = 4;
  ASSERT_TRUE(Validate(depthwise.kernel.problem).ok());
  const std::vector<CacheRecord> records = {
      PerKernel(Device(), depthwise, 1 << 20),
      PerKernel(Device(), Planned(ConvOp::kForward, 16, 4), 1 << 20)};
  const std::string bytes = SerializeCache(records);
  Result<std::vector<CacheRecord>> current = ParseCache(bytes);
  ASSERT_TRUE(current.ok()) << current.status().ToString();
  ASSERT_EQ(current->size(), 2u);
  EXPECT_EQ((*current)[0].plan.kernels[0].kernel.problem.groups, 4);
  std::string version_four = bytes;
  version_four[std::string("ucudnn-plan-cache ").size()] = '4';
  Result<std::vector<CacheRecord>> old = ParseCache(version_four);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  ASSERT_EQ(old->size(), 1u);
  EXPECT_EQ((*old)[0].plan.kernels[0].kernel.problem.groups, 1);
}

TEST(PlanCacheTest, EveryDamageIsDetected) {
  const std::string good =
      SerializeCache({PerKernel(Device(), Planned(ConvOp::kForward, 8, 4), 1 << 20)});
  EXPECT_FALSE(ParseCache("").ok());
  EXPECT_FALSE(ParseCache("hello world\n").ok());
  std::string version = good;
  version[std::string("ucudnn-plan-cache ").size()] = '9';
  EXPECT_NE(ParseCache(version).status().message().find("version"), std::string::npos);
  for (size_t cut : {good.size() - 1, good.size() / 2, size_t{25}}) {
    EXPECT_FALSE(ParseCache(good.substr(0, cut)).ok()) << "truncated at " << cut;
  }
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x10;
  EXPECT_NE(ParseCache(flipped).status().message().find("checksum"), std::string::npos);
  EXPECT_FALSE(ParseCache(good + "x").ok());
}

TEST(PlanCacheTest, FindsByDeviceKernelAndLimit) {
  PlanCache cache;
  const KernelPlan kp = Planned(ConvOp::kForward, 8, 4);
  cache.Put(PerKernel(Device(), kp, 1 << 20));
  EXPECT_TRUE(cache.FindKernel(Device(), BatchPolicy::kPowerOfTwo, 1 << 20, kp.kernel));
  EXPECT_FALSE(cache.FindKernel(Device("other"), BatchPolicy::kPowerOfTwo, 1 << 20, kp.kernel));
  EXPECT_FALSE(cache.FindKernel(Device(), BatchPolicy::kAll, 1 << 20, kp.kernel));
  EXPECT_FALSE(cache.FindKernel(Device(), BatchPolicy::kPowerOfTwo, 1 << 21, kp.kernel));
  Kernel other_batch = kp.kernel;
  other_batch.mini_batch = 16;
  EXPECT_FALSE(cache.FindKernel(Device(), BatchPolicy::kPowerOfTwo, 1 << 20, other_batch));
  Kernel renamed = kp.kernel;
  renamed.name = "another label";
  EXPECT_TRUE(cache.FindKernel(Device(), BatchPolicy::kPowerOfTwo, 1 << 20, renamed));
}

TEST(PlanCacheTest, PlansOfDifferentFrameworksAreKeptApart) {
  PlanCache cache;
  KernelPlan framework = Planned(ConvOp::kForward, 8, 4);
  framework.config.segments = {Segment{8, kFrameworkAlgo, 0.5, 0, "torch-2.11"}};
  framework.config.time_ms = 0.5;
  framework.config.workspace_bytes = 0;
  framework.framework_ms = 0.5;
  CacheRecord torch = PerKernel(Device(), framework, 1 << 20);
  torch.plan.framework = "torch-2.11";
  cache.Put(torch);
  const KernelPlan plain = Planned(ConvOp::kForward, 8, 4);
  cache.Put(PerKernel(Device(), plain, 1 << 20));
  const auto found =
      cache.FindKernel(Device(), BatchPolicy::kPowerOfTwo, 1 << 20, framework.kernel, "torch-2.11");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->config, framework.config);
  EXPECT_DOUBLE_EQ(found->framework_ms, 0.5);
  const auto without = cache.FindKernel(Device(), BatchPolicy::kPowerOfTwo, 1 << 20, plain.kernel);
  ASSERT_TRUE(without);
  EXPECT_EQ(without->config, plain.config);
  EXPECT_FALSE(
      cache.FindKernel(Device(), BatchPolicy::kPowerOfTwo, 1 << 20, plain.kernel, "jax-0.5"));
  // Both survive the file.
  Result<std::vector<CacheRecord>> parsed =
      ParseCache(SerializeCache({torch, PerKernel(Device(), plain, 1 << 20)}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].plan.framework, "torch-2.11");
  EXPECT_EQ(client::CacheKey((*parsed)[0]), client::CacheKey(torch));
}

TEST(PlanCacheTest, SaveMergesWithWhatIsOnDiskAndLoadIgnoresCorruption) {
  TempDir dir;
  const std::string path = dir.file("sub/plans.bin");
  PlanCache first;
  first.Put(PerKernel(Device(), Planned(ConvOp::kForward, 8, 4), 1));
  ASSERT_TRUE(first.Save(path).ok());
  PlanCache second;  // another process, saving later
  second.Put(PerKernel(Device(), Planned(ConvOp::kBackwardData, 8, 2), 1));
  ASSERT_TRUE(second.Save(path).ok());
  EXPECT_EQ(PlanCache::Load(path).size(), 2u);

  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "not a cache";
  }
  LogCapture log;
  EXPECT_EQ(PlanCache::Load(path).size(), 0u);
  EXPECT_NE(log.text().find("ignoring corrupt plan cache"), std::string::npos) << log.text();
  EXPECT_EQ(PlanCache::Load(dir.file("missing.bin")).size(), 0u);
}

}  // namespace
}  // namespace ucudnn::testing
