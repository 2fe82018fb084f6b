// The table of `ucudnn cpu-bench` (cli/src/bench_table.h).
#include "bench_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ucudnn::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::map<int, std::string> kNames = {{0, "direct"}, {1, "im2col_gemm"}};

BenchTableHeader Header() {
  BenchTableHeader h;
  h.network = "tiny";
  h.device.backend = "cpu";
  h.device.name = "Test CPU";
  h.device.sm_count = 4;
  h.device.memory_bytes = 8ull << 30;
  h.device.blas = "openblas 0.3.21 threads:2";
  h.workspace_limit = 1 << 20;
  h.policy = BatchPolicy::kAll;
  h.blas_threads = 2;
  return h;
}

KernelPlan Planned(const std::string& name, std::vector<Segment> segments,
                   std::optional<Segment> undivided) {
  KernelPlan kp;
  kp.kernel.name = name;
  kp.kernel.problem.c = 8;
  kp.kernel.problem.h = kp.kernel.problem.w = 12;
  kp.kernel.problem.k = 16;
  kp.kernel.problem.r = kp.kernel.problem.s = 3;
  kp.kernel.mini_batch = 4;
  kp.status = KernelPlanStatus::kPlanned;
  for (const Segment& s : segments) {
    kp.config.time_ms += s.time_ms;
    kp.config.workspace_bytes = std::max(kp.config.workspace_bytes, s.workspace_bytes);
  }
  kp.config.segments = std::move(segments);
  kp.undivided = undivided;
  return kp;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(BenchTable, HeaderNamesDeviceLimitPolicyAndThreads) {
  const std::string table = FormatBenchTable(
      Header(), {Planned("a/fwd", {{4, 1, 2.0, 3 << 20}}, Segment{4, 1, 2.0, 3 << 20})}, kNames);
  const std::vector<std::string> lines = Lines(table);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[0], "cpu-bench tiny: 1 kernel, mini-batch 4, fp32 NCHW");
  EXPECT_EQ(lines[1],
            "Device: cpu \"Test CPU\", 4 cores, 8 GiB, openblas 0.3.21 threads:2; "
            "fingerprint " +
                HashHex(Header().device.Hash()));
  EXPECT_EQ(lines[2], "Workspace limit 1 MiB per kernel, policy all, BLAS threads 2");
  BenchTableHeader openblas_default = Header();
  openblas_default.blas_threads = 0;
  EXPECT_THAT(FormatBenchTable(openblas_default, {}, kNames),
              HasSubstr("BLAS threads OpenBLAS's default\n"));
}

TEST(BenchTable, RowsUseAlgorithmNamesAndShowTheWorkspace) {
  const std::string table = FormatBenchTable(
      Header(),
      {Planned("down/bwd_filter",
               {{1, 1, 0.5, 2 << 20}, {1, 1, 0.5, 2 << 20}, {1, 0, 0.25, 0}, {1, 7, 0.25, 0}},
               Segment{4, 0, 4.0, 0})},
      kNames);
  const std::vector<std::string> lines = Lines(table);
  ASSERT_EQ(lines.size(), 7u) << table;
  EXPECT_EQ(lines[3], "");
  EXPECT_THAT(lines[4], ::testing::MatchesRegex(
                            "kernel +shape +segments +ws MiB +time ms +undiv ms +speedup"));
  EXPECT_THAT(lines[5], ::testing::MatchesRegex(
                            "down/bwd_filter +n4 c8 12x12 k16 3x3 s1 p0 +"
                            "2x1@im2col_gemm \\+ 1x1@direct \\+ 1x1@algo7 +2\\.0 +1\\.500 +"
                            "4\\.000 +2\\.67x"));
  EXPECT_THAT(lines[6], ::testing::MatchesRegex("total +2\\.0 +1\\.500 +4\\.000 +2\\.67x"));
}

// A kernel without an undivided baseline prints n/a and stays out of both totals; so does one
// without any configuration.
TEST(BenchTable, KernelsWithoutABaselineAreNotInTheTotals) {
  KernelPlan infeasible = Planned("c/fwd", {}, std::nullopt);
  infeasible.status = KernelPlanStatus::kInfeasible;
  infeasible.reason = "nothing fits within 1 MiB";
  const std::string table = FormatBenchTable(
      Header(),
      {Planned("a/fwd", {{4, 1, 1.0, 1 << 20}}, Segment{4, 0, 3.0, 0}),
       Planned("b/fwd", {{2, 1, 5.0, 1 << 20}, {2, 1, 5.0, 1 << 20}}, std::nullopt), infeasible},
      kNames);
  const std::vector<std::string> lines = Lines(table);
  ASSERT_EQ(lines.size(), 10u) << table;
  EXPECT_THAT(lines[5], ::testing::MatchesRegex("a/fwd .* 1\\.000 +3\\.000 +3\\.00x"));
  EXPECT_THAT(lines[6],
              ::testing::MatchesRegex("b/fwd .*2x2@im2col_gemm +1\\.0 +10\\.000 +n/a +n/a"));
  EXPECT_THAT(lines[7], ::testing::MatchesRegex("c/fwd .*INFEASIBLE: nothing fits within 1 MiB"));
  // Only a/fwd: 1 ms planned against 3 ms undivided, not 11 ms against 3 ms.
  EXPECT_THAT(lines[8], ::testing::MatchesRegex(
                            "total \\(1 of 3 kernels\\) +1\\.0 +1\\.000 +3\\.000 +3\\.00x"));
  EXPECT_EQ(lines[9],
            "Not in the totals: 1 kernel with no undivided configuration within the limit (n/a), "
            "1 kernel without a configuration.");
  EXPECT_THAT(table, Not(::testing::ContainsRegex(" 0\\.000")));
  EXPECT_THAT(table, Not(HasSubstr("0.00x")));
}

TEST(BenchTable, NothingCountedPrintsDashes) {
  const std::string table =
      FormatBenchTable(Header(), {Planned("b/fwd", {{4, 1, 5.0, 1 << 20}}, std::nullopt)}, kNames);
  EXPECT_THAT(table, HasSubstr("\ntotal (0 of 1 kernel)"));
  EXPECT_THAT(table, ::testing::ContainsRegex("\ntotal \\(0 of 1 kernel\\) +- +- +- +-\n"));
  EXPECT_THAT(table, HasSubstr("Not in the totals: 1 kernel with no undivided configuration"));
}

}  // namespace
}  // namespace ucudnn::cli
