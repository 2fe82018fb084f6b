#include "bench_table.h"

#include "ucudnn/core/problem.h"
#include "ucudnn/core/units.h"
#include "ucudnn/planner/plan_table.h"

namespace ucudnn::cli {

std::string FormatBenchTable(const BenchTableHeader& header, const NetworkPlan& plan,
                             const std::map<int, std::string>& algorithm_names) {
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
  // The CPU backend's algorithms are the same for every op.
  const AlgorithmNamer names = [&](ConvOp, int algo) {
    auto it = algorithm_names.find(algo);
    return it != algorithm_names.end() ? it->second : std::string();
  };
  return out + FormatPlanTable(plan, names);
}

}  // namespace ucudnn::cli
