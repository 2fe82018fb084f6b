// The table of `ucudnn cpu-bench` (cli/src/bench_table.h): its context lines, and the planner's
// plan table under them with the CPU algorithms' names. The table's own rules (totals over the
// same kernels, n/a without a baseline) are tested in tests/planner/plan_table_test.cc.
#include "bench_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "ucudnn/planner/planner.h"

namespace ucudnn::cli {
namespace {

using ::testing::HasSubstr;

BenchTableHeader Header() {
  BenchTableHeader h;
  h.network = "tiny";
  h.device.backend = "cpu";
  h.device.name = "Test CPU";
  h.device.sm_count = 4;
  h.device.memory_bytes = 8ull << 30;
  h.device.blas = "openblas 0.3.21 threads:2";
  h.blas_threads = 2;
  return h;
}

// One kernel planned by the real planner from a table where micro-batching with im2col_gemm
// (algo 1) beats the undivided direct algorithm (algo 0).
NetworkPlan TinyPlan() {
  PlanRequest request;
  request.device = Header().device;
  Kernel kernel;
  kernel.name = "down/bwd_filter";
  kernel.problem.op = ConvOp::kBackwardFilter;
  kernel.problem.c = 8;
  kernel.problem.h = kernel.problem.w = 12;
  kernel.problem.k = 16;
  kernel.problem.r = kernel.problem.s = 3;
  kernel.mini_batch = 4;
  request.kernels = {kernel};
  request.policy = BatchPolicy::kPowerOfTwo;
  request.workspace_bytes = 2 << 20;
  TimingTable table;
  for (int64_t b : {1, 2, 4}) {
    table.entries.push_back(
        {b, 0, 1.0 * static_cast<double>(b), 0, 5, 0, TimingStatus::kOk, "", {}, {}});
    table.entries.push_back({b,
                             1,
                             0.25 * static_cast<double>(b),
                             0,
                             5,
                             static_cast<uint64_t>(b) << 20,
                             TimingStatus::kOk,
                             "",
                             {},
                             {}});
  }
  auto plan = PlanNetwork(request, {&table});
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : NetworkPlan{};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(BenchTable, HeaderNamesTheNetworkDeviceAndThreads) {
  const std::string table = FormatBenchTable(Header(), TinyPlan());
  const std::vector<std::string> lines = Lines(table);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[0], "cpu-bench tiny, mini-batch 4");
  EXPECT_EQ(lines[1],
            "Device: cpu \"Test CPU\", 4 cores, 8 GiB, openblas 0.3.21 threads:2 (BLAS threads "
            "2); fingerprint " +
                HashHex(Header().device.Hash()));
  EXPECT_EQ(lines[2], "");
  EXPECT_THAT(lines[3], HasSubstr("Plan: 1 kernels"));
  EXPECT_THAT(lines[3], HasSubstr("policy power_of_two, workspace 2 MiB per kernel"));
  BenchTableHeader openblas_default = Header();
  openblas_default.blas_threads = 0;
  EXPECT_THAT(FormatBenchTable(openblas_default, TinyPlan()),
              HasSubstr("(BLAS threads OpenBLAS's default)"));
}

TEST(BenchTable, SegmentsUseAlgorithmNames) {
  const std::string table = FormatBenchTable(Header(), TinyPlan());
  // Four micro-batches of 1 with im2col_gemm (as fast as two of 2, in less workspace), against
  // direct undivided (im2col_gemm at 4 needs 4 MiB).
  EXPECT_THAT(table, ::testing::ContainsRegex(
                         "down/bwd_filter +n4 c8 12x12 k16 3x3 s1 p0 +4x1@im2col_gemm +1\\.0 +"
                         "1\\.000 +4\\.000 +4\\.00x"));
  // A backend whose names are not known prints ids.
  BenchTableHeader other = Header();
  other.device.backend = "tpu";
  EXPECT_THAT(FormatBenchTable(other, TinyPlan()), HasSubstr("4x1@algo1"));
}

}  // namespace
}  // namespace ucudnn::cli
