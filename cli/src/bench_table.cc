#include "bench_table.h"

#include "ucudnn/core/problem.h"
#include "ucudnn/core/units.h"
#include "ucudnn/planner/plan_table.h"

namespace ucudnn::cli {

std::string FormatBenchTable(const BenchTableHeader& header, const NetworkPlan& plan) {
  const DeviceFingerprint& d = header.device;
  std::string out =
      "cpu-bench " + header.network + ", mini-batch " +
      (plan.kernels.empty() ? std::string("-")
                            : std::to_string(plan.kernels.front().kernel.mini_batch)) +
      "\n";
  out += "Device: " + d.backend + " \"" + d.name + "\", " + std::to_string(d.sm_count) +
         " cores, " + FormatBytes(d.memory_bytes) + ", " + (d.blas.empty() ? "no BLAS" : d.blas) +
         " (BLAS threads " +
         (header.blas_threads > 0 ? std::to_string(header.blas_threads) : "OpenBLAS's default") +
         "); fingerprint " + HashHex(d.Hash()) + "\n\n";
  return out + FormatPlanTable(plan, AlgorithmNamerFor(d.backend));
}

}  // namespace ucudnn::cli
