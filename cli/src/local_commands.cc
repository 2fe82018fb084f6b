// Commands that need neither a server nor a database.
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "bench_table.h"
#include "commands.h"
#include "progress.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/core/units.h"
#include "ucudnn/engine/benchmark.h"
#include "ucudnn/planner/planner.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::cli {

// A network's kernels travel in one plan request.
static_assert(kMaxNetworkKernels == static_cast<size_t>(kMaxKernelsPerRequest));
static_assert(kMaxNetworkKernelNameBytes == kMaxKernelNameBytes);

Result<std::vector<Kernel>> ResolveKernels(const NetworkOptions& net) {
  UCUDNN_ASSIGN_OR_RETURN(NetworkPrecision precision,
                          ParseNetworkPrecision(net.dtype, net.layout, net.math));
  return NetworkKernels(net.network, net.batch, precision);
}

int Fail(const Status& status) {
  std::fprintf(stderr, "ucudnn: %s\n", status.ToString().c_str());
  return 1;
}

int RunNetworks(bool json) {
  nlohmann::json listed = nlohmann::json::array();
  if (!json) std::printf("%-14s %8s %8s\n", "network", "convs", "unique");
  for (const std::string& name : NetworkNames()) {
    auto kernels = NetworkKernels(name, 1);
    if (!kernels.ok()) return Fail(kernels.status());
    std::set<std::string> unique;
    for (const Kernel& k : *kernels) unique.insert(CanonicalKey(k.problem));
    if (json) {
      listed.push_back(
          {{"name", name}, {"convs", kernels->size() / 3}, {"unique", unique.size() / 3}});
    } else {
      std::printf("%-14s %8zu %8zu\n", name.c_str(), kernels->size() / 3, unique.size() / 3);
    }
  }
  if (json) std::printf("%s\n", nlohmann::json{{"networks", listed}}.dump(2).c_str());
  return 0;
}

int RunProblem(const NetworkOptions& net, bool unique_only, bool json) {
  auto kernels = ResolveKernels(net);
  if (!kernels.ok()) return Fail(kernels.status());
  std::set<uint64_t> seen;
  nlohmann::json listed = nlohmann::json::array();
  if (!json) std::printf("%-36s %-16s %s\n", "kernel", "hash", "canonical key");
  for (const Kernel& k : *kernels) {
    const uint64_t hash = StableHash(k.problem);
    if (unique_only && !seen.insert(hash).second) continue;
    if (json) {
      listed.push_back({{"name", k.name},
                        {"mini_batch", k.mini_batch},
                        {"problem_hash", HashHex(hash)},
                        {"canonical_key", CanonicalKey(k.problem)}});
      continue;
    }
    std::printf("%-36s %016llx %s\n", k.name.c_str(), static_cast<unsigned long long>(hash),
                CanonicalKey(k.problem).c_str());
  }
  if (json) std::printf("%s\n", nlohmann::json{{"kernels", listed}}.dump(2).c_str());
  return 0;
}

int RunGpus(bool json) {
  const int count = GpuCount();
  if (count == 0) {
    std::fprintf(stderr, "ucudnn: no GPU visible to the cuDNN backend%s\n",
                 BuildHasCudnn() ? "" : " (this build has no cuDNN backend)");
    return 1;
  }
  nlohmann::json listed = nlohmann::json::array();
  for (int i = 0; i < count; ++i) {
    auto backend = MakeBackend("cudnn", i);
    if (!backend.ok()) return Fail(backend.status());
    const DeviceFingerprint& f = (*backend)->fingerprint();
    if (json) {
      listed.push_back({{"index", i},
                        {"name", f.name},
                        {"fingerprint_hash", HashHex(f.Hash())},
                        {"fingerprint_key", f.Key()}});
      continue;
    }
    std::printf("gpu %d: %s  fingerprint %016llx  %s\n", i, f.name.c_str(),
                static_cast<unsigned long long>(f.Hash()), f.Key().c_str());
  }
  if (json) std::printf("%s\n", nlohmann::json{{"gpus", listed}}.dump(2).c_str());
  return 0;
}

int RunCpuBench(const CpuBenchOptions& options) {
  auto kernels = ResolveKernels(options.net);
  if (!kernels.ok()) return Fail(kernels.status());
  auto policy = ParseBatchPolicyChoice("--policy", options.policy);
  if (!policy.ok()) return Fail(policy.status());
  auto limit = ParseByteSize(options.workspace);
  if (!limit.ok()) return Fail(limit.status());
  CpuBackendOptions cpu_options;
  cpu_options.blas_threads = options.threads;
  CpuBackend backend(cpu_options);

  // Each distinct problem is measured once; kernels sharing it share the table.
  std::map<std::string, TimingTable> tables;
  std::vector<const Kernel*> unique;
  for (const Kernel& k : *kernels) {
    if (tables.emplace(CanonicalKey(k.problem), TimingTable{}).second) unique.push_back(&k);
  }
  const int64_t configs_per_problem =
      static_cast<int64_t>(MicroBatchSizes(*policy, options.net.batch).size()) *
      static_cast<int64_t>(backend.Algorithms(ConvOp::kForward).size());
  ProgressBar bar("cpu-bench", configs_per_problem * static_cast<int64_t>(unique.size()));
  int64_t done_before = 0;
  for (const Kernel* k : unique) {
    auto table = BenchmarkProblem(
        backend, k->problem, options.net.batch, *policy, {},
        [&](const BenchmarkProgress& p) { bar.Update(done_before + p.done, k->name); });
    if (!table.ok()) return Fail(table.status().WithContext(k->name));
    done_before += configs_per_problem;
    tables[CanonicalKey(k->problem)] = std::move(*table);
  }
  bar.Finish();

  if (!options.output_csv.empty()) {
    TimingTables files;
    for (const Kernel* k : unique) {
      files[CanonicalKey(k->problem)] =
          ProblemTimings{k->problem, k->name, options.net.batch, tables[CanonicalKey(k->problem)]};
    }
    auto csv = WriteTimingCsv(files);
    if (!csv.ok()) return Fail(csv.status());
    std::ofstream out(options.output_csv);
    out << DeviceHeader(backend.fingerprint(), {"cpu-bench " + options.net.network}) << *csv;
    if (!out) return Fail(Internal("cannot write " + options.output_csv));
    std::printf("timings written to %s (load them with `ucudnn import`)\n",
                options.output_csv.c_str());
  }

  // The planner's per-kernel DP and undivided baselines, as the server would plan it.
  PlanRequest request;
  request.device = backend.fingerprint();
  request.kernels = *kernels;
  request.policy = *policy;
  request.workspace_mode = WorkspaceMode::kPerKernel;
  request.workspace_bytes = *limit;
  std::vector<const TimingTable*> table_of_kernel;
  table_of_kernel.reserve(kernels->size());
  for (const Kernel& k : *kernels) table_of_kernel.push_back(&tables[CanonicalKey(k.problem)]);
  auto plan = PlanNetwork(request, table_of_kernel);
  if (!plan.ok()) return Fail(plan.status());
  const BenchTableHeader header{options.net.network, backend.fingerprint(), options.threads};
  std::printf("\n%s", FormatBenchTable(header, *plan).c_str());
  return 0;
}

}  // namespace ucudnn::cli
