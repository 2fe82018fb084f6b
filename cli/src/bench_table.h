// The table that `ucudnn cpu-bench` prints. Pure formatting (no I/O), tested in
// tests/tools/bench_table_test.cc; laid out like the planner's plan table (plan_table.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"

namespace ucudnn::cli {

// What the benchmark ran on and with, for the lines above the table.
struct BenchTableHeader {
  std::string network;
  DeviceFingerprint device;
  uint64_t workspace_limit = 0;  // per kernel
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  int blas_threads = 1;  // as requested (--threads, 0: OpenBLAS's default); blas says what ran
};

// Three lines of context (network, mini-batch and types; device and fingerprint; limit, policy
// and BLAS threads), then one row per kernel: name, shape, segments with algorithm names
// ("2x8@im2col_gemm + 1x4@direct", runs of equal segments in execution order), the largest
// segment workspace in MiB, the predicted time, the undivided baseline's time and the speedup.
// A kernel without an undivided configuration within the limit shows "n/a" for both; one that
// is not kPlanned shows its reason. Only kernels with both a plan and a baseline enter the totals,
// so that the total speedup compares like with like; a note counts the others.
// `algorithm_names` maps algorithm ids to names; an unknown id prints as "algo<id>".
std::string FormatBenchTable(const BenchTableHeader& header, const std::vector<KernelPlan>& kernels,
                             const std::map<int, std::string>& algorithm_names);

}  // namespace ucudnn::cli
