// The table that `ucudnn cpu-bench` prints: what the benchmark ran on, then the planner's plan
// table (plan_table.h) with the CPU algorithms' names. Pure formatting (no I/O), tested in
// tests/tools/bench_table_test.cc.
#pragma once

#include <cstdint>
#include <string>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"

namespace ucudnn::cli {

// What the benchmark ran on and with, for the lines above the table.
struct BenchTableHeader {
  std::string network;
  DeviceFingerprint device;
  int blas_threads = 1;  // as requested (--threads, 0: OpenBLAS's default); blas says what ran
};

// Two lines of context (network and mini-batch; device, BLAS threads and fingerprint), a blank
// line, then FormatPlanTable(plan) with segments named by the device's backend
// ("2x8@im2col_gemm"; an unknown id prints as "algo<id>").
std::string FormatBenchTable(const BenchTableHeader& header, const NetworkPlan& plan);

}  // namespace ucudnn::cli
