// The `ucudnn` commands. Each returns the process exit status (0 ok, 1 failure, 2 usage) and
// prints errors to stderr as sentences.
#pragma once

#include <cstdint>
#include <string>

#include "grpc_client.h"

namespace ucudnn::cli {

// Which kernels a command works on: a built-in network or a user's network file.
struct NetworkOptions {
  std::string network = "resnet50";  // built-in name, or a path to a network CSV
  int64_t batch = 256;
  std::string dtype = "fp32";  // fp32 | fp16 | bf16
  std::string layout = "";     // nchw | nhwc; default nchw for fp32, nhwc otherwise
  std::string math = "";       // default | tensor_op | ...; default by dtype (DefaultMath)
};

// ---- Local (no server, no database) ----
int RunNetworks();
int RunProblem(const NetworkOptions& net, bool unique_only);
int RunGpus();
struct CpuBenchOptions {
  NetworkOptions net;
  std::string policy = "power_of_two";
  std::string workspace = "64MiB";
  std::string output_csv;  // also write the timings here (timing CSV format)
  int threads = 1;
};
int RunCpuBench(const CpuBenchOptions& options);

// ---- Database ----
int RunMigrate(const std::string& database_url);
int RunImport(const std::string& database_url, const std::string& file);

// ---- Server ----
int RunHealth(const ServerOptions& server);
int RunDevices(const ServerOptions& server);
int RunWorkers(const ServerOptions& server, bool alive_only);
int RunJobs(const ServerOptions& server, const std::string& state, int limit);
// Re-queues a failed job (CatalogService.RetryJob; needs the token).
int RunRetryJob(const ServerOptions& server, int64_t job_id);
struct PlanOptions {
  NetworkOptions net;
  std::string backend = "auto";  // the local device: auto | cpu | cudnn
  std::string device;            // or a device of the catalog: hash prefix or index
  std::string policy = "power_of_two";
  std::string workspace = "64MiB";
  std::string mode = "per_kernel";  // per_kernel | total (= total_shared) | total_sum
  std::string wait = "0";           // how long to wait for benchmarks ("10m")
  bool json = false;
};
int RunPlan(const ServerOptions& server, const PlanOptions& options);
int RunExplain(const ServerOptions& server, const PlanOptions& options);
int RunTimings(const ServerOptions& server, const PlanOptions& options);

}  // namespace ucudnn::cli
